/*
 * cuInit, contexts and what programs see (cuMemGetInfo, cuDeviceTotalMem).
 *
 * A context costs device memory the allocation calls never show (code,
 * stacks, the driver's own heaps). We charge a fixed reservation,
 * GPUSLICE_CONTEXT_RESERVE, when a process first holds a context on a
 * device, and give it back when it holds none there any more.
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

static void format_uuid(const CUuuid *u, char *out, size_t len)
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
        format_uuid(&u, uuid, sizeof uuid);
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
    }
    ctx_refs[dev]++;
    pthread_mutex_unlock(&ctx_mu);
    return CUDA_SUCCESS;
}

static void ctx_unref(int dev)
{
    if (dev < 0 || dev >= GPUSLICE_MAX_DEVICES)
        return;
    int give_back = 0;
    pthread_mutex_lock(&ctx_mu);
    if (ctx_refs[dev] > 0 && --ctx_refs[dev] == 0 && ctx_charged[dev]) {
        ctx_charged[dev] = 0;
        give_back = 1;
    }
    if (give_back)
        gs_uncharge(dev, GPUSLICE_KIND_CONTEXT, gs_cfg.context_reserve);
    pthread_mutex_unlock(&ctx_mu);
}

static void ctx_created(CUresult r, CUcontext *pctx, int dev)
{
    if (r != CUDA_SUCCESS) {
        ctx_unref(dev);
        return;
    }
    struct gs_alloc a = {.dev = dev, .kind = GPUSLICE_KIND_CONTEXT, .bytes = 0};
    if (gs_ptrmap_put(GS_NS_CTX, (uint64_t)(uintptr_t)*pctx, &a) != 0)
        GS_LOG(GS_LOG_WARN, "out of memory tracking a context; its reservation stays charged");
}

#define CTX_CREATE(fn, call)                                                                  \
    gs_cuda_ready();                                                                          \
    if (!HAS_REAL(fn))                                                                        \
        return CUDA_ERROR_NOT_FOUND;                                                          \
    if (gs_cfg.disabled)                                                                      \
        return REAL(fn) call;                                                                 \
    CUresult r = ctx_ref(dev);                                                                \
    if (r != CUDA_SUCCESS)                                                                    \
        return r;                                                                             \
    r = REAL(fn) call;                                                                        \
    ctx_created(r, pctx, dev);                                                                \
    return r

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
    gs_cuda_ready();
    if (!HAS_REAL(cuCtxDestroy_v2))
        return CUDA_ERROR_NOT_FOUND;
    if (gs_cfg.disabled)
        return REAL(cuCtxDestroy_v2)(ctx);
    struct gs_alloc a;
    int found = gs_ptrmap_take(GS_NS_CTX, (uint64_t)(uintptr_t)ctx, &a);
    CUresult r = REAL(cuCtxDestroy_v2)(ctx);
    if (found) {
        if (r == CUDA_SUCCESS)
            ctx_unref(a.dev);
        else
            gs_ptrmap_put(GS_NS_CTX, (uint64_t)(uintptr_t)ctx, &a);
    }
    return r;
}

GS_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    gs_cuda_ready();
    if (!HAS_REAL(cuDevicePrimaryCtxRetain))
        return CUDA_ERROR_NOT_FOUND;
    if (gs_cfg.disabled)
        return REAL(cuDevicePrimaryCtxRetain)(pctx, dev);
    CUresult r = ctx_ref(dev);
    if (r != CUDA_SUCCESS)
        return r;
    r = REAL(cuDevicePrimaryCtxRetain)(pctx, dev);
    if (r != CUDA_SUCCESS)
        ctx_unref(dev);
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
