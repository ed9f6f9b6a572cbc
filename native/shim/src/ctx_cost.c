/*
 * What the driver holds for this process on a device, as NVML reports it,
 * and the pid under which it reports it.
 *
 * NVML lists the processes that hold memory on a card with their usage, by
 * the host's pid: the driver knows no pid namespaces, so a process in a
 * container cannot tell which entry is its own from getpid(). It learns it
 * once, when it first creates a context: the entry that appeared across the
 * creation is this process (HAMi finds its pid the same way). A driver that
 * translates pids into the caller's namespace (580 does) lists it as its
 * getpid(), which settles it even when others appeared at the same moment.
 * If several appeared and none is getpid() it stays unknown, and the
 * context keeps the fixed GPUSLICE_CONTEXT_RESERVE charge.
 *
 * Queries from here are the shim's own: the process filter (rm_filter.c)
 * lets them see every entry.
 */
#define _POSIX_C_SOURCE 200809L
#include "gpuslice.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

#define MAX_LISTED 256

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned int host_pid;      /* 0: not known */
static int nvml_state;             /* 0 not tried, 1 up, -1 unusable */
static nvmlDevice_t handles[GPUSLICE_MAX_DEVICES];
static unsigned int before[GPUSLICE_MAX_DEVICES][MAX_LISTED];
static unsigned int before_n[GPUSLICE_MAX_DEVICES];
static unsigned char before_ok[GPUSLICE_MAX_DEVICES];

__thread int gs_own_query;

static pthread_once_t nvml_once = PTHREAD_ONCE_INIT;

static void nvml_init(void)
{
    gs_nvml_ready();
    /* NVML counts its inits: ours never shuts it down under the program. */
    int s = HAS_REAL(nvmlInit_v2) && HAS_REAL(nvmlDeviceGetHandleByUUID) &&
                    (HAS_REAL(nvmlDeviceGetComputeRunningProcesses_v3) ||
                     HAS_REAL(nvmlDeviceGetComputeRunningProcesses_v2)) &&
                    REAL(nvmlInit_v2)() == NVML_SUCCESS
                ? 1 : -1;
    if (s < 0)
        GS_LOG(GS_LOG_INFO, "NVML is not usable here: contexts are charged "
               GPUSLICE_ENV_CONTEXT_RESERVE);
    __atomic_store_n(&nvml_state, s, __ATOMIC_RELEASE);
}

/* A caller that needs NVML before the thread started at cuInit has it up
 * waits for it (pthread_once, across nvmlInit): there is no answer before. */
static int nvml_up(void)
{
    pthread_once(&nvml_once, nvml_init);
    return __atomic_load_n(&nvml_state, __ATOMIC_ACQUIRE) > 0;
}

static void *prepare_thread(void *arg)
{
    (void)arg;
    nvml_up();
    return NULL;
}

void gs_ctx_cost_prepare(void)
{
    /* Loading and starting NVML takes ~10 ms: done beside cuInit (~200 ms),
     * not in front of the first context. */
    if (gs_thread_start(prepare_thread, NULL, "gpuslice-nvml") != 0)
        nvml_up();
}

static nvmlDevice_t handle(int dev)
{
    nvmlDevice_t h = __atomic_load_n(&handles[dev], __ATOMIC_ACQUIRE);
    if (h || !nvml_up())
        return h;
    CUuuid u;
    if (!HAS_REAL(cuDeviceGetUuid) || REAL(cuDeviceGetUuid)(&u, dev) != CUDA_SUCCESS)
        return NULL;
    char uuid[GPUSLICE_UUID_SIZE];
    gs_format_uuid(&u, uuid, sizeof uuid);
    gs_own_query = 1;
    if (REAL(nvmlDeviceGetHandleByUUID)(uuid, &h) != NVML_SUCCESS)
        h = NULL;
    gs_own_query = 0;
    __atomic_store_n(&handles[dev], h, __ATOMIC_RELEASE);
    return h;
}

/* Every process NVML lists on dev: its count, or -1. */
static int list(int dev, nvmlProcessInfo_t *out, unsigned int cap)
{
    nvmlDevice_t h = handle(dev);
    if (!h)
        return -1;
    unsigned int n = cap;
    gs_own_query = 1;
    /* v2 and v3 entries have the same layout. */
    nvmlReturn_t r = HAS_REAL(nvmlDeviceGetComputeRunningProcesses_v3)
                         ? REAL(nvmlDeviceGetComputeRunningProcesses_v3)(h, &n, out)
                         : REAL(nvmlDeviceGetComputeRunningProcesses_v2)(h, &n, out);
    gs_own_query = 0;
    return r == NVML_SUCCESS && n <= cap ? (int)n : -1;
}

unsigned int gs_driver_pid(void)
{
    return __atomic_load_n(&host_pid, __ATOMIC_ACQUIRE);
}

void gs_ctx_cost_before(int dev)
{
    if (dev < 0 || dev >= GPUSLICE_MAX_DEVICES || gs_driver_pid())
        return;
    nvmlProcessInfo_t p[MAX_LISTED];
    int n = list(dev, p, MAX_LISTED);
    pthread_mutex_lock(&mu);
    before_ok[dev] = n >= 0;
    before_n[dev] = n > 0 ? (unsigned)n : 0;
    for (int i = 0; i < n; i++)
        before[dev][i] = p[i].pid;
    pthread_mutex_unlock(&mu);
}

static int was_listed(int dev, unsigned int pid)
{
    for (unsigned i = 0; i < before_n[dev]; i++)
        if (before[dev][i] == pid)
            return 1;
    return 0;
}

/* Record pid as ours in the region: 0, or -1 if another live process of
 * the container holds it already (then the guess was wrong: not ours). */
static int record_host_pid(unsigned int pid)
{
    struct gpuslice_region *r = gs_region();
    if (gs_region_lock(r) != 0)
        return -1;
    int mine = gs_proc_entry_locked(r), taken = 0;
    for (int i = 0; i < GPUSLICE_MAX_PROCS && mine >= 0; i++)
        taken |= i != mine && r->procs[i].state == GPUSLICE_PROC_LIVE &&
                 r->procs[i].host_pid == pid;
    if (mine >= 0 && !taken)
        __atomic_store_n(&r->procs[mine].host_pid, pid, __ATOMIC_RELAXED);
    gs_region_unlock(r);
    return mine >= 0 && !taken ? 0 : -1;
}

void gs_ctx_cost_after(int dev)
{
    if (dev < 0 || dev >= GPUSLICE_MAX_DEVICES || gs_driver_pid())
        return;
    nvmlProcessInfo_t p[MAX_LISTED];
    int n = list(dev, p, MAX_LISTED);
    unsigned int found = 0, fresh = 0, self = (unsigned int)getpid();
    pthread_mutex_lock(&mu);
    /* A driver that gives pids in the caller's namespace (580 does) lists
     * us as getpid(): new across the creation, that is us for certain. */
    int self_new = 0;
    for (int i = 0; i < n && before_ok[dev]; i++)
        self_new |= p[i].pid == self && !was_listed(dev, self);
    for (int i = 0; i < n && before_ok[dev] && !self_new; i++)
        if (p[i].pid && !was_listed(dev, p[i].pid)) {
            found = p[i].pid;
            fresh++;
        }
    if (self_new)
        found = self, fresh = 1;
    before_ok[dev] = 0;
    pthread_mutex_unlock(&mu);
    if (fresh == 1 && record_host_pid(found) == 0) {
        unsigned int none = 0;
        __atomic_compare_exchange_n(&host_pid, &none, found, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE);
        GS_LOG(GS_LOG_DEBUG, "the driver knows this process as pid %u", found);
    } else if (n >= 0) {
        GS_LOG(GS_LOG_INFO, "device %d: %u processes appeared while this one made its "
               "context; its context is charged " GPUSLICE_ENV_CONTEXT_RESERVE, dev, fresh);
    }
}

int gs_ctx_cost_read(int dev, unsigned long long *bytes)
{
    unsigned int me = gs_driver_pid();
    if (!me || dev < 0 || dev >= GPUSLICE_MAX_DEVICES)
        return -1;
    nvmlProcessInfo_t p[MAX_LISTED];
    int n = list(dev, p, MAX_LISTED);
    for (int i = 0; i < n; i++)
        if (p[i].pid == me) {
            /* NVML says "not available" with all ones. */
            if (p[i].usedGpuMemory == ~0ull)
                return -1;
            *bytes = p[i].usedGpuMemory;
            return 0;
        }
    return -1;
}

void gs_ctx_cost_fork_child(void)
{
    /* The child is another process with a pid of its own, still unknown. */
    host_pid = 0;
    memset(before_ok, 0, sizeof before_ok);
    if (!__atomic_load_n(&nvml_state, __ATOMIC_ACQUIRE)) {
        /* Forked while NVML was being started: the child starts it anew. */
        nvml_once = (pthread_once_t)PTHREAD_ONCE_INIT;
    }
    pthread_mutex_init(&mu, NULL);
}
