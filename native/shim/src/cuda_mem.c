/*
 * The allocation families. Every allocating wrapper follows one protocol:
 *
 *   1. charge (check + charge as one step under the region lock),
 *   2. call the driver with no lock held,
 *   3. on success remember what was charged (ptrmap), on failure uncharge.
 *
 * and every freeing wrapper the mirror image: forget, call the driver,
 * uncharge on success (or remember again on failure). Allocations on an
 * uncapped device are neither charged nor remembered.
 *
 * Stream-ordered allocations are charged by what their pool holds, not by
 * what is live in it: see pools.c.
 */
#define _POSIX_C_SOURCE 200809L
#include "gpuslice.h"

#include <limits.h>

/* Step 1 for the current context's device. Unless it refuses, finish()
 * must follow (the operation is open until then: gs_mem_op_begin). */
static int begin(int kind, unsigned long long bytes, int *dev)
{
    if (GS_UNLIKELY(gs_cfg.fail_closed))
        return GS_DENIED;
    gs_mem_op_begin();
    *dev = gs_current_device();
    if (*dev < 0)
        return GS_UNCAPPED; /* no context: the driver will say so itself */
    gs_device_note(*dev);
    int c = gs_charge_settling(*dev, kind, bytes);
    if (c == GS_DENIED)
        gs_mem_op_end();
    return c;
}

/* Step 3. */
static void finish(int charged, CUresult r, int ns, uint64_t key, int dev, int kind,
                   unsigned long long bytes)
{
    gs_mem_op_end();
    if (charged != GS_CHARGED)
        return;
    if (r != CUDA_SUCCESS) {
        gs_uncharge(dev, kind, bytes);
        return;
    }
    struct gs_alloc a = {.dev = dev, .kind = kind, .bytes = bytes};
    if (gs_ptrmap_put(ns, key, &a) != 0)
        GS_LOG(GS_LOG_WARN, "out of memory tracking an allocation; it stays charged");
}

/* The free side: returns whether `key` was charged (and fills *a).
 * forgotten() must follow. */
static int forget(int ns, uint64_t key, struct gs_alloc *a)
{
    gs_mem_op_begin();
    return gs_ptrmap_take(ns, key, a);
}

static void forgotten(int found, CUresult r, int ns, uint64_t key, const struct gs_alloc *a)
{
    if (!found) {
        gs_mem_op_end();
        return;
    }
    if (r != CUDA_SUCCESS)
        gs_ptrmap_put(ns, key, a); /* still allocated */
    else if (a->kind == GPUSLICE_KIND_POOL)
        gs_pool_settle(a->pool, a->dev, 0); /* the pool may keep it: charge what it holds */
    else
        gs_uncharge(a->dev, a->kind, a->bytes);
    gs_mem_op_end();
}

#define ENTER(fn)                                                                             \
    gs_cuda_ready();                                                                          \
    if (GS_UNLIKELY(!HAS_REAL(fn)))                                                           \
        return CUDA_ERROR_NOT_FOUND

/* ------------------------------------------------------- plain, managed */

GS_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    ENTER(cuMemAlloc_v2);
    if (gs_cfg.disabled)
        return REAL(cuMemAlloc_v2)(dptr, bytesize);
    int dev = -1, c = begin(GPUSLICE_KIND_ALLOC, bytesize, &dev);
    if (c == GS_DENIED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = REAL(cuMemAlloc_v2)(dptr, bytesize);
    finish(c, r, GS_NS_PTR, r == CUDA_SUCCESS ? *dptr : 0, dev, GPUSLICE_KIND_ALLOC, bytesize);
    return r;
}

GS_API CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize)
{
    ENTER(cuMemAlloc);
    if (gs_cfg.disabled)
        return REAL(cuMemAlloc)(dptr, bytesize);
    int dev = -1, c = begin(GPUSLICE_KIND_ALLOC, bytesize, &dev);
    if (c == GS_DENIED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = REAL(cuMemAlloc)(dptr, bytesize);
    finish(c, r, GS_NS_PTR, r == CUDA_SUCCESS ? *dptr : 0, dev, GPUSLICE_KIND_ALLOC, bytesize);
    return r;
}

GS_API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    /* Counted: managed memory can migrate to and live on the device. */
    ENTER(cuMemAllocManaged);
    if (gs_cfg.disabled)
        return REAL(cuMemAllocManaged)(dptr, bytesize, flags);
    int dev = -1, c = begin(GPUSLICE_KIND_ALLOC, bytesize, &dev);
    if (c == GS_DENIED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = REAL(cuMemAllocManaged)(dptr, bytesize, flags);
    finish(c, r, GS_NS_PTR, r == CUDA_SUCCESS ? *dptr : 0, dev, GPUSLICE_KIND_ALLOC, bytesize);
    return r;
}

static unsigned long long mul_sat(unsigned long long a, unsigned long long b)
{
    unsigned long long p;
    return __builtin_mul_overflow(a, b, &p) ? ULLONG_MAX : p;
}

/* The real pitched allocation, either form: the pointer and the pitch. */
static CUresult call_pitch(int v1, void *dptr, void *pPitch, size_t width, size_t height,
                           unsigned int elem, unsigned long long *ptr, unsigned long long *pitch)
{
    CUresult r = v1 ? REAL(cuMemAllocPitch)(dptr, pPitch, (unsigned int)width,
                                            (unsigned int)height, elem)
                    : REAL(cuMemAllocPitch_v2)(dptr, pPitch, width, height, elem);
    if (r == CUDA_SUCCESS) {
        *ptr = v1 ? *(CUdeviceptr_v1 *)dptr : *(CUdeviceptr *)dptr;
        *pitch = v1 ? *(unsigned int *)pPitch : *(size_t *)pPitch;
    }
    return r;
}

static CUresult alloc_pitch(int v1, void *dptr, void *pPitch, size_t width, size_t height,
                            unsigned int elem)
{
    unsigned long long ptr = 0, pitch = 0;
    if (gs_cfg.disabled)
        return call_pitch(v1, dptr, pPitch, width, height, elem, &ptr, &pitch);
    /* The pitch is only known afterwards: charge an upper bound first (the
     * driver aligns rows to at most 512 bytes), then settle on pitch*height. */
    unsigned long long bound = mul_sat(((unsigned long long)width + 511) & ~511ull, height);
    int dev = -1, c = begin(GPUSLICE_KIND_ALLOC, bound, &dev);
    if (c == GS_DENIED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = call_pitch(v1, dptr, pPitch, width, height, elem, &ptr, &pitch);
    if (c != GS_CHARGED || r != CUDA_SUCCESS) {
        finish(c, r, GS_NS_PTR, 0, dev, GPUSLICE_KIND_ALLOC, bound);
        return r;
    }
    unsigned long long actual = mul_sat(pitch, height);
    if (actual < bound) {
        gs_uncharge(dev, GPUSLICE_KIND_ALLOC, bound - actual);
    } else if (actual > bound &&
               gs_charge_settling(dev, GPUSLICE_KIND_ALLOC, actual - bound) == GS_DENIED) {
        if (v1)
            REAL(cuMemFree)((CUdeviceptr_v1)ptr);
        else
            REAL(cuMemFree_v2)(ptr);
        gs_uncharge(dev, GPUSLICE_KIND_ALLOC, bound);
        gs_mem_op_end();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    finish(c, r, GS_NS_PTR, ptr, dev, GPUSLICE_KIND_ALLOC, actual);
    return r;
}

GS_API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t width,
                                   size_t height, unsigned int elem)
{
    ENTER(cuMemAllocPitch_v2);
    return alloc_pitch(0, dptr, pPitch, width, height, elem);
}

GS_API CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch, unsigned int width,
                                unsigned int height, unsigned int elem)
{
    ENTER(cuMemAllocPitch);
    return alloc_pitch(1, dptr, pPitch, width, height, elem);
}

GS_API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    ENTER(cuMemFree_v2);
    if (gs_cfg.disabled)
        return REAL(cuMemFree_v2)(dptr);
    struct gs_alloc a;
    int found = forget(GS_NS_PTR, dptr, &a);
    CUresult r = REAL(cuMemFree_v2)(dptr);
    forgotten(found, r, GS_NS_PTR, dptr, &a);
    return r;
}

GS_API CUresult cuMemFree(CUdeviceptr_v1 dptr)
{
    ENTER(cuMemFree);
    if (gs_cfg.disabled)
        return REAL(cuMemFree)(dptr);
    struct gs_alloc a;
    int found = forget(GS_NS_PTR, dptr, &a);
    CUresult r = REAL(cuMemFree)(dptr);
    forgotten(found, r, GS_NS_PTR, dptr, &a);
    return r;
}

/* ------------------------------------------------------------------ VMM */

GS_API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                            const CUmemAllocationProp *prop, unsigned long long flags)
{
    ENTER(cuMemCreate);
    if (gs_cfg.disabled)
        return REAL(cuMemCreate)(handle, size, prop, flags);
    int c = GS_UNCAPPED, dev = -1;
    /* The device is named in the request, not taken from the context. Host
     * (and host NUMA) locations are not device memory. */
    if (gs_cfg.fail_closed)
        return CUDA_ERROR_OUT_OF_MEMORY;
    gs_mem_op_begin();
    if (prop && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
        dev = prop->location.id;
        gs_device_note(dev);
        c = gs_charge_settling(dev, GPUSLICE_KIND_VMM, size);
        if (c == GS_DENIED) {
            gs_mem_op_end();
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    CUresult r = REAL(cuMemCreate)(handle, size, prop, flags);
    finish(c, r, GS_NS_VMM, r == CUDA_SUCCESS ? *handle : 0, dev, GPUSLICE_KIND_VMM, size);
    return r;
}

GS_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    /* The driver frees the memory once the handle is released and its last
     * mapping is gone; releasing right after mapping is the usual idiom.
     * A handle released while mapped stays charged (and known by its value:
     * the driver's object lives on with the mapping, so the value cannot be
     * handed out again) until cuMemUnmap takes its last mapping. */
    ENTER(cuMemRelease);
    if (gs_cfg.disabled)
        return REAL(cuMemRelease)(handle);
    struct gs_alloc a;
    int found = forget(GS_NS_VMM, handle, &a);
    CUresult r = REAL(cuMemRelease)(handle);
    if (found && r == CUDA_SUCCESS && a.maps) {
        a.released = 1;
        gs_ptrmap_put(GS_NS_VMM, handle, &a);
        gs_mem_op_end();
        return r;
    }
    forgotten(found, r, GS_NS_VMM, handle, &a);
    return r;
}

GS_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                         CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    /* No memory of its own (the handle's was charged at cuMemCreate): only
     * remembered, so that a released handle stays charged while mapped. */
    ENTER(cuMemMap);
    CUresult r = REAL(cuMemMap)(ptr, size, offset, handle, flags);
    struct gs_alloc a;
    if (r != CUDA_SUCCESS || gs_cfg.disabled || !gs_ptrmap_take(GS_NS_VMM, handle, &a))
        return r;
    a.maps++;
    gs_ptrmap_put(GS_NS_VMM, handle, &a);
    struct gs_alloc m = {.dev = a.dev, .kind = a.kind, .bytes = size, .handle = handle};
    if (gs_ptrmap_put(GS_NS_VMAP, ptr, &m) != 0)
        GS_LOG(GS_LOG_WARN, "out of memory tracking a mapping; its handle stays charged");
    return r;
}

GS_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    ENTER(cuMemUnmap);
    if (gs_cfg.disabled)
        return REAL(cuMemUnmap)(ptr, size);
    gs_mem_op_begin();
    CUresult r = REAL(cuMemUnmap)(ptr, size);
    /* The range may hold several mappings, one after another. */
    for (CUdeviceptr va = ptr; r == CUDA_SUCCESS && va - ptr < size;) {
        struct gs_alloc m, a;
        if (!gs_ptrmap_take(GS_NS_VMAP, va, &m) || !m.bytes)
            break;
        va += m.bytes;
        if (!gs_ptrmap_take(GS_NS_VMM, m.handle, &a))
            continue;
        if (a.maps)
            a.maps--;
        if (a.released && !a.maps)
            gs_uncharge(a.dev, a.kind, a.bytes); /* the driver freed it now */
        else
            gs_ptrmap_put(GS_NS_VMM, m.handle, &a);
    }
    gs_mem_op_end();
    return r;
}

/* ---------------------------------------------------------------- pools */

/* One body for cuMemAllocAsync and cuMemAllocFromPoolAsync (pool NULL: the
 * device's current pool), with or without _ptsz. */
static CUresult alloc_stream_ordered(int fn, CUdeviceptr *dptr, size_t bytes,
                                     CUmemoryPool pool, CUstream s)
{
    int from_pool = fn == GS_FN_cuMemAllocFromPoolAsync ||
                    fn == GS_FN_cuMemAllocFromPoolAsync_ptsz;
    void *real = gs_real[fn];
    if (!real)
        return CUDA_ERROR_NOT_FOUND;
#define CALL_REAL()                                                                           \
    (from_pool ? ((gs_cuMemAllocFromPoolAsync_fn)real)(dptr, bytes, pool, s)                 \
               : ((gs_cuMemAllocAsync_fn)real)(dptr, bytes, s))
    if (gs_cfg.disabled)
        return CALL_REAL();
    if (GS_UNLIKELY(gs_cfg.fail_closed))
        return CUDA_ERROR_OUT_OF_MEMORY;
    /* The current context's device stands for the pool's: pools of another
     * device are rare, and the driver refuses streams of another context. */
    int dev = gs_current_device();
    if (dev < 0 || !gs_limit(dev) ||
        (!pool && (!HAS_REAL(cuDeviceGetMemPool) ||
                   REAL(cuDeviceGetMemPool)(&pool, dev) != CUDA_SUCCESS)))
        return CALL_REAL(); /* no context, uncapped, or no pool to read: the driver decides */
    /* Into a stream being captured it makes a graph's memory alloc node,
     * nothing resident: charged when the graph is instantiated (graphs.c). */
    int capturing = 0;
    int ptsz = fn == GS_FN_cuMemAllocAsync_ptsz || fn == GS_FN_cuMemAllocFromPoolAsync_ptsz;
    CUresult cr = ptsz && HAS_REAL(cuStreamIsCapturing_ptsz)
                      ? REAL(cuStreamIsCapturing_ptsz)(s, &capturing)
                      : HAS_REAL(cuStreamIsCapturing) ? REAL(cuStreamIsCapturing)(s, &capturing)
                                                      : CUDA_ERROR_NOT_FOUND;
    if (cr == CUDA_SUCCESS && capturing)
        return CALL_REAL();
    gs_device_note(dev);
    unsigned long long provisional = 0;
    gs_mem_op_begin();
    if (gs_pool_admit(pool, dev, bytes, &provisional) == GS_DENIED) {
        gs_mem_op_end();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUresult r = CALL_REAL();
#undef CALL_REAL
    gs_pool_settle(pool, dev, provisional);
    gs_mem_op_end();
    if (r == CUDA_SUCCESS) {
        struct gs_alloc a = {.dev = dev, .kind = GPUSLICE_KIND_POOL, .bytes = 0, .pool = pool};
        if (gs_ptrmap_put(GS_NS_PTR, *dptr, &a) != 0)
            GS_LOG(GS_LOG_WARN, "out of memory tracking an allocation; its pool is settled later");
    }
    return r;
}

static CUresult free_async(int fn, CUdeviceptr dptr, CUstream s)
{
    gs_cuMemFreeAsync_fn real = (gs_cuMemFreeAsync_fn)gs_real[fn];
    if (!real)
        return CUDA_ERROR_NOT_FOUND;
    if (gs_cfg.disabled)
        return real(dptr, s);
    struct gs_alloc a;
    int found = forget(GS_NS_PTR, dptr, &a);
    CUresult r = real(dptr, s);
    forgotten(found, r, GS_NS_PTR, dptr, &a);
    return r;
}

GS_API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytes, CUstream s)
{
    gs_cuda_ready();
    return alloc_stream_ordered(GS_FN_cuMemAllocAsync, dptr, bytes, NULL, s);
}

GS_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytes, CUstream s)
{
    gs_cuda_ready();
    return alloc_stream_ordered(GS_FN_cuMemAllocAsync_ptsz, dptr, bytes, NULL, s);
}

GS_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool,
                                        CUstream s)
{
    gs_cuda_ready();
    return alloc_stream_ordered(GS_FN_cuMemAllocFromPoolAsync, dptr, bytes, pool, s);
}

GS_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytes,
                                             CUmemoryPool pool, CUstream s)
{
    gs_cuda_ready();
    return alloc_stream_ordered(GS_FN_cuMemAllocFromPoolAsync_ptsz, dptr, bytes, pool, s);
}

GS_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s)
{
    gs_cuda_ready();
    return free_async(GS_FN_cuMemFreeAsync, dptr, s);
}

GS_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s)
{
    gs_cuda_ready();
    return free_async(GS_FN_cuMemFreeAsync_ptsz, dptr, s);
}

GS_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    gs_cuda_ready();
    if (!HAS_REAL(cuMemPoolTrimTo))
        return CUDA_ERROR_NOT_FOUND;
    gs_mem_op_begin();
    CUresult r = REAL(cuMemPoolTrimTo)(pool, minBytesToKeep);
    if (r == CUDA_SUCCESS && !gs_cfg.disabled)
        gs_pools_settle_all(); /* only pools we charged are settled */
    gs_mem_op_end();
    return r;
}

GS_API CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    gs_cuda_ready();
    if (!HAS_REAL(cuMemPoolDestroy))
        return CUDA_ERROR_NOT_FOUND;
    gs_mem_op_begin();
    CUresult r = REAL(cuMemPoolDestroy)(pool);
    if (r == CUDA_SUCCESS && !gs_cfg.disabled)
        gs_pool_forget(pool);
    gs_mem_op_end();
    return r;
}

/* --------------------------------------------------------------- arrays */

/* Bytes per element; an unknown format is charged as the widest element
 * (16 bytes, e.g. four 32-bit channels' worth) so new formats stay capped. */
static unsigned long long element_size(int format)
{
    switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
        return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
        return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
        return 4;
    default:
        return 16;
    }
}

static unsigned long long dim(size_t v)
{
    return v ? v : 1;
}

static unsigned long long array_bytes(size_t w, size_t h, size_t d, int format,
                                      unsigned channels)
{
    unsigned long long b = mul_sat(dim(w), dim(h));
    b = mul_sat(b, dim(d));
    return mul_sat(b, mul_sat(channels, element_size(format)));
}

static CUresult array_create(CUarray *pHandle, unsigned long long bytes, CUresult (*call)(
                                 CUarray *, const void *), const void *desc)
{
    int dev = -1, c = begin(GPUSLICE_KIND_ARRAY, bytes, &dev);
    if (c == GS_DENIED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = call(pHandle, desc);
    finish(c, r, GS_NS_ARRAY, r == CUDA_SUCCESS ? (uint64_t)(uintptr_t)*pHandle : 0, dev,
           GPUSLICE_KIND_ARRAY, bytes);
    return r;
}

/* One wrapper per exported form (the CUDA 2.0 ones take 32-bit sizes); the
 * call_ helper calls the real one with its own descriptor type. */
#define ARRAY_WRAPPER(fn, desc_t, depth)                                                      \
    static CUresult call_##fn(CUarray *h, const void *desc)                                   \
    {                                                                                         \
        return REAL(fn)(h, desc);                                                             \
    }                                                                                         \
    GS_API CUresult fn(CUarray *pHandle, const desc_t *desc)                                  \
    {                                                                                         \
        ENTER(fn);                                                                            \
        if (gs_cfg.disabled || !desc || !pHandle)                                             \
            return REAL(fn)(pHandle, desc);                                                   \
        unsigned long long bytes = array_bytes(desc->Width, desc->Height, (depth),            \
                                               desc->Format, desc->NumChannels);              \
        return array_create(pHandle, bytes, call_##fn, desc);                                 \
    }

ARRAY_WRAPPER(cuArrayCreate_v2, CUDA_ARRAY_DESCRIPTOR, 1)
ARRAY_WRAPPER(cuArray3DCreate_v2, CUDA_ARRAY3D_DESCRIPTOR, desc->Depth)
ARRAY_WRAPPER(cuArrayCreate, CUDA_ARRAY_DESCRIPTOR_v1, 1)
ARRAY_WRAPPER(cuArray3DCreate, CUDA_ARRAY3D_DESCRIPTOR_v1, desc->Depth)

GS_API CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle,
                                       const CUDA_ARRAY3D_DESCRIPTOR *desc,
                                       unsigned int levels)
{
    ENTER(cuMipmappedArrayCreate);
    if (gs_cfg.disabled || !desc || !pHandle)
        return REAL(cuMipmappedArrayCreate)(pHandle, desc, levels);
    /* Each level halves every dimension that is not already 1 (or absent). */
    unsigned long long bytes = 0;
    size_t w = desc->Width, h = desc->Height, d = desc->Depth;
    for (unsigned l = 0; l < levels && l < 64; l++) {
        unsigned long long lb = array_bytes(w, h, d, desc->Format, desc->NumChannels);
        bytes = bytes + lb < bytes ? ULLONG_MAX : bytes + lb;
        w = w > 1 ? w / 2 : w;
        h = h > 1 ? h / 2 : h;
        d = d > 1 ? d / 2 : d;
    }
    int dev = -1, c = begin(GPUSLICE_KIND_ARRAY, bytes, &dev);
    if (c == GS_DENIED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = REAL(cuMipmappedArrayCreate)(pHandle, desc, levels);
    finish(c, r, GS_NS_MIPMAP, r == CUDA_SUCCESS ? (uint64_t)(uintptr_t)*pHandle : 0, dev,
           GPUSLICE_KIND_ARRAY, bytes);
    return r;
}

GS_API CUresult cuArrayDestroy(CUarray hArray)
{
    ENTER(cuArrayDestroy);
    if (gs_cfg.disabled)
        return REAL(cuArrayDestroy)(hArray);
    struct gs_alloc a;
    uint64_t key = (uint64_t)(uintptr_t)hArray;
    int found = forget(GS_NS_ARRAY, key, &a);
    CUresult r = REAL(cuArrayDestroy)(hArray);
    forgotten(found, r, GS_NS_ARRAY, key, &a);
    return r;
}

GS_API CUresult cuMipmappedArrayDestroy(CUmipmappedArray hArray)
{
    ENTER(cuMipmappedArrayDestroy);
    if (gs_cfg.disabled)
        return REAL(cuMipmappedArrayDestroy)(hArray);
    struct gs_alloc a;
    uint64_t key = (uint64_t)(uintptr_t)hArray;
    int found = forget(GS_NS_MIPMAP, key, &a);
    CUresult r = REAL(cuMipmappedArrayDestroy)(hArray);
    forgotten(found, r, GS_NS_MIPMAP, key, &a);
    return r;
}
