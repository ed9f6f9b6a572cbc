/*
 * The shared region: <state_dir>/region, mapped by every CUDA process of the
 * container. It holds the limits, the per-process entries and the per-device
 * totals. The totals are derived from the live entries, so any repair
 * (a dead lock owner, a killed process) recomputes them exactly.
 *
 * We never cache a pointer into an entry: an entry is found by index under the
 * lock each time, and the index is re-checked against our pid.
 */
#define _DEFAULT_SOURCE /* flock, MAP_ANONYMOUS */
#include "gpuslice.h"
#include "gpuslice/c/region_rules.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>


struct gpuslice_region *gs_region_ptr;
static pthread_once_t region_once = PTHREAD_ONCE_INIT;
static int entry_index = -1; /* ours; -1 until the first charge */
static int entry_pid;

unsigned long long gs_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

unsigned long long gs_unique_id(void)
{
    return ((gs_now_ns() * 0x9e3779b97f4a7c15ull) ^ ((unsigned long long)getpid() << 20)) | 1;
}

void gs_region_init(struct gpuslice_region *r, const struct gs_config *cfg)
{
    memset(r, 0, sizeof *r);
    gpuslice_region_format(r, cfg->mem_limit, cfg->core_limit, cfg->priority);
}

static int mkdir_p(const char *dir)
{
    char path[sizeof gs_cfg.state_dir];
    snprintf(path, sizeof path, "%s", dir);
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return mkdir(path, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

int gs_map_locked(const char *path, size_t size, int in_shared_dir, void **out, int *fd,
                  long long *size_found)
{
    int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC | (in_shared_dir ? O_NOFOLLOW : 0), 0666);
    if (f < 0)
        return GS_MAP_NO_FILE;
    struct stat st;
    int result = GS_MAP_ERROR;
    if (flock(f, LOCK_EX) != 0 || fstat(f, &st) != 0)
        goto fail;
    if (in_shared_dir && !S_ISREG(st.st_mode)) {
        errno = 0;
        goto fail;
    }
    if (st.st_size != 0 && st.st_size != (off_t)size) {
        *size_found = (long long)st.st_size;
        result = GS_MAP_BAD_SIZE;
        goto fail;
    }
    /* A file in a folder every tenant writes must be writable by all of them,
     * whatever their user and umask. */
    if (st.st_size == 0 && ((in_shared_dir && fchmod(f, 0666) != 0) || ftruncate(f, size) != 0))
        goto fail;
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
    if (m == MAP_FAILED)
        goto fail;
    *out = m;
    *fd = f;
    return GS_MAP_OK;
fail:;
    int e = errno;
    gs_map_done(f);
    errno = e;
    return result;
}

void gs_map_done(int fd)
{
    /* Explicitly: a flock belongs to the open file, which the mapping keeps
     * alive, so close() alone would hold it until munmap. */
    flock(fd, LOCK_UN);
    close(fd);
}

/* gs_region_init leaves a robust, process-shared mutex, never all zero
 * bytes: a lock of zeros was never initialised (a body zeroed or forged
 * behind a valid header), and a process-private lock would not wake a
 * waiter of another process. */
static int lock_unset(const struct gpuslice_region *r)
{
    for (size_t i = 0; i < sizeof r->lock; i++)
        if (r->lock[i])
            return 0;
    return 1;
}

/* The file, or NULL (logged) if it cannot be used. */
static struct gpuslice_region *open_file(void)
{
    char path[sizeof gs_cfg.state_dir + 16];
    snprintf(path, sizeof path, "%s/" GPUSLICE_REGION_FILE, gs_cfg.state_dir);
    if (mkdir_p(gs_cfg.state_dir) != 0) {
        gs_log_write(GS_LOG_WARN, "state dir %s unusable (%s); memory caps hold per process only",
                     gs_cfg.state_dir, strerror(errno));
        return NULL;
    }
    /* The lock serialises creation: exactly one process initialises the file. */
    void *m;
    int fd;
    long long found;
    switch (gs_map_locked(path, sizeof(struct gpuslice_region), 0, &m, &fd, &found)) {
    case GS_MAP_OK:
        break;
    case GS_MAP_NO_FILE:
        gs_log_write(GS_LOG_WARN, "cannot open %s (%s); memory caps hold per process only", path,
                     strerror(errno));
        return NULL;
    case GS_MAP_BAD_SIZE:
        gs_log_write(GS_LOG_WARN, "%s has size %lld, expected %zu (another layout); "
                     "memory caps hold per process only", path, found,
                     sizeof(struct gpuslice_region));
        return NULL;
    default:
        gs_log_write(GS_LOG_WARN, "cannot use %s (%s); memory caps hold per process only", path,
                     strerror(errno));
        return NULL;
    }
    /* The caps are the region's when it has them: gpuslice-hook wrote the
     * accountant's at the container's create (and writes them on a resize),
     * and the environment's then only say that this process is capped. A
     * region nobody made yet (a process run outside such a container) is
     * made here with the environment's, which then hold for all. */
    struct gpuslice_region *r = m;
    unsigned magic = __atomic_load_n(&r->magic, __ATOMIC_ACQUIRE);
    if (magic == 0) {
        /* New, or its creator died before finishing: nobody uses it yet. */
        gs_region_init(r, &gs_cfg);
    } else if (magic == GPUSLICE_REGION_MAGIC && r->version == GPUSLICE_REGION_VERSION &&
               r->size == sizeof *r && lock_unset(r)) {
        /* No shim made this body, so no shim uses it: every mapper passes
         * here under the flock, and the first one makes it a region. */
        gs_log_write(GS_LOG_WARN, "%s has a header but no region behind it; made anew", path);
        gs_region_init(r, &gs_cfg);
    } else if (magic != GPUSLICE_REGION_MAGIC || r->version != GPUSLICE_REGION_VERSION ||
               r->size != sizeof *r) {
        gs_log_write(GS_LOG_WARN, "%s has magic %#x version %u size %u, expected %#x %u %zu; "
                     "memory caps hold per process only", path, magic, r->version, r->size,
                     GPUSLICE_REGION_MAGIC, GPUSLICE_REGION_VERSION, sizeof *r);
        munmap(m, sizeof *r);
        r = NULL;
    } else {
        /* The priority too is the region's maker's: the pacer reads it only
         * after the region is open (gs_region() before gs_cfg.priority). */
        unsigned p = __atomic_load_n(&r->devices[0].priority, __ATOMIC_RELAXED);
        if (p < GPUSLICE_PRIORITIES)
            gs_cfg.priority = p;
    }
    gs_map_done(fd);
    return r;
}

static void after_fork_child(void);

static void open_once(void)
{
    /* The cached index of our entry is this module's, so is resetting it in
     * a forked child: gs_proc_entry_locked's fast path relies on it instead
     * of a getpid() per call. */
    pthread_atfork(NULL, NULL, after_fork_child);
    struct gpuslice_region *r = open_file();
    if (!r) {
        /* Shared and anonymous: forked children still share the cap. */
        void *m = mmap(NULL, sizeof *r, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                       -1, 0);
        if (m == MAP_FAILED) {
            /* Cannot even do that: refuse, never crash. */
            gs_log_write(GS_LOG_ERROR, "cannot map a private region; failing closed");
            gs_cfg.fail_closed = 1;
            static struct gpuslice_region empty;
            m = &empty;
        }
        r = m;
        gs_region_init(r, &gs_cfg);
    }
    __atomic_store_n(&gs_region_ptr, r, __ATOMIC_RELEASE);
}

struct gpuslice_region *gs_region_open_slow(void)
{
    pthread_once(&region_once, open_once);
    return gs_region_ptr;
}

int gs_region_lock(struct gpuslice_region *r)
{
    int rc = pthread_mutex_lock(gpuslice_region_mutex(r));
    if (rc == EOWNERDEAD) {
        /* A process died holding the lock, maybe half-way through an update.
         * Entries are updated before totals, and totals are derived: drop the
         * dead, recompute, and the state is exact again. */
        pthread_mutex_consistent(gpuslice_region_mutex(r));
        gs_log_write(GS_LOG_WARN, "a process died holding the region lock; recomputing usage");
        gs_reclaim_locked(r);
        gpuslice_region_recompute(r);
        return 0;
    }
    if (rc != 0) {
        gs_log_write(GS_LOG_ERROR, "region lock failed (%s); refusing the allocation",
                     strerror(rc));
        return -1;
    }
    return 0;
}

void gs_region_unlock(struct gpuslice_region *r)
{
    pthread_mutex_unlock(gpuslice_region_mutex(r));
}

unsigned long long gs_proc_start_time(int pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    /* comm may hold spaces and ')': fields restart after the last ')'. */
    char *p = strrchr(buf, ')');
    if (!p)
        return 0;
    /* p+1 starts field 3 (state); field 22 (starttime) is 19 fields later. */
    for (int field = 2; field < 22 && p; field++)
        p = strchr(p + 1, ' ');
    return p ? strtoull(p + 1, NULL, 10) : 0;
}

static int entry_dead(const struct gpuslice_proc *s)
{
    int pid = __atomic_load_n(&s->pid, __ATOMIC_RELAXED);
    if (pid <= 0)
        return 1;
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return 1;
    /* Alive (or EPERM): a reused pid shows a different start time. */
    unsigned long long st = gs_proc_start_time(pid);
    return st != 0 && st != s->start_time;
}

static void entry_clear_locked(struct gpuslice_region *r, struct gpuslice_proc *s)
{
    for (int d = 0; d < GPUSLICE_MAX_DEVICES; d++) {
        unsigned long long sum = 0;
        for (int k = 0; k < GPUSLICE_KINDS; k++) {
            sum += s->used[d][k];
            __atomic_store_n(&s->used[d][k], 0, __ATOMIC_RELAXED);
        }
        unsigned long long u = r->devices[d].used_bytes;
        __atomic_store_n(&r->devices[d].used_bytes, u > sum ? u - sum : 0, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&s->state, GPUSLICE_PROC_FREE, __ATOMIC_RELAXED);
    __atomic_store_n(&s->pid, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&s->host_pid, 0, __ATOMIC_RELAXED);
}

void gs_reclaim_locked(struct gpuslice_region *r)
{
    for (int i = 0; i < GPUSLICE_MAX_PROCS; i++) {
        struct gpuslice_proc *s = &r->procs[i];
        if (s->state == GPUSLICE_PROC_LIVE && i != entry_index && entry_dead(s)) {
            GS_LOG(GS_LOG_INFO, "reclaiming entry %d of dead pid %d", i, s->pid);
            entry_clear_locked(r, s);
        }
    }
}

static int take_free_locked(struct gpuslice_region *r)
{
    for (int i = 0; i < GPUSLICE_MAX_PROCS; i++)
        if (r->procs[i].state == GPUSLICE_PROC_FREE)
            return i;
    return -1;
}

int gs_proc_entry_locked(struct gpuslice_region *r)
{
    /* Fast path without a syscall: a fork resets entry_index in the child
     * (after_fork_child), so a set entry_index is this process's. */
    if (entry_index >= 0 && r->procs[entry_index].pid == entry_pid)
        return entry_index;
    int pid = getpid();
    unsigned long long st = gs_proc_start_time(pid);
    int idx = -1;
    for (int i = 0; i < GPUSLICE_MAX_PROCS && idx < 0; i++) {
        struct gpuslice_proc *s = &r->procs[i];
        /* Same pid and start time: an image we replaced by exec; its memory
         * went away with it. */
        if (s->state == GPUSLICE_PROC_LIVE && s->pid == pid && s->start_time == st) {
            entry_clear_locked(r, s);
            idx = i;
        }
    }
    if (idx < 0)
        idx = take_free_locked(r);
    if (idx < 0) {
        gs_reclaim_locked(r);
        idx = take_free_locked(r);
    }
    if (idx < 0) {
        gs_log_write(GS_LOG_ERROR, "all %d process entries are taken; refusing allocations",
                     GPUSLICE_MAX_PROCS);
        return -1;
    }
    struct gpuslice_proc *s = &r->procs[idx];
    s->start_time = st;
    __atomic_store_n(&s->host_pid, gs_driver_pid(), __ATOMIC_RELAXED);
    __atomic_store_n(&s->pid, pid, __ATOMIC_RELAXED);
    __atomic_store_n(&s->state, GPUSLICE_PROC_LIVE, __ATOMIC_RELEASE);
    entry_index = idx;
    entry_pid = pid;
    return idx;
}

static void after_fork_child(void)
{
    /* The child is a new process: it takes its own entry on first use. The
     * mapping itself is inherited and still right. */
    entry_index = -1;
    entry_pid = 0;
}
