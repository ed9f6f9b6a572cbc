/*
 * gpuslice-runtime: the OCI runtime wrapper for engines that cannot read
 * CDI (Docker 20-24 --runtime, containerd 1.6 ctr --runc-binary, Nomad).
 * The engine runs it instead of runc for every container operation; it
 * hands each one to the real runtime with execv, unchanged, except that
 * for a `create` or `run` whose config.json asks for CDI devices it
 * applies their edits to config.json first (apply.h), from the CDI cache
 * (cache.h), and gives up if they cannot be applied. The cache is made by
 * gpuslice-cdi-cache (Python: it validates every spec) only when it is
 * missing or older than the configuration or a spec; otherwise nothing but
 * this program runs.
 *
 * It sits on every `state`, `kill`, `delete`...: that path reads no file,
 * allocates nothing and makes a handful of system calls before the exec.
 * Only create/run read the bundle's config.json, and a config.json that
 * asks for nothing (or that cannot be read or parsed: the real runtime will
 * say so) is never written and never stops the container.
 *
 * Exit status: the real runtime's (it replaces this process); 1 when the
 * request was refused or the cache could not be made (the real runtime is
 * not run); 2 for the wrapper's own errors (no real runtime, one of its
 * options without a value).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "apply.h"
#include "args.h"
#include "cache.h"
#include "json.h"
#include "request.h"
#include "util.h"
#include "version.h"

extern char **environ;

#define PROGRAM "gpuslice-runtime"
#define CACHE_TOOL "gpuslice-cdi-cache"
#define LAST_LINE_MAX 2048 /* of the cache tool's stderr, for the log line */
/* Where to look when PATH is unset: a shim started with a bare environment
 * still finds a distribution's runc in /usr/sbin or /usr/bin. */
#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

enum { EXIT_APPLY = 1, EXIT_OWN = 2 };

/* Printed before the real runtime's --help, which says the rest. */
#define USAGE                                                                              \
    "usage: " PROGRAM " [--gpuslice-runtime PATH] [--gpuslice-cache-tool PATH] "           \
    "[RUNTIME GLOBAL FLAGS] COMMAND [ARGS...]\n"                                            \
    "       " PROGRAM " --help | --version\n"                                               \
    "An OCI runtime wrapper: gpuslice's CDI devices applied to config.json at create and\n" \
    "run, then every command run by the real runtime (--gpuslice-runtime, else\n"          \
    "$GPUSLICE_RUNTIME_BINARY, else runc in PATH), whose help follows.\n\n"

/* The global flags, for the log line an error also leaves. */
static const struct gs_rt_globals *globals;

/* ------------------------------------------------------------ reporting */

/*
 * With --log FILE --log-format json, append the error as runc logs its own:
 * containerd's shim reports the last "error" entry of that file as the
 * reason a create failed (stderr alone would be lost there).
 */
static void log_error(const char *line, size_t n)
{
    if (!globals || !globals->log || !*globals->log || !globals->log_format ||
        strcmp(globals->log_format, "json") != 0)
        return;
    struct gs_str b = {0};
    gs_str_add(&b, "{\"level\":\"error\",\"msg\":");
    gs_json_quote(&b, line, n);
    /* RFC 3339 in UTC: localtime would read /etc/localtime for nothing. */
    char when[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    gs_str_addf(&b, ",\"time\":\"%s\"}\n", when);
    int fd = open(globals->log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0644);
    if (fd >= 0) {
        gs_write_all(fd, b.s, b.len); /* a failure has nowhere left to be said */
        close(fd);
    }
    gs_str_free(&b);
}

/* "gpuslice-runtime: error: ..." on stderr (and in the JSON log); exit.
 * The arguments are paths and PATH, from the caller: made one line. */
__attribute__((noreturn, format(printf, 2, 3))) static void die(int code, const char *fmt, ...)
{
    struct gs_str text = {0}, b = {0};
    va_list ap;
    va_start(ap, fmt);
    char small[512];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof small) {
        gs_str_add(&text, small);
    } else { /* a long path in it: format again at length */
        va_start(ap, fmt);
        char *big = NULL;
        if (vasprintf(&big, fmt, ap) >= 0)
            gs_str_add(&text, big);
        free(big);
        va_end(ap);
    }
    gs_str_add(&b, PROGRAM ": error: ");
    gs_quote(&b, gs_str_cstr(&text), text.len, GS_AS_PATH);
    gs_str_free(&text);
    log_error(b.s, b.len);
    gs_str_addc(&b, '\n');
    gs_write_all(2, b.s, b.len);
    exit(code);
}

/* ------------------------------------------------------- finding programs */

/* Our own executable's identity, looked up once and only when needed. */
static int is_self(const struct stat *st)
{
    static int known = -1;
    static struct stat self;
    if (known < 0)
        known = stat("/proc/self/exe", &self) == 0;
    return known && self.st_dev == st->st_dev && self.st_ino == st->st_ino;
}

static int executable_file(const char *path, struct stat *st)
{
    return stat(path, st) == 0 && S_ISREG(st->st_mode) && access(path, X_OK) == 0;
}

static const char *search_path_value(void)
{
    const char *path = getenv("PATH");
    return path ? path : DEFAULT_PATH;
}

/*
 * execvp's search for name in PATH (an empty entry is the current folder),
 * into out. skip_self: pass over our own executable (a link to it named
 * runc, or a copy hard-linked there), remembering the first one in *self.
 * 1 if found.
 */
static int search_path(const char *name, int skip_self, char *out, size_t cap, char *self,
                       size_t self_cap)
{
    const char *p = search_path_value();
    for (;;) {
        const char *end = strchrnul(p, ':');
        int dl = (int)(end - p);
        int n = dl ? snprintf(out, cap, "%.*s/%s", dl, p, name) : snprintf(out, cap, "%s", name);
        struct stat st;
        if (n > 0 && (size_t)n < cap && executable_file(out, &st)) {
            if (!skip_self || !is_self(&st))
                return 1;
            if (self && !*self)
                snprintf(self, self_cap, "%s", out);
        }
        if (!*end)
            return 0;
        p = end + 1;
    }
}

/* The real runtime's path, into buf (or a pointer to the given one). */
static const char *real_runtime(const char *given, char *buf, size_t cap)
{
    const char *how = "--gpuslice-runtime";
    if (!given || !*given) {
        given = getenv("GPUSLICE_RUNTIME_BINARY");
        how = "GPUSLICE_RUNTIME_BINARY";
    }
    if (given && *given) {
        struct stat st;
        if (strchr(given, '/')) {
            /* Two stats, to fail rather than exec ourselves for ever. */
            if (stat(given, &st) == 0 && is_self(&st))
                die(EXIT_OWN, "%s names gpuslice-runtime itself (%s); name the real runtime",
                    how, given);
            return given;
        }
        if (search_path(given, 1, buf, cap, NULL, 0))
            return buf;
        die(EXIT_OWN, "the real runtime %s (%s) is not in PATH (%s)", given, how,
            search_path_value());
    }
    char self[PATH_MAX] = "";
    if (search_path("runc", 1, buf, cap, self, sizeof self))
        return buf;
    die(EXIT_OWN,
        "no runc in PATH (%s%s%s); name the real runtime with --gpuslice-runtime PATH or "
        "GPUSLICE_RUNTIME_BINARY",
        search_path_value(), *self ? "; this wrapper is " : "", self);
}

/* The cache tool: --gpuslice-cache-tool, GPUSLICE_CACHE_TOOL, next to our
 * own executable, in PATH. NULL (with the name tried in *tried) if not found. */
static const char *find_cache_tool(const char *given, char *buf, size_t cap, const char **tried)
{
    if (!given || !*given)
        given = getenv("GPUSLICE_CACHE_TOOL");
    if (given && *given) {
        *tried = given;
        if (strchr(given, '/'))
            return given;
        return search_path(given, 0, buf, cap, NULL, 0) ? buf : NULL;
    }
    *tried = CACHE_TOOL;
    struct stat st;
    ssize_t n = readlink("/proc/self/exe", buf, cap - 1);
    if (n > 0) {
        buf[n] = '\0';
        char *slash = strrchr(buf, '/');
        if (slash && (size_t)(slash + 1 - buf) + sizeof CACHE_TOOL <= cap) {
            memcpy(slash + 1, CACHE_TOOL, sizeof CACHE_TOOL);
            if (executable_file(buf, &st))
                return buf;
        }
    }
    return search_path(CACHE_TOOL, 0, buf, cap, NULL, 0) ? buf : NULL;
}

/* ------------------------------------------------------------- the bundle */

/* The bundle as an absolute path (malloc'ed), as runc resolves it: against
 * the current folder, links left alone. */
static char *absolute_bundle(const char *bundle)
{
    if (bundle[0] == '/')
        return gs_xstrdup(bundle);
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd))
        die(EXIT_APPLY, "cannot find the current folder: %s", strerror(errno));
    struct gs_str b = {0};
    gs_str_add(&b, cwd);
    if (strcmp(bundle, ".") != 0) {
        if (strcmp(cwd, "/") != 0)
            gs_str_addc(&b, '/');
        gs_str_add(&b, bundle);
    }
    return gs_str_take(&b);
}

/* --------------------------------------------------------- the cache tool */

/* A pipe end at fd 3 or above: with 0-2 closed by our caller, a pipe could
 * land there and then be dup2'ed over by the redirections. */
static int above_stdio(int fd)
{
    if (fd >= 3 || fd < 0)
        return fd;
    int high = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    close(fd);
    return high;
}

/* The last non-blank line seen, from the cache tool's stderr as it comes. */
struct last_line {
    char cur[LAST_LINE_MAX], last[LAST_LINE_MAX];
    size_t cur_len, last_len;
    int cur_blank;
};

static void line_end(struct last_line *l)
{
    if (!l->cur_blank) {
        size_t n = l->cur_len;
        while (n && (l->cur[n - 1] == '\r' || l->cur[n - 1] == ' ' || l->cur[n - 1] == '\t'))
            n--;
        memcpy(l->last, l->cur, n);
        l->last_len = n;
    }
    l->cur_len = 0;
    l->cur_blank = 1;
}

static void line_feed(struct last_line *l, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '\n') {
            line_end(l);
            continue;
        }
        if (l->cur_len < sizeof l->cur)
            l->cur[l->cur_len++] = c;
        if (c != ' ' && c != '\t' && c != '\r')
            l->cur_blank = 0;
    }
}

/* Drop a UTF-8 sequence the bound cut in two: the log line stays valid. */
static size_t utf8_whole(const char *s, size_t n)
{
    size_t k = n;
    while (k && ((unsigned char)s[k - 1] & 0xC0) == 0x80 && n - k < 3)
        k--;
    if (k && (unsigned char)s[k - 1] >= 0xC0) {
        unsigned char lead = (unsigned char)s[k - 1];
        size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
        if (n - (k - 1) < need)
            return k - 1;
    }
    return n;
}

/*
 * Run CACHE_TOOL --output FILE and wait: stdin /dev/null, stdout onto our
 * stderr (our stdout may be a container's console or a pipe the engine
 * parses), stderr through a pipe that is copied to our stderr as it comes
 * and whose last line becomes the log line. Returns only if it succeeded.
 */
static void run_cache_tool(const char *tool, const char *cache)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0 || (p[0] = above_stdio(p[0])) < 0 ||
        (p[1] = above_stdio(p[1])) < 0)
        die(EXIT_APPLY, "cannot run the CDI cache tool %s: %s", tool, strerror(errno));

    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, 2, 1);
    posix_spawn_file_actions_adddup2(&fa, p[1], 2);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    /* The fds our caller passed on (--preserve-fds, sockets) are for the
     * real runtime; the tool has no use for them and must not hold a
     * pipe the engine waits on. (Ours are O_CLOEXEC anyway.) */
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);
#endif
    /* An ignored SIGCHLD (inherited from whoever started us) would reap the
     * tool before waitpid could see its status. */
    struct sigaction dfl = {.sa_handler = SIG_DFL}, ign = {.sa_handler = SIG_IGN}, old_chld,
                     old_pipe;
    sigemptyset(&dfl.sa_mask);
    sigemptyset(&ign.sa_mask);
    sigaction(SIGCHLD, &dfl, &old_chld);

    char *args[] = {(char *)tool, "--output", (char *)cache, NULL};
    pid_t pid;
    int e = posix_spawn(&pid, tool, &fa, NULL, args, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(p[1]);
    if (e != 0) {
        close(p[0]);
        die(EXIT_APPLY, "cannot run the CDI cache tool %s: %s", tool, strerror(e));
    }

    /* A closed stderr must not kill us with SIGPIPE halfway: the exit
     * status is what matters. Both dispositions are put back before the
     * real runtime inherits them. */
    sigaction(SIGPIPE, &ign, &old_pipe);
    static struct last_line line;
    line.cur_blank = 1;
    char buf[4096];
    for (;;) {
        ssize_t r = read(p[0], buf, sizeof buf);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        gs_write_all(2, buf, (size_t)r);
        line_feed(&line, buf, (size_t)r);
    }
    line_end(&line);
    close(p[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR)
            die(EXIT_APPLY, "the CDI cache tool %s: waitpid: %s", tool, strerror(errno));
    }
    sigaction(SIGPIPE, &old_pipe, NULL);
    sigaction(SIGCHLD, &old_chld, NULL);

    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return;
    if (WIFSIGNALED(status))
        die(EXIT_APPLY, "the CDI cache tool %s was killed by signal %d (%s)", tool,
            WTERMSIG(status), strsignal(WTERMSIG(status)));
    if (!line.last_len)
        die(EXIT_APPLY, "the CDI cache tool %s failed (exit status %d) and said nothing", tool,
            WEXITSTATUS(status));
    /* It said why on stderr already; the log gets the same line. */
    log_error(line.last, utf8_whole(line.last, line.last_len));
    exit(EXIT_APPLY);
}

/* ------------------------------------------------------------- the request */

/* The cache, current: as it is, or made again first. */
static json_t *current_cache(const struct gs_rt_globals *g)
{
    const char *path = gs_rt_cache_path();
    json_t *cache;
    if (gs_rt_cache_load(path, 1, &cache) == GS_OK)
        return cache;
    char buf[PATH_MAX];
    const char *tried;
    const char *tool = find_cache_tool(g->cache_tool, buf, sizeof buf, &tried);
    if (!tool)
        die(EXIT_APPLY, "cannot run the CDI cache tool %s: %s", tried, strerror(ENOENT));
    run_cache_tool(tool, path);
    /* Just made: what it was made from is what there is now, even if it
     * says it must be made again next time. */
    if (gs_rt_cache_load(path, 0, &cache) != GS_OK)
        die(EXIT_APPLY, "%s after %s made it", gs_message(), tool);
    return cache;
}

/*
 * For a create or run: if the bundle's config.json asks for CDI devices,
 * apply them and replace the file (same mode). config.json is read once,
 * not through a link, without waiting on a FIFO.
 */
static void serve_request(const struct gs_rt_globals *g, const char *bundle)
{
    char *abs = absolute_bundle(bundle);
    struct gs_str path = {0};
    gs_str_add(&path, abs);
    gs_str_add(&path, "/config.json");
    char *text;
    size_t len;
    unsigned mode;
    if (gs_rt_read_config(path.s, 0, &text, &len, &mode) != 0) {
        /* A link that asks is refused by name; anything else is runc's to report. */
        if (errno == ELOOP && gs_rt_link_asks(path.s))
            die(EXIT_APPLY, "%s is a symbolic link, which is not followed here; write the "
                            "config.json itself", path.s);
        goto out;
    }
    if (!gs_rt_text_asks(text, len)) {
        free(text);
        goto out;
    }
    json_error_t je;
    json_t *config = json_loadb(text, len, 0, &je);
    free(text);
    if (!config)
        die(EXIT_APPLY, "%s is not JSON this runtime reads: %s (line %d, column %d)", path.s,
            je.text, je.line, je.column);
    json_t *cache = current_cache(g);
    int rc = gs_rt_apply(config, cache, stat);
    json_decref(cache);
    if (rc == GS_ERROR)
        die(EXIT_APPLY, "%s", gs_message());
    if (rc == GS_OK) {
        /* No fsync: a bundle lives as long as its container, in /run. */
        char *body = json_dumps(config, JSON_COMPACT);
        int dirfd = open(abs, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        struct gs_str tmp = {0};
        gs_str_addf(&tmp, ".config.json.%ld.tmp", (long)getpid());
        if (!body || dirfd < 0 ||
            gs_replace_at(dirfd, tmp.s, "config.json", body, strlen(body), mode, path.s) !=
                GS_OK)
            die(EXIT_APPLY, "cannot write %s", body && dirfd >= 0 ? gs_message() : path.s);
        close(dirfd);
        gs_str_free(&tmp);
        free(body);
    }
    json_decref(config);
out:
    gs_str_free(&path);
    free(abs);
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv)
{
    gs_program = PROGRAM;
    struct gs_rt_globals g;
    gs_rt_parse_globals(&argc, argv, &g);
    globals = &g;
    if (g.bad_option)
        die(EXIT_OWN, "%s needs a value (a path)", g.bad_option);

    /* Ours first, then the real runtime's own: Docker's `info` reads the
     * last line that says "version" (runc's), as with runc alone. */
    if (g.version)
        printf(PROGRAM " version %s\n", GPUSLICE_VERSION);
    if (g.help)
        fputs(USAGE, stdout);
    if (fflush(stdout) != 0)
        die(EXIT_OWN, "stdout: %s", strerror(errno));

    char runtime_buf[PATH_MAX];
    const char *runtime = real_runtime(g.runtime, runtime_buf, sizeof runtime_buf);
    argv[0] = (char *)runtime;

    const char *cmd = g.command ? argv[g.command] : NULL;
    if (cmd && !g.help && !g.version && (strcmp(cmd, "create") == 0 || strcmp(cmd, "run") == 0)) {
        struct gs_rt_create c;
        gs_rt_parse_create(argc, argv, g.command + 1, &c);
        /* --help, or not exactly one container id: runc creates nothing. */
        const char *bundle = c.bundle && *c.bundle ? c.bundle : ".";
        if (!c.help && c.positional == 1)
            serve_request(&g, bundle);
    }
    execv(runtime, argv);
    die(EXIT_OWN, "cannot run the real runtime %s: %s", runtime, strerror(errno));
}
