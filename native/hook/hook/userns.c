/*
 * The user namespace check, from /proc/self/uid_map. The kernel is what
 * keeps a rootless tenant out of the accountant (root's files are not a
 * user namespace's to write); this check makes the refusal deliberate, for
 * every user namespace, and one line that says why, where the database
 * would have failed in SQLite's words.
 */
#include "userns.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "util.h"

#define UID_MAP "/proc/self/uid_map"
/* The kernel allows 340 lines of three 10-digit numbers. */
#define UID_MAP_MAX (16 * 1024)

/* The next unsigned decimal of s at *i (after blanks); -1 if none. */
static int next_number(const char *s, size_t len, size_t *i, unsigned long long *out)
{
    while (*i < len && (s[*i] == ' ' || s[*i] == '\t'))
        (*i)++;
    size_t start = *i;
    unsigned long long v = 0;
    while (*i < len && s[*i] >= '0' && s[*i] <= '9' && v <= UINT32_MAX)
        v = v * 10 + (unsigned)(s[(*i)++] - '0');
    if (*i == start || v > UINT32_MAX)
        return -1;
    *out = v;
    return 0;
}

int gs_in_initial_userns(long long *host_uid)
{
    int fd = open(UID_MAP, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        /* No such file under a mounted /proc: a kernel without user
         * namespaces, so this is the only one. */
        if (errno == ENOENT && access("/proc/self/stat", F_OK) == 0)
            return 1;
        gs_fail_errno(UID_MAP, errno);
        return -1;
    }
    char *buf;
    size_t len;
    int r = gs_read_bounded(fd, UID_MAP_MAX, &buf, &len);
    int err = errno;
    close(fd);
    if (r != 0) {
        gs_fail_errno(UID_MAP, err);
        return -1;
    }
    /* "inside outside count" per line; the initial namespace's one line
     * maps every uid to itself: "0 0 4294967295". */
    unsigned long long euid = geteuid(), in, out, count;
    size_t i = 0, lines = 0;
    int identity = 0;
    *host_uid = -1;
    while (i < len) {
        if (next_number(buf, len, &i, &in) || next_number(buf, len, &i, &out) ||
            next_number(buf, len, &i, &count))
            break;
        lines++;
        identity = in == 0 && out == 0 && count == UINT32_MAX;
        if (euid >= in && euid - in < count)
            *host_uid = (long long)(out + (euid - in));
        while (i < len && buf[i] != '\n')
            i++;
        if (i < len)
            i++;
    }
    free(buf);
    return lines == 1 && identity;
}

int gs_require_initial_userns(const char *who, const char *fix)
{
    long long host_uid;
    int initial = gs_in_initial_userns(&host_uid);
    if (initial < 0) {
        char *why = gs_message_take();
        gs_fail("%s: cannot tell whether the hook runs in a user namespace (%s)", who, why);
        free(why);
        return GS_ERROR;
    }
    if (initial)
        return GS_OK;
    char host[48] = "no uid of the host";
    if (host_uid >= 0)
        snprintf(host, sizeof host, "uid %lld of the host", host_uid);
    return gs_fail("%s: the hook runs in a user namespace (uid %u there is %s), as a rootless "
                   "container's hooks do, and the node's accountant is root's: a container "
                   "that could write it could grant itself any slice; %s",
                   who, (unsigned)geteuid(), host, fix);
}
