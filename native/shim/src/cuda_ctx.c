/*
 * cuInit, contexts and what programs see (cuMemGetInfo, cuDeviceTotalMem).
 *
 * A context costs device memory the allocation calls never show (code,
 * stacks, the driver's own heaps), and how much differs by card, driver and
 * program (about 520-610 MiB on an H200). When a process first holds a
 * context on a device it is charged GPUSLICE_CONTEXT_RESERVE, checked
 * against the cap like an allocation. From then on the charge follows what
 * the driver really holds for the process beyond its tracked allocations,
 * as NVML reports it (ctx_cost.c): raised to it right after the context is
 * made and at most every SETTLE_NS on the allocation path; brought down to
 * it near the cap (gs_ctx_headroom), before an allocation is refused and
 * when a program asks how much is free (settle()). Where NVML cannot tell,
 * the fixed charge stays. It is given back when the process holds no
 * context there any more.
 */
#define _POSIX_C_SOURCE 200809L
#include "gpuslice.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------- devices */

static unsigned int noted; /* bit per device: UUID and total recorded */

int gs_current_device(void)
{
    CUdevice dev;
    if (!HAS_REAL(cuCtxGetDevice) || REAL(cuCtxGetDevice)(&dev) != CUDA_SUCCESS)
        return -1;
    return dev;
}

void gs_format_uuid(const CUuuid *u, char *out, size_t len)
{
    const unsigned char *b = (const unsigned char *)u->bytes;
    snprintf(out, len,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
             b[13], b[14], b[15]);
}

void gs_device_note(int dev)
{
    if (dev < 0 || dev >= GPUSLICE_MAX_DEVICES ||
        (__atomic_load_n(&noted, __ATOMIC_RELAXED) & (1u << dev)))
        return;
    /* Ask the driver first, with no lock held. */
    char uuid[GPUSLICE_UUID_SIZE] = "";
    CUuuid u;
    if (HAS_REAL(cuDeviceGetUuid) && REAL(cuDeviceGetUuid)(&u, dev) == CUDA_SUCCESS)
        gs_format_uuid(&u, uuid, sizeof uuid);
    size_t total = 0;
    if (HAS_REAL(cuDeviceTotalMem_v2))
        REAL(cuDeviceTotalMem_v2)(&total, dev);
    struct gpuslice_region *r = gs_region();
    if (gs_region_lock(r) != 0)
        return;
    struct gpuslice_device *d = &r->devices[dev];
    int clash = 0;
    if (uuid[0]) {
        if (!d->uuid[0])
            memcpy(d->uuid, uuid, sizeof uuid);
        else
            clash = strcmp(d->uuid, uuid) != 0;
    }
    if (total)
        __atomic_store_n(&d->total_bytes, (unsigned long long)total, __ATOMIC_RELAXED);
    if (r->device_count < (unsigned)dev + 1)
        __atomic_store_n(&r->device_count, (unsigned)dev + 1, __ATOMIC_RELAXED);
    gs_region_unlock(r);
    if (clash)
        gs_log_write(GS_LOG_WARN, "device %d is %s here but %s in the region: processes of this "
                     "container see different device orders", dev, uuid, d->uuid);
    __atomic_fetch_or(&noted, 1u << dev, __ATOMIC_RELAXED);
}

GS_API CUresult cuInit(unsigned int flags)
{
    gs_cuda_ready();
    if (!HAS_REAL(cuInit))
        return CUDA_ERROR_NOT_FOUND;
    static int prepared;
    if (!gs_cfg.disabled && gs_cfg.any_limit && !__atomic_exchange_n(&prepared, 1, __ATOMIC_RELAXED))
        gs_ctx_cost_prepare();
    CUresult r = REAL(cuInit)(flags);
    if (r == CUDA_SUCCESS && !gs_cfg.disabled && HAS_REAL(cuDeviceGetCount)) {
        int n = 0;
        REAL(cuDeviceGetCount)(&n);
        for (int i = 0; i < n && i < GPUSLICE_MAX_DEVICES; i++)
            gs_device_note(i);
    }
    return r;
}

/* ------------------------------------------------------------ contexts */

static pthread_mutex_t ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned int ctx_refs[GPUSLICE_MAX_DEVICES];
static unsigned char ctx_charged[GPUSLICE_MAX_DEVICES];
static unsigned long long ctx_bytes[GPUSLICE_MAX_DEVICES]; /* the context charge now */
static unsigned long long settled_ns[GPUSLICE_MAX_DEVICES];

/* Growth of the driver's own memory (modules loaded lazily, a second
 * context) shows up in the cap within this time of the next allocation. */
#define SETTLE_NS 100000000ull

/* Take a context reference on dev, charging the reservation on the first. */
static CUresult ctx_ref(int dev)
{
    if (gs_cfg.fail_closed)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (dev < 0 || dev >= GPUSLICE_MAX_DEVICES)
        return gs_charge(dev, GPUSLICE_KIND_CONTEXT, 0) == GS_DENIED
                   ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
    gs_device_note(dev);
    /* ctx_mu orders first-reference decisions; it is never held across a
     * driver call (only across the region lock, always in this order). */
    pthread_mutex_lock(&ctx_mu);
    if (ctx_refs[dev] == 0) {
        int c = gs_charge(dev, GPUSLICE_KIND_CONTEXT, gs_cfg.context_reserve);
        if (c == GS_DENIED) {
            pthread_mutex_unlock(&ctx_mu);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        ctx_charged[dev] = c == GS_CHARGED;
        ctx_bytes[dev] = c == GS_CHARGED ? gs_cfg.context_reserve : 0;
    }
    ctx_refs[dev]++;
    pthread_mutex_unlock(&ctx_mu);
    return CUDA_SUCCESS;
}

static void ctx_unref(int dev)
{
    if (dev < 0 || dev >= GPUSLICE_MAX_DEVICES)
        return;
    pthread_mutex_lock(&ctx_mu);
    if (ctx_refs[dev] > 0 && --ctx_refs[dev] == 0 && ctx_charged[dev]) {
        ctx_charged[dev] = 0;
        gs_uncharge(dev, GPUSLICE_KIND_CONTEXT, ctx_bytes[dev]);
        ctx_bytes[dev] = 0;
    }
    pthread_mutex_unlock(&ctx_mu);
}

/* up_only: only ever raise the charge. Far from the cap the fixed charge
 * stays while it covers what the driver holds: a context grows after it is
 * made (modules loaded at their first launch, cuBLAS, ...), and growth
 * inside the charge can never take the cap past what it is. Near the cap
 * and before a refusal the charge comes down to the driver's figure. */
static int settle(int dev, int up_only)
{
    if (dev < 0 || dev >= GPUSLICE_MAX_DEVICES || !gs_driver_pid() || !gs_limit(dev))
        return 0;
    /* The driver's figure and ours must describe the same moment: nothing
     * of this process may be between its charge and the driver's answer. */
    unsigned int started = gs_mem_ops_started();
    if (gs_mem_ops_others_open())
        return 0;
    unsigned long long held;
    if (gs_ctx_cost_read(dev, &held) != 0)
        return 0;
    /* Graph memory is charged before the driver maps it (graphs.c): that
     * part is not in the driver's figure, and must not shrink the context. */
    unsigned long long ahead = gs_graph_ahead(dev);
    struct gpuslice_region *r = gs_region();
    if (gs_region_lock(r) != 0)
        return 0;
    int slot = gs_slot_locked(r);
    unsigned long long tracked = 0;
    for (int k = 0; slot >= 0 && k < GPUSLICE_KINDS; k++)
        if (k != GPUSLICE_KIND_CONTEXT)
            tracked += r->procs[slot].used[dev][k];
    gs_region_unlock(r);
    if (slot < 0 || gs_mem_ops_others_open() || gs_mem_ops_started() != started)
        return 0;
    tracked = tracked > ahead ? tracked - ahead : 0;
    /* What we track but the driver does not hold (managed memory not yet
     * resident) leaves the context at 0: the charge never falls below the
     * driver's figure. */
    unsigned long long target = held > tracked ? held - tracked : 0;
    int lowered = 0;
    pthread_mutex_lock(&ctx_mu);
    if (ctx_refs[dev] && ctx_charged[dev] && target != ctx_bytes[dev] &&
        (!up_only || target > ctx_bytes[dev])) {
        if (target > ctx_bytes[dev]) {
            gs_charge_held(dev, GPUSLICE_KIND_CONTEXT, target - ctx_bytes[dev]);
        } else {
            gs_uncharge(dev, GPUSLICE_KIND_CONTEXT, ctx_bytes[dev] - target);
            lowered = 1;
        }
        GS_LOG(GS_LOG_DEBUG, "device %d: context charge %llu -> %llu bytes (driver holds %llu)",
               dev, ctx_bytes[dev], target, held);
        ctx_bytes[dev] = target;
    }
    __atomic_store_n(&settled_ns[dev], gs_now_ns(), __ATOMIC_RELAXED);
    pthread_mutex_unlock(&ctx_mu);
    return lowered;
}

int gs_ctx_settle(int dev)
{
    return settle(dev, 0);
}

/* Within this share of the cap, an allocation is admitted only with room
 * for what the driver itself takes for it (page tables and the like: about
 * 1.3 % of what was allocated on an H200, unseen until a settle), charged
 * to the context at once, and the context is settled right after the
 * driver's answer. Then no process's unsettled share can take the cap past
 * what it is, whatever its neighbours in the container do meanwhile. */
#define NEAR_SHARE 8
#define HEADROOM_MIN (2ull << 20)
#define HEADROOM_SHIFT 5 /* 1/32 of the request */

static __thread int settle_after; /* dev + 1: settle once this thread's operation ends */

int gs_ctx_headroom(int dev, unsigned long long bytes)
{
    unsigned long long limit;
    if (dev < 0 || dev >= GPUSLICE_MAX_DEVICES || !gs_driver_pid() || !(limit = gs_limit(dev)))
        return GS_UNCAPPED;
    unsigned long long used = gs_used(dev);
    if (used < limit && bytes < limit - used && limit - used - bytes > limit / NEAR_SHARE)
        return GS_UNCAPPED;
    gs_ctx_settle(dev);
    unsigned long long margin = bytes >> HEADROOM_SHIFT;
    margin = margin < HEADROOM_MIN ? HEADROOM_MIN : margin;
    int c = GS_UNCAPPED;
    pthread_mutex_lock(&ctx_mu);
    if (ctx_refs[dev] && ctx_charged[dev]) {
        c = gs_charge(dev, GPUSLICE_KIND_CONTEXT, margin);
        if (c == GS_CHARGED) {
            ctx_bytes[dev] += margin;
            settle_after = dev + 1;
        }
    }
    pthread_mutex_unlock(&ctx_mu);
    return c;
}

/* The charge and ctx_bytes move together under ctx_mu, as in a settle. */
static int grow_locked(int dev, unsigned long long bytes)
{
    int c = GS_UNCAPPED;
    pthread_mutex_lock(&ctx_mu);
    if (ctx_refs[dev] && ctx_charged[dev]) {
        c = gs_charge(dev, GPUSLICE_KIND_CONTEXT, bytes);
        if (c == GS_CHARGED)
            ctx_bytes[dev] += bytes;
    }
    pthread_mutex_unlock(&ctx_mu);
    return c;
}

int gs_ctx_grow(int dev, unsigned long long bytes)
{
    gs_ctx_settle_due(dev);
    int c = grow_locked(dev, bytes);
    /* As gs_charge_settling: stale pool, graph and context charges first. */
    if (c == GS_DENIED && (gs_pools_settle_all() | gs_graphs_trim_retired() | gs_ctx_settle(dev)))
        c = grow_locked(dev, bytes);
    if (c == GS_CHARGED)
        settle_after = dev + 1;
    return c;
}

void gs_ctx_shrink(int dev, unsigned long long bytes)
{
    pthread_mutex_lock(&ctx_mu);
    if (ctx_charged[dev]) {
        bytes = bytes > ctx_bytes[dev] ? ctx_bytes[dev] : bytes;
        ctx_bytes[dev] -= bytes;
        gs_uncharge(dev, GPUSLICE_KIND_CONTEXT, bytes);
    }
    pthread_mutex_unlock(&ctx_mu);
}

void gs_ctx_op_ended(void)
{
    int dev = settle_after - 1;
    if (dev >= 0) {
        settle_after = 0;
        gs_ctx_settle(dev);
    }
}

void gs_ctx_settle_due(int dev)
{
    if (dev < 0 || dev >= GPUSLICE_MAX_DEVICES || !gs_driver_pid())
        return;
    unsigned long long last = __atomic_load_n(&settled_ns[dev], __ATOMIC_RELAXED);
    if (gs_now_ns() - last >= SETTLE_NS)
        settle(dev, 1);
}

/* Before the first context on dev: what NVML lists there (ctx_cost.c). */
static void ctx_before(int dev)
{
    if (dev >= 0 && dev < GPUSLICE_MAX_DEVICES && gs_limit(dev) && !gs_driver_pid())
        gs_ctx_cost_before(dev);
}

/* After a context was made on dev: learn our pid, then settle. */
static void ctx_after(int dev)
{
    if (dev < 0 || dev >= GPUSLICE_MAX_DEVICES || !gs_limit(dev))
        return;
    gs_ctx_cost_after(dev);
    settle(dev, 1);
}

/* handle: the new context (a CUcontext or a CUgreenCtx), when r is success. */
static void ctx_created(CUresult r, void *handle, int dev)
{
    if (r != CUDA_SUCCESS) {
        ctx_unref(dev);
        return;
    }
    ctx_after(dev);
    struct gs_alloc a = {.dev = dev, .kind = GPUSLICE_KIND_CONTEXT, .bytes = 0};
    if (gs_ptrmap_put(GS_NS_CTX, (uint64_t)(uintptr_t)handle, &a) != 0)
        GS_LOG(GS_LOG_WARN, "out of memory tracking a context; its reservation stays charged");
}

#define CTX_CREATE(fn, call)                                                                  \
    gs_cuda_ready();                                                                          \
    if (!HAS_REAL(fn))                                                                        \
        return CUDA_ERROR_NOT_FOUND;                                                          \
    if (gs_cfg.disabled)                                                                      \
        return REAL(fn) call;                                                                 \
    ctx_before(dev);                                                                          \
    CUresult r = ctx_ref(dev);                                                                \
    if (r != CUDA_SUCCESS)                                                                    \
        return r;                                                                             \
    r = REAL(fn) call;                                                                        \
    ctx_created(r, r == CUDA_SUCCESS ? (void *)*pctx : NULL, dev);                            \
    return r

/* Any kind of context: its device's reference goes when it is destroyed. */
#define CTX_DESTROY(fn, ctx)                                                                  \
    gs_cuda_ready();                                                                          \
    if (!HAS_REAL(fn))                                                                        \
        return CUDA_ERROR_NOT_FOUND;                                                          \
    if (gs_cfg.disabled)                                                                      \
        return REAL(fn)(ctx);                                                                 \
    struct gs_alloc a;                                                                        \
    int found = gs_ptrmap_take(GS_NS_CTX, (uint64_t)(uintptr_t)(ctx), &a);                   \
    CUresult r = REAL(fn)(ctx);                                                               \
    if (found) {                                                                              \
        if (r == CUDA_SUCCESS)                                                                \
            ctx_unref(a.dev);                                                                 \
        else                                                                                  \
            gs_ptrmap_put(GS_NS_CTX, (uint64_t)(uintptr_t)(ctx), &a);                        \
    }                                                                                         \
    return r

GS_API CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    CTX_CREATE(cuCtxCreate, (pctx, flags, dev));
}

GS_API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    CTX_CREATE(cuCtxCreate_v2, (pctx, flags, dev));
}

GS_API CUresult cuCtxCreate_v3(CUcontext *pctx, void *params, int n, unsigned int flags,
                               CUdevice dev)
{
    CTX_CREATE(cuCtxCreate_v3, (pctx, params, n, flags, dev));
}

GS_API CUresult cuCtxCreate_v4(CUcontext *pctx, void *params, unsigned int flags, CUdevice dev)
{
    CTX_CREATE(cuCtxCreate_v4, (pctx, params, flags, dev));
}

GS_API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    CTX_DESTROY(cuCtxDestroy_v2, ctx);
}

GS_API CUresult cuCtxDestroy(CUcontext ctx)
{
    CTX_DESTROY(cuCtxDestroy, ctx);
}

/* A green context (a share of the device's SMs) costs what a context does. */
GS_API CUresult cuGreenCtxCreate(CUgreenCtx *pctx, CUdevResourceDesc desc, CUdevice dev,
                                 unsigned int flags)
{
    CTX_CREATE(cuGreenCtxCreate, (pctx, desc, dev, flags));
}

GS_API CUresult cuGreenCtxDestroy(CUgreenCtx ctx)
{
    CTX_DESTROY(cuGreenCtxDestroy, ctx);
}

/* Contexts made for OpenGL and VDPAU interop (deprecated, still exported). */
GS_API CUresult cuGLCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    CTX_CREATE(cuGLCtxCreate, (pctx, flags, dev));
}

GS_API CUresult cuGLCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    CTX_CREATE(cuGLCtxCreate_v2, (pctx, flags, dev));
}

GS_API CUresult cuVDPAUCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev,
                                 unsigned int vdp, void *getProc)
{
    CTX_CREATE(cuVDPAUCtxCreate, (pctx, flags, dev, vdp, getProc));
}

GS_API CUresult cuVDPAUCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev,
                                    unsigned int vdp, void *getProc)
{
    CTX_CREATE(cuVDPAUCtxCreate_v2, (pctx, flags, dev, vdp, getProc));
}

/* A module's code, constants and globals go to the context's memory, of a
 * size only the driver knows (a __device__ array can be gigabytes). So a
 * load is checked right after: the context is settled on the driver's
 * figure, and a load that took the container past its cap is undone and
 * refused. Without the driver's figure (no NVML) the fixed charge stays. */
static int load_over_cap(int dev)
{
    if (dev < 0 || dev >= GPUSLICE_MAX_DEVICES || !gs_limit(dev) || !gs_driver_pid())
        return 0;
    gs_ctx_settle(dev);
    return gs_used(dev) > gs_limit(dev);
}

#define MODULE_LOAD(fn, unload, handle, call)                                                 \
    gs_cuda_ready();                                                                          \
    if (!HAS_REAL(fn))                                                                        \
        return CUDA_ERROR_NOT_FOUND;                                                          \
    if (gs_cfg.disabled)                                                                      \
        return REAL(fn) call;                                                                 \
    int dev = gs_current_device();                                                            \
    CUresult r = REAL(fn) call;                                                               \
    if (r == CUDA_SUCCESS && load_over_cap(dev) && HAS_REAL(unload)) {                        \
        GS_LOG(GS_LOG_INFO, "device %d: a module load took the cap; unloaded", dev);          \
        REAL(unload)(*(handle));                                                              \
        gs_ctx_settle(dev);                                                                   \
        return CUDA_ERROR_OUT_OF_MEMORY;                                                      \
    }                                                                                         \
    return r

GS_API CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    MODULE_LOAD(cuModuleLoad, cuModuleUnload, module, (module, fname));
}

GS_API CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    MODULE_LOAD(cuModuleLoadData, cuModuleUnload, module, (module, image));
}

GS_API CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int n,
                                   int *options, void **values)
{
    MODULE_LOAD(cuModuleLoadDataEx, cuModuleUnload, module, (module, image, n, options, values));
}

GS_API CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin)
{
    MODULE_LOAD(cuModuleLoadFatBinary, cuModuleUnload, module, (module, fatCubin));
}

GS_API CUresult cuLibraryLoadData(CUlibrary *library, const void *code, int *jitOptions,
                                  void **jitValues, unsigned int numJit, int *libOptions,
                                  void **libValues, unsigned int numLib)
{
    MODULE_LOAD(cuLibraryLoadData, cuLibraryUnload, library,
                (library, code, jitOptions, jitValues, numJit, libOptions, libValues, numLib));
}

GS_API CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *fileName, int *jitOptions,
                                      void **jitValues, unsigned int numJit, int *libOptions,
                                      void **libValues, unsigned int numLib)
{
    MODULE_LOAD(cuLibraryLoadFromFile, cuLibraryUnload, library,
                (library, fileName, jitOptions, jitValues, numJit, libOptions, libValues, numLib));
}

/* What raising a limit reserves in the context: the stack for every thread
 * the device keeps resident, the printf FIFO and the malloc heap once. */
static unsigned long long limit_growth(int dev, int limit, size_t value)
{
    size_t old = 0;
    if (!HAS_REAL(cuCtxGetLimit) || REAL(cuCtxGetLimit)(&old, limit) != CUDA_SUCCESS ||
        value <= old)
        return 0;
    unsigned long long per = 1, grow;
    if (limit == CU_LIMIT_STACK_SIZE) {
        int sms = 0, threads = 0;
        if (!HAS_REAL(cuDeviceGetAttribute) ||
            REAL(cuDeviceGetAttribute)(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) ||
            REAL(cuDeviceGetAttribute)(&threads,
                                       CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, dev))
            return value - old; /* unknown: at least the difference */
        per = (unsigned long long)(sms > 0 ? sms : 1) * (unsigned long long)(threads > 0 ? threads : 1);
    }
    return __builtin_mul_overflow(value - old, per, &grow) ? ~0ull : grow;
}

GS_API CUresult cuCtxSetLimit(int limit, size_t value)
{
    gs_cuda_ready();
    if (!HAS_REAL(cuCtxSetLimit))
        return CUDA_ERROR_NOT_FOUND;
    int dev = gs_cfg.disabled || limit > CU_LIMIT_MALLOC_HEAP_SIZE ? -1 : gs_current_device();
    if (dev < 0 || dev >= GPUSLICE_MAX_DEVICES || !gs_limit(dev))
        return REAL(cuCtxSetLimit)(limit, value);
    unsigned long long grow = limit_growth(dev, limit, value);
    gs_mem_op_begin();
    /* Charged to the context ahead of the call: the settle when the call
     * ends moves the context to the driver's figure. */
    int c = grow ? gs_ctx_grow(dev, grow) : GS_UNCAPPED;
    if (c == GS_DENIED) {
        gs_mem_op_end();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUresult r = REAL(cuCtxSetLimit)(limit, value);
    if (r != CUDA_SUCCESS && c == GS_CHARGED)
        gs_ctx_shrink(dev, grow);
    gs_mem_op_end();
    return r;
}

GS_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    gs_cuda_ready();
    if (!HAS_REAL(cuDevicePrimaryCtxRetain))
        return CUDA_ERROR_NOT_FOUND;
    if (gs_cfg.disabled)
        return REAL(cuDevicePrimaryCtxRetain)(pctx, dev);
    ctx_before(dev);
    CUresult r = ctx_ref(dev);
    if (r != CUDA_SUCCESS)
        return r;
    r = REAL(cuDevicePrimaryCtxRetain)(pctx, dev);
    if (r != CUDA_SUCCESS)
        ctx_unref(dev);
    else
        ctx_after(dev);
    return r;
}

static CUresult primary_release(gs_cuDevicePrimaryCtxRelease_v2_fn real, CUdevice dev)
{
    if (!real)
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = real(dev);
    if (r == CUDA_SUCCESS && !gs_cfg.disabled)
        ctx_unref(dev);
    return r;
}

GS_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    gs_cuda_ready();
    return primary_release(REAL(cuDevicePrimaryCtxRelease), dev);
}

GS_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    gs_cuda_ready();
    return primary_release(REAL(cuDevicePrimaryCtxRelease_v2), dev);
}

void gs_ctx_fork_prepare(void)
{
    pthread_mutex_lock(&ctx_mu);
}

void gs_ctx_fork_parent(void)
{
    pthread_mutex_unlock(&ctx_mu);
}

void gs_ctx_fork_child(void)
{
    /* Contexts do not survive fork: the child holds none. */
    memset(ctx_refs, 0, sizeof ctx_refs);
    memset(ctx_charged, 0, sizeof ctx_charged);
    memset(ctx_bytes, 0, sizeof ctx_bytes);
    memset(settled_ns, 0, sizeof settled_ns);
    gs_ctx_cost_fork_child();
    pthread_mutex_init(&ctx_mu, NULL);
}

/* ------------------------------------------------------ what programs see */

/* free and total as a capped device shows them; 0 if dev is not capped. */
static int capped_view(int dev, unsigned long long real_free, unsigned long long *free,
                       unsigned long long *total)
{
    if (gs_cfg.fail_closed) {
        *free = 0;
        return 0; /* total stays the real one: nothing sensible to show */
    }
    unsigned long long limit = gs_limit(dev);
    if (!limit)
        return -1;
    gs_pools_settle_all(); /* what pools gave back at sync points is free again */
    gs_ctx_settle(dev);
    unsigned long long used = gs_used(dev);
    unsigned long long room = limit > used ? limit - used : 0;
    *total = limit;
    *free = real_free < room ? real_free : room;
    return 0;
}

GS_API CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
    gs_cuda_ready();
    if (!HAS_REAL(cuMemGetInfo_v2))
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = REAL(cuMemGetInfo_v2)(free, total);
    if (r != CUDA_SUCCESS || gs_cfg.disabled || !free || !total)
        return r;
    unsigned long long f, t = *total;
    if (capped_view(gs_current_device(), *free, &f, &t) == 0) {
        *free = (size_t)f;
        *total = (size_t)t;
    }
    return r;
}

static unsigned int clamp32(unsigned long long v)
{
    return v > 0xffffffffull ? 0xffffffffu : (unsigned int)v;
}

GS_API CUresult cuMemGetInfo(unsigned int *free, unsigned int *total)
{
    gs_cuda_ready();
    if (!HAS_REAL(cuMemGetInfo))
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = REAL(cuMemGetInfo)(free, total);
    if (r != CUDA_SUCCESS || gs_cfg.disabled || !free || !total)
        return r;
    unsigned long long f, t = *total;
    if (capped_view(gs_current_device(), *free, &f, &t) == 0) {
        *free = clamp32(f);
        *total = clamp32(t);
    }
    return r;
}

/* The cap, or the card's memory if that is smaller (a cap is not memory). */
static unsigned long long capped_total(int dev, unsigned long long real)
{
    if (gs_cfg.disabled || gs_cfg.fail_closed)
        return real;
    unsigned long long limit = gs_limit(dev);
    return limit && limit < real ? limit : real;
}

GS_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    gs_cuda_ready();
    if (!HAS_REAL(cuDeviceTotalMem_v2))
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = REAL(cuDeviceTotalMem_v2)(bytes, dev);
    if (r == CUDA_SUCCESS && bytes)
        *bytes = (size_t)capped_total(dev, *bytes);
    return r;
}

GS_API CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
    gs_cuda_ready();
    if (!HAS_REAL(cuDeviceTotalMem))
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = REAL(cuDeviceTotalMem)(bytes, dev);
    if (r == CUDA_SUCCESS && bytes)
        *bytes = clamp32(capped_total(dev, *bytes));
    return r;
}
