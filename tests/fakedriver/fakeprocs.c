/* fakeprocs: see fakeprocs.h. */
#define _GNU_SOURCE
#include "fakeprocs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static int g_fd = -1;
static pid_t g_fd_pid;
static char g_path[4096];

static unsigned long long pidns_inode(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (unsigned long long)st.st_ino : 0;
}

unsigned fakeprocs_driver_pid(void)
{
    const char *mode = getenv(FAKEPROCS_PIDS_ENV);
    if (mode && strcmp(mode, "caller") == 0)
        return (unsigned)getpid();
    return (unsigned)getpid() + 1000000u * (unsigned)(1 + pidns_inode() % 2000);
}

static int open_own(const char *dir)
{
    if (g_fd >= 0 && g_fd_pid == getpid())
        return g_fd;
    /* Locked before it gets its name: a reader never sees it unlocked. */
    char tmp[4096 + 16];
    snprintf(g_path, sizeof g_path, "%s/%llu-%d", dir, pidns_inode(), (int)getpid());
    snprintf(tmp, sizeof tmp, "%s/.%llu-%d", dir, pidns_inode(), (int)getpid());
    int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0 || rename(tmp, g_path) != 0) {
        close(fd);
        unlink(tmp);
        return -1;
    }
    g_fd = fd;
    g_fd_pid = getpid();
    return fd;
}

void fakeprocs_publish(const char *const *uuids, const uint64_t *bytes, unsigned n)
{
    const char *dir = getenv(FAKEPROCS_ENV);
    if (!dir || !*dir)
        return;
    int fd = open_own(dir);
    if (fd < 0)
        return;
    char buf[16384];
    size_t len = (size_t)snprintf(buf, sizeof buf, "pid %u\n", fakeprocs_driver_pid());
    for (unsigned i = 0; i < n && len < sizeof buf - 200; i++)
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s %llu\n", uuids[i],
                                (unsigned long long)bytes[i]);
    len += (size_t)snprintf(buf + len, sizeof buf - len, "end\n");
    /* One write from offset 0, then cut: a reader sees "end" last or retries. */
    if (pwrite(fd, buf, len, 0) == (ssize_t)len)
        (void)ftruncate(fd, (off_t)len);
}

void fakeprocs_forget(void)
{
    /* The inherited descriptor shares the parent's lock: drop ours only. */
    if (g_fd >= 0 && g_fd_pid != getpid()) {
        close(g_fd);
        g_fd = -1;
    }
}

/* Parse one record; 1 if complete. */
static int parse(const char *text, const char *uuid, struct fakeproc *out)
{
    const char *end = strstr(text, "\nend\n");
    unsigned pid;
    if (!end || sscanf(text, "pid %u", &pid) != 1)
        return 0;
    out->pid = pid;
    out->bytes = 0;
    size_t ulen = strlen(uuid);
    for (const char *line = strchr(text, '\n'); line && line < end; line = strchr(line, '\n')) {
        line++;
        if (strncmp(line, uuid, ulen) == 0 && line[ulen] == ' ')
            out->bytes = strtoull(line + ulen + 1, NULL, 10);
    }
    return 1;
}

int fakeprocs_list(const char *uuid, struct fakeproc *out, unsigned max)
{
    const char *dir = getenv(FAKEPROCS_ENV);
    if (!dir || !*dir)
        return 0;
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    unsigned n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        if (e->d_name[0] == '.')
            continue;
        char path[4096 + 256];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
            /* Nobody holds it: its process is gone. Our own file is never
             * here (we hold it exclusively, and flock conflicts across our
             * own descriptors too). */
            unlink(path);
            close(fd);
            continue;
        }
        char buf[16384];
        struct fakeproc p;
        int ok = 0;
        for (int tries = 0; tries < 20 && !ok; tries++) {
            ssize_t len = pread(fd, buf, sizeof buf - 1, 0);
            if (len <= 0)
                break;
            buf[len] = '\0';
            ok = parse(buf, uuid, &p);
        }
        close(fd);
        if (ok && p.bytes)
            out[n++] = p;
    }
    closedir(d);
    return (int)n;
}
