/*
 * NVML: what nvidia-smi-like tools and pynvml see. For a capped device the
 * memory numbers are the container's (total = cap, used = the region's
 * usage) and the process list is the container's live processes, taken from
 * the region's entries. Utilization of a device with a compute cap is the
 * container's own card time as a share of the card's; of one with only a
 * memory cap it is not known and not shown (the card's would tell of the
 * neighbours). Uncapped devices pass through untouched.
 *
 * An NVML device is matched to a region device by UUID (the region records
 * each card's UUID when a CUDA process first sees it). Before any CUDA
 * process has run, the NVML index stands in, with the limits from the
 * environment as the region holds them.
 */
#define _POSIX_C_SOURCE 200809L
#include "gpuslice.h"

#include <string.h>
#include <time.h>

/* The region device for an NVML handle, or -1 if it is not capped (with
 * memory: any_cap 0; or either: 1). */
static int region_device_capped(nvmlDevice_t device, int any_cap)
{
    if (gs_cfg.disabled || gs_cfg.fail_closed)
        return -1;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = "";
    if (HAS_REAL(nvmlDeviceGetUUID) &&
        REAL(nvmlDeviceGetUUID)(device, uuid, sizeof uuid) != NVML_SUCCESS)
        return -1;
    struct gpuslice_region *r = gs_region();
    int found = -1, index_free = 0;
    unsigned int index = 0;
    int have_index = HAS_REAL(nvmlDeviceGetIndex) &&
                     REAL(nvmlDeviceGetIndex)(device, &index) == NVML_SUCCESS &&
                     index < GPUSLICE_MAX_DEVICES;
    /* The UUIDs are written under the lock; read them under it too. */
    if (gs_region_lock(r) != 0)
        return -1;
    for (int i = 0; i < GPUSLICE_MAX_DEVICES && found < 0 && uuid[0]; i++)
        if (strncmp(r->devices[i].uuid, uuid, GPUSLICE_UUID_SIZE) == 0)
            found = i;
    if (have_index)
        index_free = r->devices[index].uuid[0] == '\0';
    gs_region_unlock(r);
    /* By index only while the region's device at that index is not known to be
     * another card. */
    if (found < 0 && have_index && index_free)
        found = (int)index;
    if (found < 0)
        return -1;
    if (gs_limit(found))
        return found;
    return any_cap && __atomic_load_n(&r->devices[found].core_limit, __ATOMIC_RELAXED) ? found
                                                                                       : -1;
}

static int region_device(nvmlDevice_t device)
{
    return region_device_capped(device, 0);
}

static void capped_memory(int dev, unsigned long long *total, unsigned long long *used,
                          unsigned long long *free)
{
    *total = gs_limit(dev);
    *used = gs_used(dev);
    *free = *total > *used ? *total - *used : 0;
}

GS_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *m)
{
    gs_nvml_ready();
    if (!HAS_REAL(nvmlDeviceGetMemoryInfo))
        return NVML_ERROR_NOT_SUPPORTED;
    nvmlReturn_t r = REAL(nvmlDeviceGetMemoryInfo)(device, m);
    int dev;
    if (r == NVML_SUCCESS && m && (dev = region_device(device)) >= 0)
        capped_memory(dev, &m->total, &m->used, &m->free);
    return r;
}

GS_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *m)
{
    gs_nvml_ready();
    if (!HAS_REAL(nvmlDeviceGetMemoryInfo_v2))
        return NVML_ERROR_NOT_SUPPORTED;
    /* Like NVML: refuse a layout we do not know before touching it. */
    if (m && m->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlReturn_t r = REAL(nvmlDeviceGetMemoryInfo_v2)(device, m);
    int dev;
    if (r == NVML_SUCCESS && m && (dev = region_device(device)) >= 0) {
        capped_memory(dev, &m->total, &m->used, &m->free);
        m->reserved = 0; /* the cap has no driver reserve of its own */
    }
    return r;
}

/* The two entry layouts: v1 (pid, memory) and v2/v3 (plus MIG instance ids). */
_Static_assert(sizeof(nvmlProcessInfo_v1_t) == 16, "nvmlProcessInfo_v1_t");
_Static_assert(sizeof(nvmlProcessInfo_t) == 24, "nvmlProcessInfo_v2_t");

static nvmlReturn_t processes(gs_nvmlDeviceGetComputeRunningProcesses_fn real,
                              nvmlDevice_t device, unsigned int *count, void *infos, int v1)
{
    if (!real)
        return NVML_ERROR_NOT_SUPPORTED;
    int dev = region_device(device);
    if (dev < 0 || !count)
        return real(device, count, infos);
    /* Gather first, then answer as NVML does: too small a buffer gets the
     * needed count and NVML_ERROR_INSUFFICIENT_SIZE. */
    nvmlProcessInfo_v1_t found[GPUSLICE_MAX_PROCS];
    unsigned n = 0;
    struct gpuslice_region *r = gs_region();
    for (int i = 0; i < GPUSLICE_MAX_PROCS; i++) {
        const struct gpuslice_proc *s = &r->procs[i];
        if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != GPUSLICE_PROC_LIVE)
            continue;
        unsigned long long used = 0;
        for (int k = 0; k < GPUSLICE_KINDS; k++)
            used += __atomic_load_n(&s->used[dev][k], __ATOMIC_RELAXED);
        if (!used)
            continue;
        found[n].pid = (unsigned)__atomic_load_n(&s->pid, __ATOMIC_RELAXED);
        found[n].usedGpuMemory = used;
        n++;
    }
    if (*count < n || (n && !infos)) {
        *count = n;
        return n ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    }
    for (unsigned i = 0; i < n; i++) {
        if (v1) {
            ((nvmlProcessInfo_v1_t *)infos)[i] = found[i];
        } else {
            nvmlProcessInfo_t *p = &((nvmlProcessInfo_t *)infos)[i];
            p->pid = found[i].pid;
            p->usedGpuMemory = found[i].usedGpuMemory;
            p->gpuInstanceId = 0xFFFFFFFFu; /* not a MIG instance */
            p->computeInstanceId = 0xFFFFFFFFu;
        }
    }
    *count = n;
    return NVML_SUCCESS;
}

GS_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device,
                                                         unsigned int *count, void *infos)
{
    gs_nvml_ready();
    return processes(REAL(nvmlDeviceGetComputeRunningProcesses), device, count, infos, 1);
}

GS_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device,
                                                            unsigned int *count, void *infos)
{
    gs_nvml_ready();
    return processes(REAL(nvmlDeviceGetComputeRunningProcesses_v2), device, count, infos, 0);
}

GS_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                            unsigned int *count, void *infos)
{
    gs_nvml_ready();
    return processes(REAL(nvmlDeviceGetComputeRunningProcesses_v3), device, count, infos, 0);
}

/* BAR1 (the card's memory mapped for the host) is used by every tenant:
 * its figures tell of the neighbours. */
GS_API nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t *bar1)
{
    gs_nvml_ready();
    if (!HAS_REAL(nvmlDeviceGetBAR1MemoryInfo))
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    if (region_device_capped(device, 1) >= 0)
        return NVML_ERROR_NOT_SUPPORTED;
    return REAL(nvmlDeviceGetBAR1MemoryInfo)(device, bar1);
}

/* --------------------------------------------------------- utilization */

/* The container's card time on dev as a percentage of wall time: over the
 * time since this process last asked (at least MIN_WINDOW_NS: a first
 * question waits that long, as NVML's own figure is over a sample period). */
#define MIN_WINDOW_NS 500000000ull

static unsigned int card_time_pct(int dev)
{
    static unsigned long long last_ns[GPUSLICE_MAX_DEVICES], last_charged[GPUSLICE_MAX_DEVICES];
    static unsigned int last_pct[GPUSLICE_MAX_DEVICES];
    const struct gpuslice_bucket *b = &gs_region()->devices[dev].compute;
    unsigned long long now = gs_now_ns(), charged = __atomic_load_n(&b->charged_ns,
                                                                     __ATOMIC_RELAXED);
    unsigned long long t0 = __atomic_load_n(&last_ns[dev], __ATOMIC_RELAXED);
    if (!t0) {
        struct timespec ts = {0, (long)MIN_WINDOW_NS};
        nanosleep(&ts, NULL);
        t0 = now;
        unsigned long long c0 = charged;
        now = gs_now_ns();
        charged = __atomic_load_n(&b->charged_ns, __ATOMIC_RELAXED);
        __atomic_store_n(&last_charged[dev], c0, __ATOMIC_RELAXED);
    } else if (now - t0 < MIN_WINDOW_NS) {
        return __atomic_load_n(&last_pct[dev], __ATOMIC_RELAXED);
    }
    unsigned long long c0 = __atomic_load_n(&last_charged[dev], __ATOMIC_RELAXED);
    unsigned long long used = charged > c0 ? charged - c0 : 0, span = now - t0;
    unsigned int pct = span ? (unsigned int)(used * 100 / span) : 0;
    if (pct > 100)
        pct = 100;
    __atomic_store_n(&last_ns[dev], now, __ATOMIC_RELAXED);
    __atomic_store_n(&last_charged[dev], charged, __ATOMIC_RELAXED);
    __atomic_store_n(&last_pct[dev], pct, __ATOMIC_RELAXED);
    return pct;
}

GS_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *u)
{
    gs_nvml_ready();
    if (!HAS_REAL(nvmlDeviceGetUtilizationRates))
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    int dev = region_device_capped(device, 1);
    if (dev < 0)
        return REAL(nvmlDeviceGetUtilizationRates)(device, u);
    if (!u)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* Card time is measured where the container is paced, nowhere else. */
    if (!__atomic_load_n(&gs_region()->devices[dev].core_limit, __ATOMIC_RELAXED))
        return NVML_ERROR_NOT_SUPPORTED;
    u->gpu = card_time_pct(dev);
    u->memory = 0; /* the memory controller's busy time is the card's: not ours to show */
    return NVML_SUCCESS;
}

/* The card's utilization samples, and every process's: the neighbours'. */
GS_API nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t device, int type,
                                         unsigned long long lastSeenTimeStamp,
                                         int *sampleValType, unsigned int *sampleCount,
                                         void *samples)
{
    gs_nvml_ready();
    if (!HAS_REAL(nvmlDeviceGetSamples))
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    if (region_device_capped(device, 1) >= 0)
        return NVML_ERROR_NOT_SUPPORTED;
    return REAL(nvmlDeviceGetSamples)(device, type, lastSeenTimeStamp, sampleValType,
                                      sampleCount, samples);
}

/* Per-process samples, cut to the container's processes (by driver pid). */
GS_API nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                                    nvmlProcessUtilizationSample_t *util,
                                                    unsigned int *count,
                                                    unsigned long long lastSeenTimeStamp)
{
    gs_nvml_ready();
    if (!HAS_REAL(nvmlDeviceGetProcessUtilization))
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    nvmlReturn_t r = REAL(nvmlDeviceGetProcessUtilization)(device, util, count,
                                                           lastSeenTimeStamp);
    if (r != NVML_SUCCESS || !util || !count || region_device_capped(device, 1) < 0)
        return r;
    unsigned int keep[GPUSLICE_MAX_PROCS + 1];
    int n = gs_container_driver_pids(keep, GPUSLICE_MAX_PROCS + 1);
    unsigned int out = 0;
    for (unsigned int i = 0; i < *count; i++)
        for (int k = 0; k < n; k++)
            if (util[i].pid == keep[k]) {
                util[out++] = util[i];
                break;
            }
    *count = out;
    return r;
}

/* The video, JPEG and optical-flow engines' busy time is the card's: the
 * neighbours' work, not shown where the container is capped. */
#define ENGINE_UTILIZATION(fn)                                                                \
    GS_API nvmlReturn_t fn(nvmlDevice_t device, unsigned int *u, unsigned int *period)         \
    {                                                                                         \
        gs_nvml_ready();                                                                      \
        if (!HAS_REAL(fn))                                                                    \
            return NVML_ERROR_FUNCTION_NOT_FOUND;                                             \
        if (region_device_capped(device, 1) >= 0)                                             \
            return NVML_ERROR_NOT_SUPPORTED;                                                  \
        return REAL(fn)(device, u, period);                                                   \
    }
ENGINE_UTILIZATION(nvmlDeviceGetEncoderUtilization)
ENGINE_UTILIZATION(nvmlDeviceGetDecoderUtilization)
ENGINE_UTILIZATION(nvmlDeviceGetJpgUtilization)
ENGINE_UTILIZATION(nvmlDeviceGetOfaUtilization)

/* Its versioned successor: a layout we would have to follow; not shown. */
GS_API nvmlReturn_t nvmlDeviceGetProcessesUtilizationInfo(nvmlDevice_t device, void *info)
{
    gs_nvml_ready();
    if (!HAS_REAL(nvmlDeviceGetProcessesUtilizationInfo))
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    if (region_device_capped(device, 1) >= 0)
        return NVML_ERROR_NOT_SUPPORTED;
    return REAL(nvmlDeviceGetProcessesUtilizationInfo)(device, info);
}

/* -------------------------------------------------------- placed cards */
/* A card-less container (the accountant picked its card) sees in NVML only
 * the cards it was placed on, in the order they were placed, as CUDA does. */

static int placed_index(const char *uuid)
{
    for (int i = 0; i < gs_cfg.placed_count; i++)
        if (strncmp(gs_cfg.placed[i], uuid, GPUSLICE_UUID_SIZE) == 0)
            return i;
    return -1;
}

static nvmlReturn_t count(nvmlReturn_t r, unsigned int *n)
{
    if (r == NVML_SUCCESS && n && gs_cfg.placed_count && !gs_cfg.disabled)
        *n = (unsigned int)gs_cfg.placed_count;
    return r;
}

GS_API nvmlReturn_t nvmlDeviceGetCount(unsigned int *n)
{
    gs_nvml_ready();
    if (!HAS_REAL(nvmlDeviceGetCount))
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    return count(REAL(nvmlDeviceGetCount)(n), n);
}

GS_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n)
{
    gs_nvml_ready();
    if (!HAS_REAL(nvmlDeviceGetCount_v2))
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    return count(REAL(nvmlDeviceGetCount_v2)(n), n);
}

static nvmlReturn_t by_index(nvmlReturn_t (*real)(unsigned int, nvmlDevice_t *),
                             unsigned int index, nvmlDevice_t *device)
{
    if (!gs_cfg.placed_count || gs_cfg.disabled)
        return real(index, device);
    if (index >= (unsigned int)gs_cfg.placed_count || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!HAS_REAL(nvmlDeviceGetHandleByUUID))
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    return REAL(nvmlDeviceGetHandleByUUID)(gs_cfg.placed[index], device);
}

GS_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    gs_nvml_ready();
    if (!HAS_REAL(nvmlDeviceGetHandleByIndex))
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    return by_index(REAL(nvmlDeviceGetHandleByIndex), index, device);
}

GS_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    gs_nvml_ready();
    if (!HAS_REAL(nvmlDeviceGetHandleByIndex_v2))
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    return by_index(REAL(nvmlDeviceGetHandleByIndex_v2), index, device);
}

GS_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    gs_nvml_ready();
    if (!HAS_REAL(nvmlDeviceGetHandleByUUID))
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    if (gs_cfg.placed_count && !gs_cfg.disabled && uuid && placed_index(uuid) < 0)
        return NVML_ERROR_NOT_FOUND; /* not this container's card */
    return REAL(nvmlDeviceGetHandleByUUID)(uuid, device);
}
