/*
 * The OCI runtime command line as runc reads it (see args.h).
 *
 * Go's flag package, which runc's CLI library uses, takes a flag as "-name"
 * or "--name", its value as "-name=value" or, unless the flag is boolean,
 * the next argument; "--" ends the flags; "-" alone is not a flag. The
 * first argument that is not a flag (nor a flag's value) is the command.
 */
#include "args.h"

#include <stddef.h>
#include <string.h>

struct flag {
    const char *name;  /* after the dashes */
    size_t len;        /* of the name, up to any '=' */
    const char *value; /* after the '=', or NULL */
};

/* 1 and *f if a is written as a flag; 0 if it is an argument. The caller
 * has dealt with "--". A malformed flag ("---x", "-=x") is still a flag
 * here (with a name that matches nothing): runc refuses it, not us. */
static int split_flag(const char *a, struct flag *f)
{
    if (a[0] != '-' || a[1] == '\0')
        return 0;
    const char *n = a[1] == '-' ? a + 2 : a + 1;
    const char *eq = strchr(n, '=');
    f->name = n;
    f->len = eq ? (size_t)(eq - n) : strlen(n);
    f->value = eq ? eq + 1 : NULL;
    return 1;
}

static int is(const struct flag *f, const char *name)
{
    return strlen(name) == f->len && memcmp(f->name, name, f->len) == 0;
}

static int is_any(const struct flag *f, const char *const *names)
{
    for (; *names; names++)
        if (is(f, *names))
            return 1;
    return 0;
}

/* A boolean flag given "=value" counts as set unless the value is one of
 * the false spellings of Go's strconv.ParseBool (a value that is neither
 * makes runc fail, which is "not run" too). */
static int bool_set(const struct flag *f)
{
    static const char *const no[] = {"0", "f", "F", "false", "FALSE", "False", NULL};
    if (!f->value)
        return 1;
    for (const char *const *p = no; *p; p++)
        if (strcmp(f->value, *p) == 0)
            return 0;
    return 1;
}

/* runc's global flags that take a value; every other one is boolean
 * (debug, systemd-cgroup, help/h, version/v, and unknown ones). */
static const char *const global_valued[] = {"log", "log-format", "root", "criu", "rootless", NULL};

void gs_rt_parse_globals(int *argc, char **argv, struct gs_rt_globals *g)
{
    int n = *argc, i = 1, w = 1;
    *g = (struct gs_rt_globals){0};
    while (i < n) {
        const char *a = argv[i];
        struct flag f;
        if (strcmp(a, "--") == 0) {
            /* Go's flag package drops it; what follows is the command. */
            argv[w++] = argv[i++];
            break;
        }
        if (!split_flag(a, &f))
            break; /* the command */
        if (is(&f, "gpuslice-runtime") || is(&f, "gpuslice-cache-tool")) {
            const char *v = f.value;
            i++;
            if (!v && i < n)
                v = argv[i++];
            if (!v || !*v) {
                g->bad_option = is(&f, "gpuslice-runtime") ? "--gpuslice-runtime"
                                                           : "--gpuslice-cache-tool";
                continue;
            }
            if (is(&f, "gpuslice-runtime"))
                g->runtime = v;
            else
                g->cache_tool = v;
            continue; /* not copied: the real runtime never sees it */
        }
        argv[w++] = argv[i++];
        const char *v = f.value;
        if (!v && is_any(&f, global_valued) && i < n) {
            v = argv[i];
            argv[w++] = argv[i++];
        }
        if (is(&f, "log"))
            g->log = v;
        else if (is(&f, "log-format"))
            g->log_format = v;
        else if ((is(&f, "help") || is(&f, "h")) && bool_set(&f))
            g->help = 1;
        else if ((is(&f, "version") || is(&f, "v")) && bool_set(&f))
            g->version = 1;
    }
    if (i < n)
        g->command = w;
    while (i < n)
        argv[w++] = argv[i++];
    argv[w] = NULL;
    *argc = w;
}

/* The flags of runc create/run that take a value (besides the bundle);
 * the rest (no-pivot, no-new-keyring, detach/d, keep, no-subreaper, and
 * unknown ones) are boolean. */
static const char *const create_valued[] = {"console-socket", "pid-file", "preserve-fds",
                                            "pidfd-socket", NULL};

/*
 * urfave/cli moves a command's flags before its arguments, so a flag may
 * come after the container id ("runc create ID --bundle DIR"): every
 * argument up to "--" is looked at.
 */
void gs_rt_parse_create(int argc, char **argv, int first, struct gs_rt_create *c)
{
    *c = (struct gs_rt_create){0};
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        struct flag f;
        if (strcmp(a, "--") == 0) {
            c->positional += argc - i - 1;
            break;
        }
        if (!split_flag(a, &f)) {
            c->positional++;
            continue;
        }
        if (is(&f, "bundle") || is(&f, "b")) {
            const char *v = f.value;
            if (!v && i + 1 < argc)
                v = argv[++i];
            if (v)
                c->bundle = v;
        } else if (is(&f, "help") || is(&f, "h")) {
            c->help |= bool_set(&f);
        } else if (!f.value && is_any(&f, create_valued)) {
            i++; /* its value, whatever it looks like (Go takes it as is) */
        }
    }
}
