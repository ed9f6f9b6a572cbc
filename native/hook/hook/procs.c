/*
 * /proc readers for the accountant (start time, alive) and the create path
 * (host pid, runtime name). A file that cannot be read or parsed means "no
 * such process" or "unknown".
 */
#include "procs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A small /proc file into buf (NUL-terminated); -1 if it cannot be read. */
static ssize_t read_proc(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t n = 0;
    while (n < size - 1) {
        ssize_t r = read(fd, buf + n, size - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (r < 0) {
                close(fd);
                return -1;
            }
            break;
        }
        n += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    return (ssize_t)n;
}

/* One decimal integer, optionally signed, that fits int64; nothing else. */
static int parse_int(const char *s, size_t len, int64_t *out)
{
    char tmp[32];
    if (len == 0 || len >= sizeof tmp)
        return -1;
    memcpy(tmp, s, len);
    tmp[len] = '\0';
    char *end;
    errno = 0;
    long long v = strtoll(tmp, &end, 10);
    if (errno || *end || end == tmp || tmp[0] == ' ')
        return -1;
    *out = v;
    return 0;
}

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Field `field` (1-based) of /proc/<pid>/stat. The command name (field 2)
 * may hold spaces and parentheses: fields from 3 on follow its last ')'. */
static int stat_field(int64_t pid, int field, int64_t *out)
{
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/%lld/stat", (long long)pid);
    ssize_t n = read_proc(path, buf, sizeof buf);
    if (n < 0)
        return -1;
    char *paren = strrchr(buf, ')');
    size_t i = paren ? (size_t)(paren - buf) + 2 : 1;
    for (int f = 3; i < (size_t)n; f++) {
        while (i < (size_t)n && is_space(buf[i]))
            i++;
        size_t start = i;
        while (i < (size_t)n && !is_space(buf[i]))
            i++;
        if (i == start)
            break;
        if (f == field)
            return parse_int(buf + start, i - start, out);
    }
    return -1;
}

int gs_start_time(int64_t pid, int64_t *out)
{
    if (pid <= 0)
        return 0;
    return stat_field(pid, 22, out) == 0;
}

int gs_alive(const int64_t *pid, const int64_t *started)
{
    if (!pid || *pid == 0)
        return 1;
    int64_t now;
    if (!gs_start_time(*pid, &now))
        return 0;
    return !started || now == *started;
}

/* The last pid of the NSpid line of /proc/<pid>/status: pid as seen in its
 * innermost namespace. -1 if there is none. */
static int ns_pid_last(int64_t pid, int64_t *out)
{
    char path[64], buf[8192];
    snprintf(path, sizeof path, "/proc/%lld/status", (long long)pid);
    if (read_proc(path, buf, sizeof buf) < 0)
        return -1;
    for (char *line = buf; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, "NSpid:", 6) != 0)
            continue;
        char *p = line + 6, *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        int found = 0;
        for (size_t i = 0; i < len;) {
            while (i < len && is_space(p[i]))
                i++;
            size_t start = i;
            while (i < len && !is_space(p[i]))
                i++;
            if (i == start)
                break;
            if (parse_int(p + start, i - start, out) < 0)
                return -1;
            found = 1;
        }
        return found ? 0 : -1;
    }
    *out = pid; /* no NSpid line: a kernel without pid namespaces */
    return 0;
}

void gs_host_pid(int has_state_pid, int64_t state_pid, int *has, int64_t *out)
{
    *has = has_state_pid;
    *out = state_pid;
    /* /proc here is the host's (before pivot_root): /proc/self is the hook
     * as the host sees it, and so is its parent in field 4. */
    char link[32];
    ssize_t n = readlink("/proc/self", link, sizeof link - 1);
    if (n <= 0)
        return;
    int64_t me, parent, last;
    if (parse_int(link, (size_t)n, &me) < 0 || stat_field(me, 4, &parent) < 0)
        return;
    if (!has_state_pid || parent == state_pid ||
        (ns_pid_last(parent, &last) == 0 && last == state_pid)) {
        if (parent > 1) {
            *has = 1;
            *out = parent;
        }
    }
}

int gs_runtime_name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n < 1 || n > 32)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return 0;
    }
    return 1;
}

void gs_runtime_of(int has_pid, int64_t pid, char out[33])
{
    out[0] = '\0';
    if (!has_pid || pid == 0)
        return;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%lld/comm", (long long)pid);
    if (read_proc(path, buf, sizeof buf) < 0)
        return;
    char *s = buf, *e = buf + strlen(buf);
    while (*s && is_space(*s))
        s++;
    while (e > s && is_space(e[-1]))
        e--;
    *e = '\0';
    char *colon = strchr(s, ':');
    if (colon)
        *colon = '\0';
    if (gs_runtime_name_ok(s))
        snprintf(out, 33, "%s", s);
}
