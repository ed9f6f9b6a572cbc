/*
 * cuInit, contexts, module loads, limits, and what programs see
 * (cuMemGetInfo, cuDeviceTotalMem): the wrappers. What a context is charged,
 * and when that charge follows the driver's figure, is the charging rules'
 * (account.c, "The context charge"); these wrappers tell it when a context
 * is made and destroyed, and ask it to settle where a program looks.
 */
#define _POSIX_C_SOURCE 200809L
#include "gpuslice.h"


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

/* handle: the new context (a CUcontext or a CUgreenCtx), when r is success. */
static void ctx_created(CUresult r, void *handle, int dev)
{
    gs_ctx_opened(dev, r == CUDA_SUCCESS);
    if (r != CUDA_SUCCESS)
        return;
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
    CUresult r = gs_ctx_open(dev);                                                            \
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
            gs_ctx_closed(a.dev);                                                             \
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
 * load is checked right after: the context's charge is raised to the
 * driver's figure, and a load that took the container past its cap is
 * undone and refused. Raised only: a charge lowered here would lose the
 * headroom the fixed charge keeps for what the driver loads later, at the
 * module's first launch (kernels load lazily), which no call of ours sees
 * (on an H200 a PyTorch process's context grew from 520 to 610 MiB so, and
 * 4 processes of an 8 GiB slice reached 8,460 MiB). Without the driver's
 * figure (no NVML) the fixed charge stays. */
static int load_over_cap(int dev)
{
    if (dev < 0 || dev >= GPUSLICE_MAX_DEVICES || !gs_limit(dev) || !gs_driver_pid())
        return 0;
    gs_ctx_settle_up(dev);
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
    CUresult r = gs_ctx_open(dev);
    if (r != CUDA_SUCCESS)
        return r;
    r = REAL(cuDevicePrimaryCtxRetain)(pctx, dev);
    gs_ctx_opened(dev, r == CUDA_SUCCESS);
    return r;
}

static CUresult primary_release(gs_cuDevicePrimaryCtxRelease_v2_fn real, CUdevice dev)
{
    if (!real)
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = real(dev);
    if (r == CUDA_SUCCESS && !gs_cfg.disabled)
        gs_ctx_closed(dev);
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
