/*
 * Shared helpers: allocation that never returns NULL, growable strings, the
 * failure message, bounded reads, makedirs. See util.h.
 */
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "json.h"

const char *gs_program = "gpuslice-hook";

static void out_of_memory(void)
{
    /* Nothing sensible is left to do; the caller's transaction rolls back
     * when the process dies. No stdio: it may want memory itself. */
    static const char msg[] = ": error: out of memory\n";
    struct iovec v[2] = {{(void *)gs_program, strlen(gs_program)},
                         {(void *)msg, sizeof msg - 1}};
    ssize_t r = writev(2, v, 2);
    (void)r;
    _exit(GS_ERROR);
}

void *gs_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        out_of_memory();
    return p;
}

void *gs_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        out_of_memory();
    return q;
}

char *gs_xstrndup(const char *s, size_t n)
{
    char *p = gs_xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

char *gs_xstrdup(const char *s)
{
    return gs_xstrndup(s, strlen(s));
}

static void reserve(struct gs_str *b, size_t more)
{
    if (more > SIZE_MAX / 2 - b->len)
        out_of_memory();
    size_t need = b->len + more + 1;
    if (need <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap *= 2;
    b->s = gs_xrealloc(b->s, cap);
    b->cap = cap;
}

void gs_str_addn(struct gs_str *b, const char *s, size_t n)
{
    reserve(b, n);
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

void gs_str_add(struct gs_str *b, const char *s)
{
    gs_str_addn(b, s, strlen(s));
}

void gs_str_addc(struct gs_str *b, char c)
{
    gs_str_addn(b, &c, 1);
}

static void str_vaddf(struct gs_str *b, const char *fmt, va_list ap)
{
    char small[256]; /* most messages fit; a longer one is formatted twice */
    va_list copy;
    va_copy(copy, ap);
    int n = vsnprintf(small, sizeof small, fmt, copy);
    va_end(copy);
    if (n < 0)
        return;
    if ((size_t)n < sizeof small) {
        gs_str_addn(b, small, (size_t)n);
        return;
    }
    reserve(b, (size_t)n);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
}

void gs_str_addf(struct gs_str *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    str_vaddf(b, fmt, ap);
    va_end(ap);
}

void gs_str_truncate(struct gs_str *b, size_t len)
{
    if (b->s && len < b->len) {
        b->len = len;
        b->s[len] = '\0';
    }
}

const char *gs_str_cstr(const struct gs_str *b)
{
    return b->s ? b->s : "";
}

char *gs_str_take(struct gs_str *b)
{
    char *s = b->s ? b->s : gs_xstrdup("");
    b->s = NULL;
    b->len = b->cap = 0;
    return s;
}

void gs_str_free(struct gs_str *b)
{
    free(b->s);
    b->s = NULL;
    b->len = b->cap = 0;
}

static struct gs_str message;

static int set_message(int code, const char *fmt, va_list ap)
{
    struct gs_str b = {0};
    str_vaddf(&b, fmt, ap);
    gs_str_free(&message);
    message = b;
    return code;
}

int gs_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = set_message(GS_ERROR, fmt, ap);
    va_end(ap);
    return r;
}

int gs_refuse(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = set_message(GS_NO, fmt, ap);
    va_end(ap);
    return r;
}

int gs_fail_errno(const char *what, int err)
{
    char *shown = gs_quoted(what, strlen(what), GS_AS_PATH);
    int rc = gs_fail("%s: %s", shown, strerror(err));
    free(shown);
    return rc;
}

int gs_fail_path(const char *path, const char *rest)
{
    char *shown = gs_quoted(path, strlen(path), GS_AS_PATH);
    int rc = gs_fail("%s %s", shown, rest);
    free(shown);
    return rc;
}

const char *gs_message(void)
{
    return gs_str_cstr(&message);
}

char *gs_message_take(void)
{
    return gs_str_take(&message);
}

int gs_read_bounded(int fd, size_t max, char **out, size_t *len)
{
    size_t cap = 4096 < max + 1 ? 4096 : max + 1, n = 0;
    char *buf = gs_xmalloc(cap + 1);
    for (;;) {
        if (n == cap) {
            if (cap == max + 1)
                break; /* one byte over: enough to say "over max" */
            cap = cap > (max + 1) / 2 ? max + 1 : cap * 2;
            buf = gs_xrealloc(buf, cap + 1);
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            free(buf);
            errno = e;
            return -1;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return 0;
}

int gs_mkdirs(const char *path, unsigned mode)
{
    struct stat st;
    if (stat(path, &st) == 0)
        return S_ISDIR(st.st_mode) ? 0 : (errno = EEXIST, -1);
    char *p = gs_xstrdup(path);
    int rc = 0;
    /* Parents first; a parent made by someone else meanwhile is fine. */
    for (char *s = p + 1; *s && rc == 0; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(p, 0777) != 0 && errno != EEXIST)
            rc = -1;
        *s = '/';
    }
    if (rc == 0 && mkdir(p, mode) != 0) {
        if (errno != EEXIST || stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) {
            errno = errno ? errno : EEXIST;
            rc = -1;
        }
    }
    int e = errno;
    free(p);
    errno = e;
    return rc;
}

size_t gs_utf8_prefix(const char *s, size_t n)
{
    size_t i = 0;
    while (s[i] && n) {
        i++;
        while ((s[i] & 0xC0) == 0x80)
            i++;
        n--;
    }
    return i;
}

double gs_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int gs_write_all(int fd, const char *s, size_t n)
{
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

int gs_replace_at(int dirfd, const char *tmp, const char *name, const char *body, size_t len,
                  unsigned mode, const char *what)
{
    if (unlinkat(dirfd, tmp, 0) != 0 && errno != ENOENT)
        return gs_fail_errno(what, errno);
    int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return gs_fail_errno(what, errno);
    /* The mode asked for, whatever the umask. */
    int bad = fchmod(fd, (mode_t)mode) != 0 || gs_write_all(fd, body, len) != 0, e = errno;
    if (close(fd) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    if (!bad && renameat(dirfd, tmp, dirfd, name) != 0) {
        bad = 1;
        e = errno;
    }
    if (bad) {
        unlinkat(dirfd, tmp, 0);
        return gs_fail_errno(what, e);
    }
    return GS_OK;
}
