/*
 * The rootfs walk, the bind mounts and the ld.so.preload edit (see
 * rootfs.h), each done fd by fd inside the container's rootfs.
 */
#include "rootfs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpuslice/statedir.h"
#include "json.h"
#include "containerdir.h"
#include "util.h"

#define DIR_PATH_FLAGS (O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)

/* Walk rel under root_fd one component at a time: never through a link,
 * never out of the root ('..' is refused), making missing folders. */
static int open_inside(int root_fd, const char *rel, int *out)
{
    int fd = fcntl(root_fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        return gs_fail_errno(rel, errno);
    char *copy = gs_xstrdup(rel), *save = NULL;
    int rc = GS_OK;
    for (char *part = strtok_r(copy, "/", &save); part; part = strtok_r(NULL, "/", &save)) {
        if (strcmp(part, "..") == 0) {
            rc = gs_fail("%s: '..' is refused", rel);
            break;
        }
        if (mkdirat(fd, part, 0755) != 0 && errno != EEXIST) {
            rc = gs_fail_errno(part, errno);
            break;
        }
        int nfd = openat(fd, part, DIR_PATH_FLAGS);
        if (nfd < 0) {
            rc = gs_fail("/%s in the container's rootfs: %s is not a folder (%s); a link is "
                         "refused", rel, part, strerror(errno));
            break;
        }
        close(fd);
        fd = nfd;
    }
    free(copy);
    if (rc != GS_OK) {
        close(fd);
        return rc;
    }
    *out = fd;
    return GS_OK;
}

int gs_open_in_rootfs(const char *rootfs, const char *rel, int *out)
{
    int root_fd = open(rootfs, DIR_PATH_FLAGS), rc;
    if (root_fd < 0) {
        char *shown = gs_quoted(rootfs, strlen(rootfs), GS_AS_PATH);
        rc = gs_fail("rootfs %s: %s", shown, strerror(errno));
        free(shown);
        return rc;
    }
    rc = open_inside(root_fd, rel, out);
    close(root_fd);
    return rc;
}

/* mount --rbind through the fds' /proc/self/fd links: what is bound is
 * what was opened, whatever a path would resolve to now. */
static int bind(int src_fd, int dst_fd)
{
    char src[64], dst[64];
    snprintf(src, sizeof src, "/proc/self/fd/%d", src_fd);
    snprintf(dst, sizeof dst, "/proc/self/fd/%d", dst_fd);
    if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) != 0)
        return gs_fail("cannot bind-mount the container's state dir: %s", strerror(errno));
    return GS_OK;
}

int gs_mounts_prepare(int cdir_fd, const char *cdir, const char *state_dir, const char *rootfs,
                      struct gs_mounts *m)
{
    char *cards = NULL;
    *m = (struct gs_mounts){-1, -1, -1, cdir_fd, gs_path_join(cdir, GPUSLICE_CARDFILES_DIR)};
    int rc = gs_open_card_dir(state_dir, &m->cards_fd, &cards);
    free(cards);
    if (rc != GS_OK)
        return rc;
    if (mkdirat(cdir_fd, GPUSLICE_CARDFILES_DIR, 0777) != 0 && errno != EEXIST)
        return gs_fail_errno(m->inner, errno);
    m->inner_fd = openat(cdir_fd, GPUSLICE_CARDFILES_DIR, DIR_PATH_FLAGS);
    if (m->inner_fd < 0)
        return gs_fail_errno(m->inner, errno);
    /* The mount point, relative to the rootfs: without its leading slash. */
    return gs_open_in_rootfs(rootfs, GPUSLICE_STATE_MOUNT + 1, &m->target_fd);
}

int gs_mounts_bind(struct gs_mounts *m)
{
    if (bind(m->cards_fd, m->inner_fd) != GS_OK)
        return GS_ERROR;
    if (bind(m->cdir_fd, m->target_fd) != GS_OK) {
        /* Take the cards mount back, or the container dir could not be
         * removed (its `cards` busy). Opened again, "cards" is the mount's
         * root: unmounted through its fd, whatever the paths are now. */
        int fd = openat(m->cdir_fd, GPUSLICE_CARDFILES_DIR, DIR_PATH_FLAGS);
        if (fd >= 0) {
            char proc[64];
            snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
            umount2(proc, MNT_DETACH);
            close(fd);
        }
        return GS_ERROR;
    }
    return GS_OK;
}

void gs_mounts_close(struct gs_mounts *m)
{
    int *fds[] = {&m->cards_fd, &m->inner_fd, &m->target_fd};
    for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
        if (*fds[i] >= 0) {
            close(*fds[i]);
            *fds[i] = -1;
        }
    free(m->inner);
    m->inner = NULL;
}

/* What is trimmed from both ends of a line before it is compared with the
 * shim's path: space, \t to \r, and 0x1c to 0x1f. */
static int is_space(char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

/* A line equal to the shim's path once stripped. */
static int is_shim_line(const char *s, size_t n)
{
    while (n && is_space(*s)) {
        s++;
        n--;
    }
    while (n && is_space(s[n - 1]))
        n--;
    return n == strlen(GS_SHIM_IN_CONTAINER) && memcmp(s, GS_SHIM_IN_CONTAINER, n) == 0;
}

#define PRELOAD "/etc/ld.so.preload in the container's rootfs"

int gs_add_to_ld_so_preload(const char *rootfs)
{
    static const char tmp[] = ".ld.so.preload.gpuslice";
    int etc_path, etc = -1, fd = -1, rc = GS_ERROR;
    char *data = NULL;
    size_t n = 0;
    struct gs_str body = {0};
    if (gs_open_in_rootfs(rootfs, "etc", &etc_path) != GS_OK)
        return GS_ERROR;
    /* The O_PATH fd reopened as a real directory, for the *at writes. */
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", etc_path);
    etc = open(proc, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int e = errno;
    close(etc_path);
    if (etc < 0)
        return gs_fail_errno(proc, e);
    fd = openat(etc, "ld.so.preload", O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0 && errno != ENOENT) {
        gs_fail(PRELOAD ": %s (a link is refused)", strerror(errno));
        goto out;
    }
    if (fd >= 0) {
        struct stat st;
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            gs_fail(PRELOAD " is not a regular file");
            goto out;
        }
        if (gs_read_bounded(fd, GS_PRELOAD_MAX_BYTES, &data, &n) != 0) {
            gs_fail(PRELOAD ": %s", strerror(errno));
            goto out;
        }
        if (n > GS_PRELOAD_MAX_BYTES) {
            gs_fail(PRELOAD " is over %d bytes", GS_PRELOAD_MAX_BYTES);
            goto out;
        }
    }
    /* Every line kept, each ending in "\n"; the shim once. */
    for (size_t i = 0; i < n;) {
        const char *nl = memchr(data + i, '\n', n - i);
        size_t len = nl ? (size_t)(nl - (data + i)) : n - i;
        if (is_shim_line(data + i, len)) {
            rc = GS_OK; /* already there */
            goto out;
        }
        gs_str_addn(&body, data + i, len);
        gs_str_addc(&body, '\n');
        i += len + (nl != NULL);
    }
    gs_str_add(&body, GS_SHIM_IN_CONTAINER "\n");
    rc = gs_replace_at(etc, tmp, "ld.so.preload", body.s, body.len, 0644, tmp);
out:
    if (fd >= 0)
        close(fd);
    if (etc >= 0)
        close(etc);
    free(data);
    gs_str_free(&body);
    return rc;
}
