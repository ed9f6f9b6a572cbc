/*
 * What every file of the hook shares: the exit codes, the one message a
 * failure leaves for main() to print, growable strings, and bounded reads.
 *
 * A function that can fail returns GS_OK, GS_NO (a refusal) or GS_ERROR
 * (bad input, an error) and leaves its one-line message in gs_message().
 */
#ifndef GS_UTIL_H
#define GS_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#define GS_OK 0
#define GS_NO 1    /* the answer is "no": the card is full */
#define GS_ERROR 2 /* bad input, usage, an error */

struct gs_str {
    char *s; /* NUL-terminated once anything was added; NULL before */
    size_t len, cap;
};

/* The program's name for the one message util.c prints itself (out of
 * memory): "gpuslice-hook" unless main() says otherwise. */
extern const char *gs_program;

void *gs_xmalloc(size_t n);
void *gs_xrealloc(void *p, size_t n);
char *gs_xstrdup(const char *s);
char *gs_xstrndup(const char *s, size_t n);

void gs_str_addn(struct gs_str *b, const char *s, size_t n);
void gs_str_add(struct gs_str *b, const char *s);
void gs_str_addc(struct gs_str *b, char c);
void gs_str_addf(struct gs_str *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void gs_str_truncate(struct gs_str *b, size_t len);
const char *gs_str_cstr(const struct gs_str *b); /* "" when empty */
char *gs_str_take(struct gs_str *b);             /* the string, malloc'ed; b is emptied */
void gs_str_free(struct gs_str *b);

/* Set the message; return the code. */
int gs_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int gs_refuse(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "<what>: <strerror(err)>"; what (a path, mostly) made one line. */
int gs_fail_errno(const char *what, int err);
/* "<path> <rest>", path made one line. */
int gs_fail_path(const char *path, const char *rest);
const char *gs_message(void);
/* Take the message (malloc'ed), leaving none: to keep it across a cleanup. */
char *gs_message_take(void);

/*
 * Read at most max + 1 bytes of fd into a malloc'ed buffer (NUL-terminated),
 * so that the caller can tell "over max". The buffer grows as data comes,
 * never past max + 1: a size from fstat is not trusted. -1 with errno set.
 */
int gs_read_bounded(int fd, size_t max, char **out, size_t *len);

/* mkdir -p: the missing parents 0777, the last one mode; one already there
 * (a folder) is fine. */
int gs_mkdirs(const char *path, unsigned mode);

/* Replace dirfd/name with body, through dirfd/tmp: a fresh file (O_EXCL,
 * whatever was left under tmp unlinked first, so a planted link or hard
 * link is never written through) of exactly mode, renamed over name.
 * Failures name `what`. */
int gs_replace_at(int dirfd, const char *tmp, const char *name, const char *body, size_t len,
                  unsigned mode, const char *what);

/* The bytes of the first n characters (UTF-8 code points) of s: a short
 * container id for messages (id[:12]), never cut inside a character. */
size_t gs_utf8_prefix(const char *s, size_t n);

/* Seconds since the epoch, with a fraction: the accountant's timestamps. */
double gs_now(void);
/* All of s to fd, through EINTR and short writes; 0, or -1 (errno set). */
int gs_write_all(int fd, const char *s, size_t n);

#endif
