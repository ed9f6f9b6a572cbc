/*
 * The host's side of a container's shared region (gpuslice/region.h): the
 * caps it writes from the accountant's row (at create, the region's first
 * figures; on a resize, the new ones), and what `gpuslice-hook resize`
 * reads first (the memory the container's processes hold now). The file is in a folder the tenant
 * writes, so everything read from it is the tenant's claim, and it is
 * opened as a tenant may have made it: no symbolic link, a regular file
 * with one link, exactly a region's size, a lock taken with a time limit,
 * and a mapping that a file cut short meanwhile cannot fault (SIGBUS is
 * caught while it is touched).
 */
#ifndef GS_REGIONLIMITS_H
#define GS_REGIONLIMITS_H

/* How long the hook waits for the region's locks before it gives up. */
#define GS_REGION_WAIT_MS 2000

struct gs_caps_hold {
    int fd;                        /* the region file, flock'ed; -1: none */
    void *map;                     /* NULL: none yet (a file the shim has not sized) */
    int locked;                    /* the region's mutex is ours */
    unsigned long long used_bytes; /* the most any device holds now */
    char *path;                    /* for messages */
    unsigned owner, group;         /* of the container's folder: the container's user */
};

/* Take the region of container cid (<state_dir>/containers/<cid>/region),
 * making an empty file if there is none (gs_caps_write makes the region in
 * it; dropped instead, a process of the container will), and hold its
 * locks until gs_caps_write or gs_caps_leave: the shim's processes
 * allocate nothing meanwhile, so used_bytes stays true. GS_OK or GS_ERROR
 * with the line. */
int gs_caps_take(const char *state_dir, const char *cid, struct gs_caps_hold *h);

/* Every device's cap to limit_mib MiB and cores percent (0: none): the
 * accountant's row, at the container's create and after a resize; a region
 * not made yet is made with them (and priority, a GPUSLICE_PRIORITY_*_WORD),
 * so its processes find them. Then lets go. */
int gs_caps_write(struct gs_caps_hold *h, long long limit_mib, long long cores,
                  const char *priority);

/* Let go, changing nothing. */
void gs_caps_leave(struct gs_caps_hold *h);

#endif
