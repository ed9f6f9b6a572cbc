/*
 * The container's state dir on the host and the host's card dir (see
 * statedir.h): made, placed, removed, fd by fd.
 */
#include "containerdir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpuslice/statedir.h"
#include "util.h"

#define PLACEMENT_TMP "." GPUSLICE_PLACEMENT_FILE ".tmp"
#define TEXT(x) #x
#define NUMBER_TEXT(x) TEXT(x) /* a #define's number, for a message */

char *gs_path_join(const char *dir, const char *name)
{
    struct gs_str p = {0};
    gs_str_add(&p, dir);
    if (p.len == 0 || p.s[p.len - 1] != '/')
        gs_str_addc(&p, '/');
    gs_str_add(&p, name);
    return gs_str_take(&p);
}

int gs_make_container_dir(const char *state_dir, const char *cid, uid_t uid, gid_t gid,
                          int fresh, int *fd_out, char **path_out)
{
    char *parent = gs_path_join(state_dir, GPUSLICE_CONTAINERS_DIR);
    char *path = gs_path_join(parent, cid);
    int rc = GS_ERROR, pfd = -1, fd = -1;
    if (fresh) /* what an earlier container of this id left: its region is not ours */
        gs_remove_container_dir(state_dir, cid);
    if (gs_mkdirs(parent, 0755) != 0) {
        gs_fail_errno(parent, errno);
        goto out;
    }
    pfd = open(parent, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (pfd < 0) {
        if (errno == ELOOP || errno == ENOTDIR)
            gs_fail_path(parent, "is not a folder");
        else
            gs_fail_errno(parent, errno);
        goto out;
    }
    if (mkdirat(pfd, cid, 0755) != 0) {
        if (errno != EEXIST)
            gs_fail_errno(path, errno);
        else if (fresh)
            gs_fail_path(path, "is left by an earlier container of this id and holds what "
                               "gpuslice did not put there; remove it, then start the "
                               "container again");
        if (errno != EEXIST || fresh)
            goto out;
    }
    fd = openat(pfd, cid, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ELOOP || errno == ENOTDIR)
            gs_fail_path(path, "exists and is not a folder");
        else
            gs_fail_errno(path, errno);
        goto out;
    }
    if ((geteuid() == 0 && fchown(fd, uid, gid) != 0) || fchmod(fd, 0755) != 0) {
        gs_fail_errno(path, errno);
        goto out;
    }
    *fd_out = fd;
    *path_out = path;
    fd = -1;
    path = NULL;
    rc = GS_OK;
out:
    if (fd >= 0)
        close(fd);
    if (pfd >= 0)
        close(pfd);
    free(parent);
    free(path);
    return rc;
}

int gs_write_placement(int dirfd, const char *path, int64_t index, const char *uuid)
{
    struct gs_str line = {0}, body = {0};
    char *card = gs_path_join(path, GPUSLICE_PLACEMENT_FILE), *tmp = gs_path_join(path, PLACEMENT_TMP);
    char *data = NULL;
    size_t n = 0;
    int rc = GS_ERROR;
    gs_str_addf(&line, "%lld %s\n", (long long)index, uuid);
    /* The lines already there stay (the hook may run once per device);
     * the container's user owns the dir: no link, no FIFO, bounded. */
    int fd = openat(dirfd, GPUSLICE_PLACEMENT_FILE, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 && errno != ENOENT) {
        gs_fail_errno(card, errno);
        goto out;
    }
    if (fd >= 0) {
        struct stat st;
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            close(fd);
            gs_fail_path(card, "is not a regular file");
            goto out;
        }
        int r = gs_read_bounded(fd, GPUSLICE_PLACEMENT_MAX_BYTES, &data, &n), e = errno;
        close(fd);
        if (r < 0) {
            gs_fail_errno(card, e);
            goto out;
        }
        if (n > GPUSLICE_PLACEMENT_MAX_BYTES) {
            gs_fail_path(card, "is over " NUMBER_TEXT(GPUSLICE_PLACEMENT_MAX_BYTES) " bytes");
            goto out;
        }
    }
    /* Line by line, each with its "\n", the last maybe without */
    for (size_t i = 0; i < n;) {
        const char *nl = memchr(data + i, '\n', n - i);
        size_t len = nl ? (size_t)(nl - (data + i)) + 1 : n - i;
        if (len != line.len || memcmp(data + i, line.s, len) != 0)
            gs_str_addn(&body, data + i, len);
        i += len;
    }
    gs_str_add(&body, line.s);
    rc = gs_replace_at(dirfd, PLACEMENT_TMP, GPUSLICE_PLACEMENT_FILE, body.s, body.len, 0644, tmp);
out:
    free(data);
    free(card);
    free(tmp);
    gs_str_free(&line);
    gs_str_free(&body);
    return rc;
}

int gs_open_card_dir(const char *state_dir, int *fd_out, char **path_out)
{
    char *path = gs_path_join(state_dir, GPUSLICE_CARDFILES_DIR);
    int fd = -1;
    if (gs_mkdirs(path, 0777) != 0)
        goto fail;
    fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || fchmod(fd, 01777) != 0)
        goto fail;
    *fd_out = fd;
    *path_out = path;
    return GS_OK;
fail:
    gs_fail_errno(path, errno);
    if (fd >= 0)
        close(fd);
    free(path);
    return GS_ERROR;
}

void gs_remove_container_dir(const char *state_dir, const char *cid)
{
    static const char *const files[] = {GPUSLICE_PLACEMENT_FILE, PLACEMENT_TMP,
                                        GPUSLICE_REGION_FILE, GPUSLICE_STEP_ENV_FILE};
    char *parent = gs_path_join(state_dir, GPUSLICE_CONTAINERS_DIR);
    int pfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(parent);
    if (pfd < 0)
        return;
    int fd = openat(pfd, cid, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
            unlinkat(fd, files[i], 0);
        unlinkat(fd, GPUSLICE_CARDFILES_DIR, AT_REMOVEDIR);
        close(fd);
        unlinkat(pfd, cid, AT_REMOVEDIR);
    }
    close(pfd);
}
