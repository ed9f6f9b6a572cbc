/*
 * cuprog: drives the CUDA driver API the way programs do, for the shim tests.
 *
 *   cuprog VIA OP [ARG...] [OP [ARG...]]...
 *
 * VIA picks how every driver function is found, i.e. which interception path
 * is under test: `direct` (linked with -lcuda), `dlsym` (dlopen + dlsym on
 * the library handle), `gpa` (cuGetProcAddress, CUDA 12.0 ABI), `gpa2`
 * (cuGetProcAddress_v2), `gpa-pt` (cuGetProcAddress with the per-thread
 * stream flag: the _ptsz variants). Each OP prints one line "OP RC [VALUE]".
 */
#define _GNU_SOURCE
#include <gpuslice/cuda_api.h>

#include <dlfcn.h>
#include <stdint.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Direct linking: the names the program would have used. */
#define FUNCS(X)                                                                              \
    X(cuInit, (unsigned))                                                                     \
    X(cuGetProcAddress, (const char *, void **, int, cuuint64_t))                             \
    X(cuGetProcAddress_v2,                                                                    \
      (const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *))             \
    X(cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice))                                      \
    X(cuDevicePrimaryCtxRelease_v2, (CUdevice))                                               \
    X(cuCtxSetCurrent, (CUcontext))                                                           \
    X(cuCtxCreate_v2, (CUcontext *, unsigned, CUdevice))                                      \
    X(cuCtxDestroy_v2, (CUcontext))                                                           \
    X(cuGreenCtxCreate, (CUgreenCtx *, CUdevResourceDesc, CUdevice, unsigned))                \
    X(cuGreenCtxDestroy, (CUgreenCtx))                                                        \
    X(cuCtxSetLimit, (int, size_t))                                                           \
    X(cuMemGetInfo_v2, (size_t *, size_t *))                                                  \
    X(cuDeviceTotalMem_v2, (size_t *, CUdevice))                                              \
    X(cuMemAlloc_v2, (CUdeviceptr *, size_t))                                                 \
    X(cuMemAllocPitch_v2, (CUdeviceptr *, size_t *, size_t, size_t, unsigned))                \
    X(cuMemAllocManaged, (CUdeviceptr *, size_t, unsigned))                                   \
    X(cuMemFree_v2, (CUdeviceptr))                                                            \
    X(cuMemCreate, (CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,      \
                    unsigned long long))                                                      \
    X(cuMemRelease, (CUmemGenericAllocationHandle))                                           \
    X(cuMemAddressReserve, (CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long))  \
    X(cuMemMap, (CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long)) \
    X(cuMemUnmap, (CUdeviceptr, size_t))                                                      \
    X(cuMemAllocAsync, (CUdeviceptr *, size_t, CUstream))                                     \
    X(cuMemAllocFromPoolAsync, (CUdeviceptr *, size_t, CUmemoryPool, CUstream))               \
    X(cuMemFreeAsync, (CUdeviceptr, CUstream))                                                \
    X(cuDeviceGetDefaultMemPool, (CUmemoryPool *, CUdevice))                                  \
    X(cuMemPoolTrimTo, (CUmemoryPool, size_t))                                                \
    X(cuMemPoolSetAttribute, (CUmemoryPool, int, void *))                                     \
    X(cuCtxSynchronize, (void))                                                               \
    X(cuMemPoolCreate, (CUmemoryPool *, const void *))                                        \
    X(cuMemPoolDestroy, (CUmemoryPool))                                                       \
    X(cuArrayCreate_v2, (CUarray *, const CUDA_ARRAY_DESCRIPTOR *))                           \
    X(cuArray3DCreate_v2, (CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *))                       \
    X(cuMipmappedArrayCreate, (CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned)) \
    X(cuArrayDestroy, (CUarray))                                                              \
    X(cuMipmappedArrayDestroy, (CUmipmappedArray))                                            \
    X(cuLaunchKernel, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, \
                       unsigned, CUstream, void **, void **))                                 \
    X(cuLaunchKernelEx, (const CUlaunchConfig_prefix *, CUfunction, void **, void **))        \
    X(cuLaunchCooperativeKernel, (CUfunction, unsigned, unsigned, unsigned, unsigned,         \
                                  unsigned, unsigned, unsigned, CUstream, void **))           \
    X(cuGraphLaunch, (CUgraphExec, CUstream))                                                 \
    X(cuStreamCreate, (CUstream *, unsigned))                                                 \
    X(cuStreamSynchronize, (CUstream))                                                        \
    X(cuStreamQuery, (CUstream))                                                              \
    X(cuEventCreate, (CUevent *, unsigned))                                                   \
    X(cuEventRecord, (CUevent, CUstream))                                                     \
    X(cuEventQuery, (CUevent))                                                                \
    X(cuMemcpyDtoH_v2, (void *, CUdeviceptr, size_t))                                         \
    X(cuMemcpy, (CUdeviceptr, CUdeviceptr, size_t))                                           \
    X(cuStreamBeginCapture_v2, (CUstream, int))                                               \
    X(cuStreamEndCapture, (CUstream, void **))                                                \
    X(cuGraphCreate, (CUgraph *, unsigned))                                                   \
    X(cuGraphDestroy, (CUgraph))                                                              \
    X(cuGraphAddMemAllocNode, (CUgraphNode *, CUgraph, const CUgraphNode *, size_t,           \
                               CUDA_MEM_ALLOC_NODE_PARAMS *))                                 \
    X(cuGraphAddMemFreeNode, (CUgraphNode *, CUgraph, const CUgraphNode *, size_t,            \
                              CUdeviceptr))                                                   \
    X(cuGraphAddChildGraphNode, (CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUgraph)) \
    X(cuGraphInstantiateWithFlags, (CUgraphExec *, CUgraph, unsigned long long))              \
    X(cuGraphInstantiateWithParams, (CUgraphExec *, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS *)) \
    X(cuGraphExecUpdate_v2, (CUgraphExec, CUgraph, void *))                                   \
    X(cuGraphExecDestroy, (CUgraphExec))                                                      \
    X(cuGraphUpload, (CUgraphExec, CUstream))                                                 \
    X(cuDeviceGraphMemTrim, (CUdevice))                                                       \
    X(cuDeviceGetGraphMemAttribute, (CUdevice, int, void *))

#define DECL(name, params) extern CUresult name params;
FUNCS(DECL)
#define FIELD(name, params) CUresult(*name) params;
static struct { FUNCS(FIELD) } api;

/* Base names and the CUDA version that asks for the variant we mean. */
static void *by_gpa(const char *name, int v2, cuuint64_t flags)
{
    char base[128];
    snprintf(base, sizeof base, "%s", name);
    char *suffix = strstr(base, "_v2");
    if (suffix && strcmp(name, "cuGetProcAddress_v2") != 0)
        *suffix = '\0';
    if (strcmp(name, "cuGetProcAddress_v2") == 0)
        base[strlen("cuGetProcAddress")] = '\0';
    void *p = NULL;
    CUdriverProcAddressQueryResult st;
    /* Functions newer than 12.0 (green contexts) with the version that has them. */
    for (int version = 12000; !p && version <= 13000; version += 1000) {
        if (v2)
            cuGetProcAddress_v2(base, &p, version, flags, &st);
        else
            cuGetProcAddress(base, &p, version, flags);
    }
    return p;
}

static void load(const char *via)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    int gpa = strncmp(via, "gpa", 3) == 0, v2 = strcmp(via, "gpa2") == 0;
    cuuint64_t flags = strcmp(via, "gpa-pt") == 0 ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                                                  : 0;
    if (!strcmp(via, "direct")) {
#define DIRECT(name, params) api.name = name;
        FUNCS(DIRECT)
    } else if (!strcmp(via, "dlsym")) {
#define DLSYM(name, params) *(void **)&api.name = dlsym(h, #name);
        FUNCS(DLSYM)
    } else if (gpa) {
        /* cuInit is asked for too: everything through one door. */
#define GPA(name, params) *(void **)&api.name = by_gpa(#name, v2, flags);
        FUNCS(GPA)
    } else {
        fprintf(stderr, "unknown via %s\n", via);
        exit(2);
    }
}

#define MAXP 4096
static long long mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000ll + t.tv_nsec;
}

static CUdeviceptr ptrs[MAXP];
static int nptrs;
static CUmemGenericAllocationHandle vmms[64];
static int nvmm;
static CUdeviceptr vmaps[64];
static size_t vmap_size[64];
static int nvmaps;
static CUarray arrays[64];
static int narrays;
static CUmipmappedArray mips[64];
static int nmips;
static CUcontext ctxs[16];
static CUgreenCtx greens[16];
static CUmodule mods[16];
static int nmods;
static int ngreens;
static CUmemoryPool mypool;
static int nctx;

static unsigned long long size_arg(const char *s)
{
    char *end;
    unsigned long long n = strtoull(s, &end, 10);
    if (*end == 'M' || *end == 'm')
        n <<= 20;
    else if (*end == 'G' || *end == 'g')
        n <<= 30;
    else if (*end == 'K' || *end == 'k')
        n <<= 10;
    return n;
}

static CUresult pctx(int dev)
{
    CUcontext c;
    CUresult r = api.cuDevicePrimaryCtxRetain(&c, dev);
    if (r == CUDA_SUCCESS)
        r = api.cuCtxSetCurrent(c);
    return r;
}

/* threads: N threads make their first CUDA call at once, each takes bytes. */
static pthread_barrier_t barrier;
static unsigned long long thread_bytes;
static int thread_granted, thread_errors;
static pthread_mutex_t thread_mu = PTHREAD_MUTEX_INITIALIZER;

static void *thread_main(void *arg)
{
    (void)arg;
    pthread_barrier_wait(&barrier);
    CUresult r = api.cuInit(0);
    if (r == CUDA_SUCCESS)
        r = pctx(0);
    CUdeviceptr p;
    CUresult a = r == CUDA_SUCCESS ? api.cuMemAlloc_v2(&p, thread_bytes) : r;
    pthread_mutex_lock(&thread_mu);
    if (a == CUDA_SUCCESS)
        thread_granted++;
    else if (a != CUDA_ERROR_OUT_OF_MEMORY)
        thread_errors++;
    pthread_mutex_unlock(&thread_mu);
    return NULL;
}

/* gthreads: N threads each instantiate and launch a graph of one alloc node
 * (and its free), all at once. */
static unsigned long long graph_thread_bytes;
static int graph_granted, graph_refused, graph_errors;

static void *graph_thread_main(void *arg)
{
    (void)arg;
    pthread_barrier_wait(&barrier);
    CUgraph g = NULL;
    CUgraphNode n, f;
    CUgraphExec e = NULL;
    CUDA_MEM_ALLOC_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.poolProps.allocType = 1;
    p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.bytesize = graph_thread_bytes;
    CUresult r = pctx(0);
    if (r == CUDA_SUCCESS)
        r = api.cuGraphCreate(&g, 0);
    if (r == CUDA_SUCCESS)
        r = api.cuGraphAddMemAllocNode(&n, g, NULL, 0, &p);
    if (r == CUDA_SUCCESS)
        r = api.cuGraphAddMemFreeNode(&f, g, &n, 1, p.dptr);
    CUresult i = r == CUDA_SUCCESS ? api.cuGraphInstantiateWithFlags(&e, g, 0) : r;
    if (i == CUDA_SUCCESS)
        i = api.cuGraphLaunch(e, NULL);
    pthread_mutex_lock(&thread_mu);
    if (i == CUDA_SUCCESS)
        graph_granted++;
    else if (i == CUDA_ERROR_OUT_OF_MEMORY)
        graph_refused++;
    else
        graph_errors++;
    pthread_mutex_unlock(&thread_mu);
    return NULL; /* the graphs stay instantiated: their charge with them */
}

/* tlaunch: threads that launch, each into a stream of its own (as an
 * inference server's do). Returns the first failure, or 0. */
static void *launcher_main(void *arg)
{
    int each = (int)(intptr_t)arg;
    CUstream s = NULL;
    CUresult r = pctx(0);
    if (r == CUDA_SUCCESS)
        r = api.cuStreamCreate(&s, 1 /* CU_STREAM_NON_BLOCKING */);
    for (int k = 0; k < each && r == CUDA_SUCCESS; k++)
        r = api.cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL);
    return (void *)(intptr_t)r;
}

static int run_launchers(int n, int each)
{
    pthread_t t[256];
    int failed = 0;
    n = n > 256 ? 256 : n;
    for (int k = 0; k < n; k++)
        pthread_create(&t[k], NULL, launcher_main, (void *)(intptr_t)each);
    for (int k = 0; k < n; k++) {
        void *rc;
        pthread_join(t[k], &rc);
        if (rc && !failed)
            failed = (int)(intptr_t)rc;
    }
    return failed;
}

/* blocked: one thread's launch stays inside the driver (FAKECUDA_LAUNCH_BLOCK)
 * while another thread launches. */
static pthread_mutex_t others_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t others_cv = PTHREAD_COND_INITIALIZER;
static int others_done, others_rc;

static void *others_main(void *arg)
{
    int rc = run_launchers(1, (int)(intptr_t)arg);
    pthread_mutex_lock(&others_mu);
    others_done = 1;
    others_rc = rc;
    pthread_cond_broadcast(&others_cv);
    pthread_mutex_unlock(&others_mu);
    return NULL;
}

/* Graphs: the one being built, and the executable ones (a stack). */
static CUgraph graph;
static CUgraphExec gexecs[64];
static int ngexecs;
static CUdeviceptr last_graph_ptr;
static CUgraphNode last_alloc_node; /* a free node is ordered after it */
static CUstream gstream;

static CUresult graph_ready(void)
{
    return graph ? CUDA_SUCCESS : api.cuGraphCreate(&graph, 0);
}

static CUresult graph_stream(void)
{
    return gstream ? CUDA_SUCCESS : api.cuStreamCreate(&gstream, 0);
}

/* The CUDA 11 instantiation, found the way the program's VIA finds things. */
static CUresult instantiate_legacy(const char *via, CUgraphExec *ph, CUgraph g)
{
    typedef CUresult (*fn_t)(CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t);
    void *p = NULL;
    if (!strncmp(via, "gpa", 3)) /* the linked one: api's may be the _v2 form */
        cuGetProcAddress("cuGraphInstantiate", &p, 11000, 0);
    else if (!strcmp(via, "dlsym"))
        p = dlsym(dlopen("libcuda.so.1", RTLD_NOW), "cuGraphInstantiate_v2");
    else
        p = dlsym(RTLD_DEFAULT, "cuGraphInstantiate_v2");
    return p ? ((fn_t)p)(ph, g, NULL, NULL, 0) : CUDA_ERROR_NOT_FOUND;
}

static CUDA_ARRAY3D_DESCRIPTOR desc3(size_t w, size_t h, size_t d)
{
    CUDA_ARRAY3D_DESCRIPTOR x = {w, h, d, CU_AD_FORMAT_FLOAT, 4, 0};
    return x;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: cuprog VIA OP...\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    load(argv[1]);
    for (int i = 2; i < argc; i++) {
        const char *op = argv[i];
#define ARG() (i + 1 < argc ? argv[++i] : (fprintf(stderr, "%s: missing arg\n", op), exit(2), ""))
        CUresult r = 0;
        if (!strcmp(op, "init")) {
            r = api.cuInit(0);
        } else if (!strcmp(op, "pctx")) {
            r = pctx(atoi(ARG()));
        } else if (!strcmp(op, "pctxrel")) {
            r = api.cuDevicePrimaryCtxRelease_v2(atoi(ARG()));
        } else if (!strcmp(op, "ctx")) {
            r = api.cuCtxCreate_v2(&ctxs[nctx], 0, atoi(ARG()));
            if (r == CUDA_SUCCESS)
                nctx++;
        } else if (!strcmp(op, "green")) {
            /* green DEV: a green context (cuGreenCtxCreate). */
            CUgreenCtx g;
            r = api.cuGreenCtxCreate(&g, NULL, atoi(ARG()), 1 /* CU_GREEN_CTX_DEFAULT_STREAM */);
            if (r == CUDA_SUCCESS)
                greens[ngreens++] = g;
        } else if (!strcmp(op, "greendestroy")) {
            r = ngreens ? api.cuGreenCtxDestroy(greens[--ngreens]) : CUDA_ERROR_INVALID_VALUE;
        } else if (!strcmp(op, "ctx1") || !strcmp(op, "ctx1destroy")) {
            /* The CUDA 2.0 forms, cuCtxCreate and cuCtxDestroy, found by
             * name as an old program's loader would. */
            typedef CUresult (*create_t)(CUcontext *, unsigned, CUdevice);
            typedef CUresult (*destroy_t)(CUcontext);
            void *h = !strcmp(argv[1], "dlsym") ? dlopen("libcuda.so.1", RTLD_NOW) : RTLD_DEFAULT;
            void *fn = dlsym(h, !strcmp(op, "ctx1") ? "cuCtxCreate" : "cuCtxDestroy");
            int dev = !strcmp(op, "ctx1") ? atoi(ARG()) : 0;
            if (!fn)
                r = CUDA_ERROR_NOT_FOUND;
            else if (!strcmp(op, "ctx1"))
                r = ((create_t)fn)(&ctxs[nctx], 0, dev);
            else
                r = nctx ? ((destroy_t)fn)(ctxs[--nctx]) : CUDA_ERROR_INVALID_VALUE;
            if (r == CUDA_SUCCESS && !strcmp(op, "ctx1"))
                nctx++;
        } else if (!strcmp(op, "glctx") || !strcmp(op, "vdpauctx")) {
            /* glctx|vdpauctx DEV: an interop context, found by name. */
            void *h = !strcmp(argv[1], "dlsym") ? dlopen("libcuda.so.1", RTLD_NOW) : RTLD_DEFAULT;
            int dev = atoi(ARG());
            void *fn = dlsym(h, !strcmp(op, "glctx") ? "cuGLCtxCreate_v2" : "cuVDPAUCtxCreate_v2");
            if (!fn)
                r = CUDA_ERROR_NOT_FOUND;
            else if (!strcmp(op, "glctx"))
                r = ((CUresult (*)(CUcontext *, unsigned, CUdevice))fn)(&ctxs[nctx], 0, dev);
            else
                r = ((CUresult (*)(CUcontext *, unsigned, CUdevice, unsigned, void *))fn)(
                    &ctxs[nctx], 0, dev, 0, NULL);
            if (r == CUDA_SUCCESS)
                nctx++;
        } else if (!strcmp(op, "module") || !strcmp(op, "library") ||
                   !strcmp(op, "modunload")) {
            /* module|library IMAGE: cuModuleLoadData / cuLibraryLoadData of
             * IMAGE's text (the fake's "globals=N", or PTX on a real card),
             * found by name; modunload: the last module. */
            void *h = !strcmp(argv[1], "dlsym") ? dlopen("libcuda.so.1", RTLD_NOW) : RTLD_DEFAULT;
            if (!strcmp(op, "modunload")) {
                void *fn = dlsym(h, "cuModuleUnload");
                r = fn && nmods ? ((CUresult (*)(CUmodule))fn)(mods[--nmods])
                                : CUDA_ERROR_INVALID_VALUE;
            } else {
                const char *image = ARG();
                if (!strcmp(op, "module")) {
                    void *fn = dlsym(h, "cuModuleLoadData");
                    r = fn ? ((CUresult (*)(CUmodule *, const void *))fn)(&mods[nmods], image)
                           : CUDA_ERROR_NOT_FOUND;
                    if (r == CUDA_SUCCESS)
                        nmods++;
                } else {
                    CUlibrary lib;
                    void *fn = dlsym(h, "cuLibraryLoadData");
                    r = fn ? ((CUresult (*)(CUlibrary *, const void *, int *, void **, unsigned,
                                            int *, void **, unsigned))fn)(&lib, image, NULL, NULL,
                                                                          0, NULL, NULL, 0)
                           : CUDA_ERROR_NOT_FOUND;
                }
            }
        } else if (!strcmp(op, "hostalloc")) {
            /* hostalloc SIZE: pinned host memory mapped into the card's
             * address space (cuMemHostAlloc, DEVICEMAP), found by name. */
            void *h = !strcmp(argv[1], "dlsym") ? dlopen("libcuda.so.1", RTLD_NOW) : RTLD_DEFAULT;
            void *fn = dlsym(h, "cuMemHostAlloc"), *p = NULL;
            size_t n = size_arg(ARG());
            r = fn ? ((CUresult (*)(void **, size_t, unsigned))fn)(&p, n, 2) : CUDA_ERROR_NOT_FOUND;
        } else if (!strcmp(op, "limit")) {
            /* limit stack|printf|heap BYTES: cuCtxSetLimit. */
            const char *which = ARG();
            int l = !strcmp(which, "stack") ? 0 : !strcmp(which, "printf") ? 1 : 2;
            r = api.cuCtxSetLimit(l, size_arg(ARG()));
        } else if (!strcmp(op, "ctxdestroy")) {
            r = nctx ? api.cuCtxDestroy_v2(ctxs[--nctx]) : CUDA_ERROR_INVALID_VALUE;
        } else if (!strcmp(op, "alloc")) {
            r = api.cuMemAlloc_v2(&ptrs[nptrs], size_arg(ARG()));
            if (r == CUDA_SUCCESS)
                nptrs++;
        } else if (!strcmp(op, "managed")) {
            r = api.cuMemAllocManaged(&ptrs[nptrs], size_arg(ARG()), 1);
            if (r == CUDA_SUCCESS)
                nptrs++;
        } else if (!strcmp(op, "async") || !strcmp(op, "pool")) {
            unsigned long long n = size_arg(ARG());
            if (!strcmp(op, "async")) {
                r = api.cuMemAllocAsync(&ptrs[nptrs], n, NULL);
            } else {
                CUmemoryPool pool;
                r = api.cuDeviceGetDefaultMemPool(&pool, 0);
                if (r == CUDA_SUCCESS)
                    r = api.cuMemAllocFromPoolAsync(&ptrs[nptrs], n, pool, NULL);
            }
            if (r == CUDA_SUCCESS)
                nptrs++;
        } else if (!strcmp(op, "mkpool")) {
            /* CUmemPoolProps: allocType, handleTypes, location, then fields
             * left zero; the padding covers the real struct's size. */
            struct {
                int allocType, handleTypes;
                CUmemLocation location;
                unsigned char rest[128];
            } props = {1 /* pinned */, 0, {CU_MEM_LOCATION_TYPE_DEVICE, 0}, {0}};
            r = api.cuMemPoolCreate(&mypool, &props);
        } else if (!strcmp(op, "rmpool")) {
            r = api.cuMemPoolDestroy(mypool);
        } else if (!strcmp(op, "async-on")) {
            size_t n = size_arg(ARG());
            r = api.cuMemAllocFromPoolAsync(&ptrs[nptrs], n, mypool, NULL);
            if (r == CUDA_SUCCESS)
                nptrs++;
        } else if (!strcmp(op, "sync")) {
            r = api.cuCtxSynchronize();
        } else if (!strcmp(op, "trim") || !strcmp(op, "keepall")) {
            /* trim N: cuMemPoolTrimTo(default pool, N); keepall: release
             * threshold = max, so the pool keeps whatever it frees. */
            CUmemoryPool pool;
            r = api.cuDeviceGetDefaultMemPool(&pool, 0);
            if (r == CUDA_SUCCESS && !strcmp(op, "trim")) {
                r = api.cuMemPoolTrimTo(pool, size_arg(ARG()));
            } else if (r == CUDA_SUCCESS) {
                cuuint64_t all = ~0ull;
                r = api.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &all);
            }
        } else if (!strcmp(op, "asyncfree")) {
            r = nptrs ? api.cuMemFreeAsync(ptrs[--nptrs], NULL) : CUDA_ERROR_INVALID_VALUE;
        } else if (!strcmp(op, "free")) {
            r = nptrs ? api.cuMemFree_v2(ptrs[--nptrs]) : CUDA_ERROR_INVALID_VALUE;
        } else if (!strcmp(op, "freeall")) {
            while (nptrs && r == CUDA_SUCCESS)
                r = api.cuMemFree_v2(ptrs[--nptrs]);
        } else if (!strcmp(op, "fill")) {
            unsigned long long chunk = size_arg(ARG()), granted = 0;
            while (nptrs < MAXP && (r = api.cuMemAlloc_v2(&ptrs[nptrs], chunk)) == CUDA_SUCCESS) {
                nptrs++;
                granted += chunk;
            }
            printf("fill %d %llu\n", r, granted);
            continue;
        } else if (!strcmp(op, "pitch")) {
            size_t w = size_arg(ARG()), h = size_arg(ARG()), pitch = 0;
            r = api.cuMemAllocPitch_v2(&ptrs[nptrs], &pitch, w, h, 4);
            if (r == CUDA_SUCCESS)
                nptrs++;
            printf("pitch %d %zu\n", r, pitch);
            continue;
        } else if (!strcmp(op, "info")) {
            size_t f = 0, t = 0;
            r = api.cuMemGetInfo_v2(&f, &t);
            printf("info %d %zu %zu\n", r, f, t);
            continue;
        } else if (!strcmp(op, "total")) {
            size_t t = 0;
            r = api.cuDeviceTotalMem_v2(&t, atoi(ARG()));
            printf("total %d %zu\n", r, t);
            continue;
        } else if (!strcmp(op, "vmm")) {
            int dev = atoi(ARG());
            CUmemAllocationProp prop;
            memset(&prop, 0, sizeof prop);
            prop.type = 1; /* pinned */
            prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
            prop.location.id = dev;
            r = api.cuMemCreate(&vmms[nvmm], size_arg(ARG()), &prop, 0);
            if (r == CUDA_SUCCESS)
                nvmm++;
        } else if (!strcmp(op, "vmmmap")) {
            /* vmmmap SIZE: the last handle mapped at a new address. */
            size_t n = size_arg(ARG());
            r = nvmm ? api.cuMemAddressReserve(&vmaps[nvmaps], n, 0, 0, 0)
                     : CUDA_ERROR_INVALID_VALUE;
            if (r == CUDA_SUCCESS)
                r = api.cuMemMap(vmaps[nvmaps], n, 0, vmms[nvmm - 1], 0);
            if (r == CUDA_SUCCESS)
                vmap_size[nvmaps++] = n;
        } else if (!strcmp(op, "vmmunmap")) {
            r = nvmaps ? api.cuMemUnmap(vmaps[nvmaps - 1], vmap_size[nvmaps - 1])
                       : CUDA_ERROR_INVALID_VALUE;
            if (r == CUDA_SUCCESS)
                nvmaps--;
        } else if (!strcmp(op, "vmmforget")) {
            /* The last handle released but kept mapped: the VMM idiom. */
            r = nvmm ? api.cuMemRelease(vmms[--nvmm]) : CUDA_ERROR_INVALID_VALUE;
        } else if (!strcmp(op, "vmmrel")) {
            r = nvmm ? api.cuMemRelease(vmms[--nvmm]) : CUDA_ERROR_INVALID_VALUE;
        } else if (!strcmp(op, "array")) {
            /* float4 elements: 16 bytes each */
            CUDA_ARRAY_DESCRIPTOR d = {size_arg(ARG()), size_arg(ARG()), CU_AD_FORMAT_FLOAT, 4};
            r = api.cuArrayCreate_v2(&arrays[narrays], &d);
            if (r == CUDA_SUCCESS)
                narrays++;
        } else if (!strcmp(op, "array3d")) {
            size_t w = size_arg(ARG()), h = size_arg(ARG()), dd = size_arg(ARG());
            CUDA_ARRAY3D_DESCRIPTOR d = desc3(w, h, dd);
            r = api.cuArray3DCreate_v2(&arrays[narrays], &d);
            if (r == CUDA_SUCCESS)
                narrays++;
        } else if (!strcmp(op, "array1") || !strcmp(op, "array3d1") || !strcmp(op, "pitch1")) {
            /* The CUDA 2.0 forms, found by name as an old program's loader would. */
            void *h = !strcmp(argv[1], "dlsym") ? dlopen("libcuda.so.1", RTLD_NOW) : RTLD_DEFAULT;
            unsigned w = (unsigned)size_arg(ARG()), hh = (unsigned)size_arg(ARG());
            if (!strcmp(op, "array1")) {
                CUDA_ARRAY_DESCRIPTOR_v1 d = {w, hh, CU_AD_FORMAT_FLOAT, 4};
                CUresult (*fn)(CUarray *, const CUDA_ARRAY_DESCRIPTOR_v1 *) =
                    (CUresult (*)(CUarray *, const CUDA_ARRAY_DESCRIPTOR_v1 *))dlsym(h, "cuArrayCreate");
                r = fn ? fn(&arrays[narrays], &d) : CUDA_ERROR_NOT_FOUND;
            } else if (!strcmp(op, "array3d1")) {
                CUDA_ARRAY3D_DESCRIPTOR_v1 d = {w, hh, (unsigned)size_arg(ARG()),
                                                CU_AD_FORMAT_FLOAT, 4, 0};
                CUresult (*fn)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR_v1 *) =
                    (CUresult (*)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR_v1 *))dlsym(
                        h, "cuArray3DCreate");
                r = fn ? fn(&arrays[narrays], &d) : CUDA_ERROR_NOT_FOUND;
            } else {
                CUdeviceptr_v1 p32 = 0;
                unsigned pitch32 = 0;
                CUresult (*fn)(CUdeviceptr_v1 *, unsigned *, unsigned, unsigned, unsigned) =
                    (CUresult (*)(CUdeviceptr_v1 *, unsigned *, unsigned, unsigned, unsigned))dlsym(
                        h, "cuMemAllocPitch");
                r = fn ? fn(&p32, &pitch32, w, hh, 4) : CUDA_ERROR_NOT_FOUND;
            }
            if (r == CUDA_SUCCESS && strcmp(op, "pitch1") != 0)
                narrays++;
        } else if (!strcmp(op, "arrdestroy")) {
            r = narrays ? api.cuArrayDestroy(arrays[--narrays]) : CUDA_ERROR_INVALID_VALUE;
        } else if (!strcmp(op, "mipmap")) {
            size_t w = size_arg(ARG()), h = size_arg(ARG());
            unsigned levels = (unsigned)atoi(ARG());
            CUDA_ARRAY3D_DESCRIPTOR d = desc3(w, h, 0);
            r = api.cuMipmappedArrayCreate(&mips[nmips], &d, levels);
            if (r == CUDA_SUCCESS)
                nmips++;
        } else if (!strcmp(op, "mipdestroy")) {
            r = nmips ? api.cuMipmappedArrayDestroy(mips[--nmips]) : CUDA_ERROR_INVALID_VALUE;
        } else if (!strcmp(op, "gpaself")) {
            /* cuGetProcAddress asked for itself must hand out the shim's. */
            void *p = NULL;
            r = api.cuGetProcAddress("cuGetProcAddress", &p, 12000, 0);
            void *ours = dlsym(RTLD_DEFAULT, "cuGetProcAddress_v2");
            printf("gpaself %d %d\n", r, p == ours);
            continue;
        } else if (!strcmp(op, "hold")) {
            printf("held\n");
            char buf[64];
            while (fread(buf, 1, sizeof buf, stdin) > 0) {
            }
            continue;
        } else if (!strcmp(op, "usleep")) {
            /* usleep US: the host does nothing for US microseconds. */
            long us = atol(ARG());
            struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
            nanosleep(&ts, NULL);
            continue;
        } else if (!strcmp(op, "waitfile")) {
            const char *path = ARG();
            struct stat st;
            while (stat(path, &st) != 0) {
                struct timespec ts = {0, 1000000};
                nanosleep(&ts, NULL);
            }
            continue;
        } else if (!strcmp(op, "gthreads")) {
            /* gthreads N SIZE: prints errors, granted, refused. */
            int n = atoi(ARG());
            graph_thread_bytes = size_arg(ARG());
            pthread_t t[256];
            n = n > 256 ? 256 : n;
            pthread_barrier_init(&barrier, NULL, (unsigned)n);
            for (int k = 0; k < n; k++)
                pthread_create(&t[k], NULL, graph_thread_main, NULL);
            for (int k = 0; k < n; k++)
                pthread_join(t[k], NULL);
            printf("gthreads %d %d %d\n", graph_errors, graph_granted, graph_refused);
            continue;
        } else if (!strcmp(op, "threads")) {
            int n = atoi(ARG());
            thread_bytes = size_arg(ARG());
            pthread_t t[256];
            pthread_barrier_init(&barrier, NULL, (unsigned)n);
            for (int k = 0; k < n; k++)
                pthread_create(&t[k], NULL, thread_main, NULL);
            for (int k = 0; k < n; k++)
                pthread_join(t[k], NULL);
            printf("threads %d %d\n", thread_errors, thread_granted);
            continue;
        } else if (!strcmp(op, "launch")) {
            /* launch KIND N: N launches of one kind on the default stream. */
            const char *kind = ARG();
            int n = atoi(ARG());
            CUlaunchConfig_prefix cfg = {1, 1, 1, 1, 1, 1, 0, NULL};
            for (int k = 0; k < n && r == CUDA_SUCCESS; k++) {
                if (!strcmp(kind, "kernel"))
                    r = api.cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
                else if (!strcmp(kind, "ex"))
                    r = api.cuLaunchKernelEx(&cfg, NULL, NULL, NULL);
                else if (!strcmp(kind, "coop"))
                    r = api.cuLaunchCooperativeKernel(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL);
                else if (!strcmp(kind, "graph"))
                    r = api.cuGraphLaunch(NULL, NULL);
                else {
                    fprintf(stderr, "unknown launch kind %s\n", kind);
                    return 2;
                }
            }
        } else if (!strcmp(op, "launchfor")) {
            /* launchfor MS: kernel launches on the default stream for MS
             * milliseconds (past a new process's first service, say). */
            long long until = mono_ns() + atoll(ARG()) * 1000000ll;
            do {
                for (int k = 0; k < 100 && r == CUDA_SUCCESS; k++)
                    r = api.cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
            } while (r == CUDA_SUCCESS && mono_ns() < until);
        } else if (!strcmp(op, "launchtimed")) {
            /* launchtimed N: N kernel launches on the default stream, and
             * the time they took on the host: "launchtimed RC NS". */
            int n = atoi(ARG());
            long long t0 = mono_ns();
            for (int k = 0; k < n && r == CUDA_SUCCESS; k++)
                r = api.cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
            printf("%s %d %lld\n", op, r, mono_ns() - t0);
            continue;
        } else if (!strcmp(op, "tlaunch")) {
            /* tlaunch T N: T threads, each N launches into a stream of its own. */
            int n = atoi(ARG());
            r = run_launchers(n, atoi(ARG()));
        } else if (!strcmp(op, "blocked")) {
            /* blocked N: a new thread's launch is held inside the driver
             * (FAKECUDA_LAUNCH_BLOCK=PATH: the process's first launch, or
             * its FAKECUDA_LAUNCH_BLOCK_AT-th); meanwhile another thread,
             * started as soon as that launch is inside, makes N launches. Prints whether those returned while the first was
             * still held (given 30 s: a deadlock, not a slow machine, keeps
             * them), then lets it go. */
            const char *path = getenv("FAKECUDA_LAUNCH_BLOCK");
            if (!path) {
                fprintf(stderr, "blocked: FAKECUDA_LAUNCH_BLOCK is not set\n");
                return 2;
            }
            char inside[4096];
            snprintf(inside, sizeof inside, "%s.inside", path);
            pthread_t held, others;
            pthread_create(&held, NULL, launcher_main, (void *)(intptr_t)1);
            struct stat st;
            while (stat(inside, &st) != 0) {
                struct timespec ts = {0, 20000};
                nanosleep(&ts, NULL);
            }
            int n = atoi(ARG());
            pthread_create(&others, NULL, others_main, (void *)(intptr_t)n);
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += 30;
            pthread_mutex_lock(&others_mu);
            while (!others_done &&
                   pthread_cond_timedwait(&others_cv, &others_mu, &until) == 0) {
            }
            int returned = others_done;
            pthread_mutex_unlock(&others_mu);
            FILE *f = fopen(path, "w");
            if (f)
                fclose(f);
            void *rc;
            pthread_join(held, &rc);
            pthread_join(others, NULL);
            printf("blocked %d %d %d\n", (int)(intptr_t)rc, others_rc, returned);
            continue;
        } else if (!strcmp(op, "waits")) {
            /* waits: the stream waits (gates) the fake driver has queued. */
            unsigned long long (*waits)(void) =
                (unsigned long long (*)(void))dlsym(RTLD_DEFAULT, "fakecuda_wait_count");
            printf("waits 0 %llu\n", waits ? waits() : 0ull);
            continue;
        } else if (!strcmp(op, "capture")) {
            /* capture N: N launches captured into a graph on a new stream;
             * prints the end-of-capture code and the launches the driver
             * saw captured. */
            int n = atoi(ARG());
            CUstream s = NULL;
            void *graph = NULL;
            r = api.cuStreamCreate(&s, 0);
            if (r == CUDA_SUCCESS)
                r = api.cuStreamBeginCapture_v2(s, 0);
            for (int k = 0; k < n && r == CUDA_SUCCESS; k++)
                r = api.cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL);
            if (r == CUDA_SUCCESS)
                r = api.cuStreamEndCapture(s, &graph);
            unsigned long long (*captured)(void) =
                (unsigned long long (*)(void))dlsym(RTLD_DEFAULT, "fakecuda_captured_count");
            printf("capture %d %llu\n", r, captured ? captured() : 0ull);
            continue;
        } else if (!strcmp(op, "gnode")) {
            /* gnode DEV SIZE: a memory alloc node in the graph being built. */
            CUDA_MEM_ALLOC_NODE_PARAMS p;
            memset(&p, 0, sizeof p);
            p.poolProps.allocType = 1; /* pinned */
            p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
            p.poolProps.location.id = atoi(ARG());
            p.bytesize = size_arg(ARG());
            CUgraphNode n;
            r = graph_ready();
            if (r == CUDA_SUCCESS)
                r = api.cuGraphAddMemAllocNode(&n, graph, NULL, 0, &p);
            if (r == CUDA_SUCCESS) {
                last_graph_ptr = p.dptr;
                last_alloc_node = n;
            }
        } else if (!strcmp(op, "gfree")) {
            /* gfree: a free node for the last alloc node's memory. */
            CUgraphNode n;
            r = graph_ready();
            if (r == CUDA_SUCCESS)
                r = api.cuGraphAddMemFreeNode(&n, graph, last_alloc_node ? &last_alloc_node : NULL,
                                              last_alloc_node ? 1 : 0, last_graph_ptr);
        } else if (!strcmp(op, "gchild")) {
            /* gchild: the graph being built becomes a child of a new one. */
            CUgraph parent = NULL;
            CUgraphNode n;
            r = graph_ready();
            if (r == CUDA_SUCCESS)
                r = api.cuGraphCreate(&parent, 0);
            if (r == CUDA_SUCCESS)
                r = api.cuGraphAddChildGraphNode(&n, parent, NULL, 0, graph);
            if (r == CUDA_SUCCESS) {
                api.cuGraphDestroy(graph);
                graph = parent;
            }
        } else if (!strcmp(op, "gcapture")) {
            /* gcapture SIZE KEEP: cuMemAllocAsync of SIZE captured on a new
             * stream (KEEP 0: freed in the graph too); the result is the
             * graph being built. */
            unsigned long long n = size_arg(ARG());
            int keep = atoi(ARG());
            CUstream cs = NULL;
            CUdeviceptr p = 0;
            r = api.cuStreamCreate(&cs, 0);
            if (r == CUDA_SUCCESS)
                r = api.cuStreamBeginCapture_v2(cs, 0);
            if (r == CUDA_SUCCESS)
                r = api.cuMemAllocAsync(&p, n, cs);
            if (r == CUDA_SUCCESS && !keep)
                r = api.cuMemFreeAsync(p, cs);
            if (r == CUDA_SUCCESS)
                r = api.cuStreamEndCapture(cs, (void **)&graph);
        } else if (!strcmp(op, "gnew")) {
            r = graph ? api.cuGraphDestroy(graph) : CUDA_SUCCESS;
            graph = NULL;
            last_alloc_node = NULL;
        } else if (!strcmp(op, "ginst") || !strcmp(op, "ginst-params") ||
                   !strcmp(op, "ginst-upload") || !strcmp(op, "ginst-legacy")) {
            /* The graph being built, instantiated by one of the entry points. */
            CUgraphExec e = NULL;
            CUDA_GRAPH_INSTANTIATE_PARAMS ip;
            memset(&ip, 0, sizeof ip);
            r = graph_ready();
            if (r == CUDA_SUCCESS && !strcmp(op, "ginst")) {
                r = api.cuGraphInstantiateWithFlags(&e, graph, 0);
            } else if (r == CUDA_SUCCESS && !strcmp(op, "ginst-legacy")) {
                r = instantiate_legacy(argv[1], &e, graph);
            } else if (r == CUDA_SUCCESS) {
                if (!strcmp(op, "ginst-upload")) {
                    r = graph_stream();
                    ip.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
                    ip.hUploadStream = gstream;
                }
                if (r == CUDA_SUCCESS)
                    r = api.cuGraphInstantiateWithParams(&e, graph, &ip);
            }
            if (r == CUDA_SUCCESS)
                gexecs[ngexecs++] = e;
        } else if (!strcmp(op, "gupdate")) {
            r = ngexecs ? api.cuGraphExecUpdate_v2(gexecs[ngexecs - 1], graph, NULL)
                        : CUDA_ERROR_INVALID_VALUE;
        } else if (!strcmp(op, "glaunch")) {
            r = ngexecs ? api.cuGraphLaunch(gexecs[ngexecs - 1], NULL) : CUDA_ERROR_INVALID_VALUE;
        } else if (!strcmp(op, "gupload")) {
            r = graph_stream();
            if (r == CUDA_SUCCESS)
                r = ngexecs ? api.cuGraphUpload(gexecs[ngexecs - 1], gstream)
                            : CUDA_ERROR_INVALID_VALUE;
        } else if (!strcmp(op, "gexecdestroy")) {
            r = ngexecs ? api.cuGraphExecDestroy(gexecs[--ngexecs]) : CUDA_ERROR_INVALID_VALUE;
        } else if (!strcmp(op, "gtrim")) {
            r = api.cuDeviceGraphMemTrim(atoi(ARG()));
        } else if (!strcmp(op, "greserved")) {
            /* greserved DEV: the device's graph memory, as the driver says. */
            cuuint64_t v = 0;
            r = api.cuDeviceGetGraphMemAttribute(atoi(ARG()),
                                                 CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &v);
            printf("greserved %d %llu\n", r, (unsigned long long)v);
            continue;
        } else if (!strcmp(op, "resident")) {
            /* resident DEV: what the fake driver holds on the card. */
            int (*used)(int, unsigned long long *) =
                (int (*)(int, unsigned long long *))dlsym(RTLD_DEFAULT, "fakecuda_used_bytes");
            unsigned long long v = 0;
            int rc = used ? used(atoi(ARG()), &v) : -1;
            printf("resident %d %llu\n", rc, v);
            continue;
        } else if (!strcmp(op, "nvprocs")) {
            /* nvprocs DEV: NVML's compute processes on DEV, as a program sees
             * them (dlopen + dlsym, as pynvml does): "nvprocs RC N pid:bytes..." */
            void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
            int dev = atoi(ARG());
            nvmlReturn_t (*init)(void) = h ? (nvmlReturn_t (*)(void))dlsym(h, "nvmlInit_v2") : NULL;
            nvmlReturn_t (*by_index)(unsigned, nvmlDevice_t *) =
                h ? (nvmlReturn_t (*)(unsigned, nvmlDevice_t *))dlsym(h, "nvmlDeviceGetHandleByIndex_v2")
                  : NULL;
            nvmlReturn_t (*procs)(nvmlDevice_t, unsigned *, nvmlProcessInfo_t *) =
                h ? (nvmlReturn_t (*)(nvmlDevice_t, unsigned *, nvmlProcessInfo_t *))dlsym(
                        h, "nvmlDeviceGetComputeRunningProcesses_v3")
                  : NULL;
            nvmlProcessInfo_t list[64];
            unsigned n = 64;
            nvmlDevice_t d;
            nvmlReturn_t rc = !init || !by_index || !procs ? NVML_ERROR_LIBRARY_NOT_FOUND : init();
            if (rc == NVML_SUCCESS)
                rc = by_index((unsigned)dev, &d);
            if (rc == NVML_SUCCESS)
                rc = procs(d, &n, list);
            printf("nvprocs %d %u", rc, rc == NVML_SUCCESS ? n : 0);
            for (unsigned k = 0; rc == NVML_SUCCESS && k < n; k++)
                printf(" %u:%llu", list[k].pid, list[k].usedGpuMemory);
            printf("\n");
            continue;
        } else if (!strcmp(op, "launchfrom") || !strcmp(op, "syncfrom") ||
                   !strcmp(op, "pollfrom") || !strcmp(op, "copyfrom")) {
            /* Which object the launch (stream sync, stream query, blocking
             * copy) function we were given lives in. */
            void *fn = !strcmp(op, "launchfrom") ? (void *)api.cuLaunchKernel
                       : !strcmp(op, "syncfrom") ? (void *)api.cuStreamSynchronize
                       : !strcmp(op, "pollfrom") ? (void *)api.cuStreamQuery
                                                 : (void *)api.cuMemcpyDtoH_v2;
            Dl_info info;
            const char *where = "none";
            if (fn && dladdr(fn, &info) && info.dli_fname)
                where = strstr(info.dli_fname, "libgpuslice") ? "shim" : "driver";
            printf("%s %s\n", op, where);
            continue;
        } else if (!strcmp(op, "ssync")) {
            r = api.cuStreamSynchronize(NULL);
        } else if (!strcmp(op, "poll") || !strcmp(op, "epoll") || !strcmp(op, "lazypoll")) {
            /* poll / epoll: ask the default stream (an event recorded on
             * it) until its work is done; prints how often it was not.
             * lazypoll: the stream, sleeping 5 ms between looks. */
            CUevent e = NULL;
            r = !strcmp(op, "epoll") ? api.cuEventCreate(&e, 0) : CUDA_SUCCESS;
            if (r == CUDA_SUCCESS && e)
                r = api.cuEventRecord(e, NULL);
            unsigned long busy = 0;
            while (r == CUDA_SUCCESS &&
                   (r = e ? api.cuEventQuery(e) : api.cuStreamQuery(NULL)) == CUDA_ERROR_NOT_READY) {
                busy++;
                r = CUDA_SUCCESS;
                if (!strcmp(op, "lazypoll")) {
                    struct timespec ts = {0, 5000000};
                    nanosleep(&ts, NULL);
                }
            }
            printf("%s %d %lu\n", op, r, busy);
            continue;
        } else if (!strcmp(op, "dtoh") || !strcmp(op, "copy")) {
            /* dtoh / copy: a blocking copy of 64 bytes to the host. */
            unsigned char buf[64];
            r = !strcmp(op, "dtoh") ? api.cuMemcpyDtoH_v2(buf, 0, sizeof buf)
                                    : api.cuMemcpy((CUdeviceptr)(uintptr_t)buf, 0, sizeof buf);
        } else if (!strcmp(op, "fork")) {
            unsigned long long n = size_arg(ARG());
            pid_t pid = fork();
            if (pid == 0) {
                CUdeviceptr p;
                CUresult c = pctx(0);
                if (c == CUDA_SUCCESS)
                    c = api.cuMemAlloc_v2(&p, n);
                _exit(c);
            }
            int status = 0;
            waitpid(pid, &status, 0);
            printf("fork %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128);
            continue;
        } else {
            fprintf(stderr, "unknown op %s\n", op);
            return 2;
        }
        printf("%s %d\n", op, r);
    }
    return 0;
}
