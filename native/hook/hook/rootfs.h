/*
 * What the hook does inside the container's rootfs, which the container's
 * author controls: open folders one component at a time without following
 * a link (a link there would lead to the host's files: the hook runs as
 * root in the container's mount namespace, before pivot_root), bind the
 * state dir at /run/gpuslice, add the shim to /etc/ld.so.preload.
 */
#ifndef GS_ROOTFS_H
#define GS_ROOTFS_H

#define GS_SHIM_IN_CONTAINER "/usr/lib/gpuslice/libgpuslice.so"
#define GS_PRELOAD_MAX_BYTES (64 * 1024)

/* An O_PATH fd of the folder rel inside the rootfs, missing folders made. */
int gs_open_in_rootfs(const char *rootfs, const char *rel, int *out);

/* The two binds of a container's state: <state_dir>/cards on <container
 * dir>/cards, then the container dir on <rootfs>/run/gpuslice. Prepared
 * first (folders made, fds opened), bound last, so that whatever can fail
 * on a hostile rootfs (the walk, the ld.so.preload edit) fails before
 * anything is mounted, and the container dir can then be removed. */
struct gs_mounts {
    int cards_fd, inner_fd, target_fd, cdir_fd;
    char *inner; /* <container dir>/cards, for messages */
};

int gs_mounts_prepare(int cdir_fd, const char *cdir, const char *state_dir, const char *rootfs,
                      struct gs_mounts *m);
int gs_mounts_bind(struct gs_mounts *m);
void gs_mounts_close(struct gs_mounts *m);

/* The shim as a line of the rootfs's /etc/ld.so.preload, the lines already
 * there kept; replaced atomically. */
int gs_add_to_ld_so_preload(const char *rootfs);

#endif
