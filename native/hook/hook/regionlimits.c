/*
 * The host's side of a container's shared region (see regionlimits.h):
 * taken with the shim's own locks (the file's flock, which serialises
 * creation, then the region's robust mutex), read, written, let go.
 */
#include "regionlimits.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gpuslice/c/priority.h"
#include "gpuslice/c/region_rules.h"
#include "gpuslice/region.h"
#include "gpuslice/statedir.h"
#include "containerdir.h"
#include "util.h"

#define REGION_SIZE sizeof(struct gpuslice_region)


/* A tenant may cut the file short while it is mapped: touching the lost
 * pages raises SIGBUS, which jumps back to the touch's start. */
static sigjmp_buf bus_jump;
static struct sigaction bus_before;

static void on_bus(int sig)
{
    (void)sig;
    siglongjmp(bus_jump, 1);
}

static void guard_on(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_bus;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &bus_before);
}

static void guard_off(void)
{
    sigaction(SIGBUS, &bus_before, NULL);
}

static void deadline(struct timespec *t)
{
    clock_gettime(CLOCK_REALTIME, t);
    t->tv_sec += GS_REGION_WAIT_MS / 1000;
    t->tv_nsec += (GS_REGION_WAIT_MS % 1000) * 1000000L;
    if (t->tv_nsec >= 1000000000L) {
        t->tv_sec++;
        t->tv_nsec -= 1000000000L;
    }
}

/* The file's flock, waited for at most GS_REGION_WAIT_MS: the shim holds it
 * only while it opens the region. */
static int flock_within(int fd)
{
    for (int waited = 0;; waited += 10) {
        if (flock(fd, LOCK_EX | LOCK_NB) == 0)
            return 0;
        if (errno != EWOULDBLOCK || waited >= GS_REGION_WAIT_MS)
            return -1;
        usleep(10000);
    }
}

static int all_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

/* With the file mapped and flock'ed: a region in use gets its mutex taken
 * and its usage read; one nobody made yet (magic 0, or a header on a lock
 * of zeros: the shim makes such a body anew) is left to gs_caps_write. */
static int lock_and_read(struct gs_caps_hold *h)
{
    struct gpuslice_region *r = h->map;
    unsigned magic = __atomic_load_n(&r->magic, __ATOMIC_ACQUIRE);
    if (magic == 0 || (magic == GPUSLICE_REGION_MAGIC && r->version == GPUSLICE_REGION_VERSION &&
                       r->size == REGION_SIZE && all_zero(r->lock, sizeof r->lock))) {
        munmap(h->map, REGION_SIZE);
        h->map = NULL;
        return GS_OK;
    }
    if (magic != GPUSLICE_REGION_MAGIC || r->version != GPUSLICE_REGION_VERSION ||
        r->size != REGION_SIZE)
        return gs_fail("%s: magic %#x version %u size %u is not a region of this gpuslice "
                       "(%#x %d %zu): the container's processes run another libgpuslice.so; "
                       "restart the container with this one to resize it", h->path, magic,
                       r->version, r->size, GPUSLICE_REGION_MAGIC, GPUSLICE_REGION_VERSION,
                       REGION_SIZE);
    struct timespec until;
    deadline(&until);
    int rc = pthread_mutex_timedlock(gpuslice_region_mutex(h->map), &until);
    if (rc == EOWNERDEAD) {
        pthread_mutex_consistent(gpuslice_region_mutex(h->map));
        gpuslice_region_recompute(r); /* a process died holding the mutex */
        rc = 0;
    }
    if (rc != 0)
        return gs_fail("%s: cannot take the region's lock within %d ms (%s); try again",
                       h->path, GS_REGION_WAIT_MS, strerror(rc));
    h->locked = 1;
    h->used_bytes = 0;
    for (int d = 0; d < GPUSLICE_MAX_DEVICES; d++) {
        unsigned long long u = __atomic_load_n(&r->devices[d].used_bytes, __ATOMIC_RELAXED);
        if (u > h->used_bytes)
            h->used_bytes = u;
    }
    return GS_OK;
}

int gs_caps_take(const char *state_dir, const char *cid, struct gs_caps_hold *h)
{
    memset(h, 0, sizeof *h);
    h->fd = -1;
    char *parent = gs_path_join(state_dir, GPUSLICE_CONTAINERS_DIR);
    char *dir = gs_path_join(parent, cid);
    h->path = gs_path_join(dir, GPUSLICE_REGION_FILE);
    free(parent);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int rc = GS_OK;
    if (dfd < 0) {
        /* No state dir: the container was admitted without one (`admit`),
         * so no process of it maps a region; the row alone changes. */
        if (errno != ENOENT)
            rc = errno == ELOOP || errno == ENOTDIR ? gs_fail_path(dir, "is not a folder")
                                                    : gs_fail_errno(dir, errno);
        free(dir);
        return rc;
    }
    free(dir);
    struct stat st;
    if (fstat(dfd, &st) != 0) {
        rc = gs_fail_errno(h->path, errno);
        close(dfd);
        return rc;
    }
    h->owner = st.st_uid;
    h->group = st.st_gid;
    /* O_NONBLOCK: a FIFO put there is not waited on. */
    h->fd = openat(dfd, GPUSLICE_REGION_FILE,
                   O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0666);
    int err = errno;
    close(dfd);
    if (h->fd < 0)
        return err == ELOOP ? gs_fail_path(h->path, "is a symbolic link, not a region")
                            : gs_fail_errno(h->path, err);
    if (flock_within(h->fd) != 0)
        return gs_fail("%s: cannot take the file's lock within %d ms (%s); try again", h->path,
                       GS_REGION_WAIT_MS, strerror(errno == EWOULDBLOCK ? EBUSY : errno));
    if (fstat(h->fd, &st) != 0)
        return gs_fail_errno(h->path, errno);
    if (!S_ISREG(st.st_mode) || st.st_nlink != 1)
        return gs_fail_path(h->path, "is not a regular file of one link, as libgpuslice.so "
                                     "makes a region; not touched");
    if (st.st_size == 0)
        return GS_OK; /* made, not sized yet: gs_caps_write makes it */
    if (st.st_size != (off_t)REGION_SIZE)
        return gs_fail("%s: %lld bytes, a region of this gpuslice has %zu: the container's "
                       "processes run another libgpuslice.so; restart the container with this "
                       "one to resize it", h->path, (long long)st.st_size, REGION_SIZE);
    void *m = mmap(NULL, REGION_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, h->fd, 0);
    if (m == MAP_FAILED)
        return gs_fail_errno(h->path, errno);
    h->map = m;
    guard_on();
    if (sigsetjmp(bus_jump, 1)) {
        guard_off();
        h->locked = 0; /* its memory is gone with the pages */
        return gs_fail_path(h->path, "was cut short while read; not touched");
    }
    int locked = lock_and_read(h);
    guard_off();
    return locked;
}

/* A region made by the host, as gs_region_init in the shim makes one, and
 * the container's user's, as if its first process had made it. */
static int make_region(struct gs_caps_hold *h, unsigned long long limit, unsigned cores,
                       unsigned priority)
{
    if ((geteuid() == 0 && fchown(h->fd, h->owner, h->group) != 0) ||
        fchmod(h->fd, 0644) != 0 || ftruncate(h->fd, 0) != 0 ||
        ftruncate(h->fd, REGION_SIZE) != 0)
        return gs_fail_errno(h->path, errno);
    void *m = mmap(NULL, REGION_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, h->fd, 0);
    if (m == MAP_FAILED)
        return gs_fail_errno(h->path, errno);
    h->map = m;
    struct gpuslice_region *r = m;
    unsigned long long limits[GPUSLICE_MAX_DEVICES];
    unsigned int core_limits[GPUSLICE_MAX_DEVICES];
    for (int i = 0; i < GPUSLICE_MAX_DEVICES; i++) {
        limits[i] = limit;
        core_limits[i] = cores;
    }
    gpuslice_region_format(r, limits, core_limits, priority);
    return GS_OK;
}

int gs_caps_write(struct gs_caps_hold *h, long long limit_mib, long long cores,
                  const char *priority)
{
    if (h->fd < 0) {
        gs_caps_leave(h);
        return GS_OK;
    }
    guard_on();
    if (sigsetjmp(bus_jump, 1)) {
        guard_off();
        h->locked = 0;
        int cut = gs_fail_path(h->path, "was cut short while written; its processes keep "
                                        "the limits they had");
        gs_caps_leave(h);
        return cut;
    }
    unsigned long long limit = (unsigned long long)limit_mib << 20;
    int rc = GS_OK;
    if (!h->map) {
        int code = gpuslice_priority_code(priority); /* the row's: its CHECK allows no other */
        rc = make_region(h, limit, (unsigned)cores,
                         code < 0 ? GPUSLICE_PRIORITY_NORMAL : (unsigned)code);
    } else {
        struct gpuslice_region *r = h->map;
        for (int i = 0; i < GPUSLICE_MAX_DEVICES; i++) {
            __atomic_store_n(&r->devices[i].limit_bytes, limit, __ATOMIC_RELAXED);
            __atomic_store_n(&r->devices[i].core_limit, (unsigned)cores, __ATOMIC_RELAXED);
        }
    }
    guard_off();
    gs_caps_leave(h);
    return rc;
}

void gs_caps_leave(struct gs_caps_hold *h)
{
    if (h->map) {
        guard_on();
        if (!sigsetjmp(bus_jump, 1) && h->locked)
            pthread_mutex_unlock(gpuslice_region_mutex(h->map));
        guard_off();
        munmap(h->map, REGION_SIZE);
    }
    if (h->fd >= 0)
        close(h->fd); /* the flock goes with the last fd of the open file */
    free(h->path);
    memset(h, 0, sizeof *h);
    h->fd = -1;
}
