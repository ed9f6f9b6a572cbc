/*
 * fake_cuda.c: a fake libcuda.so.1 for tests on machines without a GPU.
 *
 * It serves the cards of the fakegpus JSON (see fakegpus.h) through the CUDA
 * driver API's C ABI, so that the preloaded shim libgpuslice.so can be tested
 * through the same paths as with the real driver: direct linking, dlopen +
 * dlsym, and cuGetProcAddress.
 *
 * The model (all state lives in this process, in host memory):
 *  - Devices: ordinal i is gpus[i] of the JSON, filtered and renumbered by
 *    CUDA_VISIBLE_DEVICES as the real driver does. Each has memory_mib MiB.
 *  - Every allocation is an entry in a table (hash on its key: the fake
 *    device address, or the handle value for arrays and VMM handles). Fake
 *    device addresses are 2 MiB aligned, never overlap, and come from one
 *    1 TiB window per device (VA_BASE + (ordinal << 40)); VMM address
 *    reservations come from the window after the last possible device.
 *    Nothing is ever mapped there: the addresses must not be dereferenced.
 *  - Per device, `used` bytes; anything that would take it past the card's
 *    memory fails with CUDA_ERROR_OUT_OF_MEMORY.
 *  - A context costs its device context_mib MiB (per-gpu JSON key, default
 *    FAKECUDA_CONTEXT_MIB): each cuCtxCreate, and the primary context while
 *    its retain count is above zero. Destroying a context (or releasing the
 *    primary one to zero) frees its memory and every cuMemAlloc*, array and
 *    stream made in it, as the real driver does. VMM handles and pool memory
 *    belong to the process and survive.
 *  - Memory pools keep freed memory reserved. At a synchronisation
 *    (cuStreamSynchronize, cuCtxSynchronize) a pool gives back what it holds
 *    above max(used, release threshold); cuMemPoolTrimTo gives back what it
 *    holds above max(used, minBytesToKeep). Reservations grow in 2 MiB steps.
 *  - VMM: cuMemCreate charges at once; a handle stays charged until it is
 *    released and no mapping uses it any more.
 *  - A simulated GPU timeline: every launch (kernel, cooperative, Ex, graph)
 *    keeps its stream busy for FAKECUDA_KERNEL_NS nanoseconds (read at cuInit;
 *    default 0). Each stream has done_ns, the CLOCK_MONOTONIC time its last
 *    queued work completes; a launch sets it to max(now, done_ns) + duration.
 *    Streams run independently of each other; handles 0, CU_STREAM_LEGACY and
 *    CU_STREAM_PER_THREAD all share one default timeline per context.
 *    cuStreamSynchronize sleeps until the stream's done_ns, cuCtxSynchronize
 *    until everything queued in the context (destroyed streams included) is.
 *  - Events belong to the context current at cuEventCreate and die with it.
 *    cuEventRecord stamps one with max(now, the stream's done_ns); it is
 *    complete once the clock passes the stamp (never-recorded ones are
 *    complete), and cuEventElapsedTime is the difference of two stamps.
 *  - Pinned host memory (cuMemHostRegister, up to MAX_HOSTREGS ranges) is
 *    charged to no device; with DEVICEMAP its device pointer is the host
 *    address, as with unified addressing. Without PORTABLE a range serves
 *    only its context, and goes with it.
 *  - Gates: cuStreamWaitValue32 on a word of such a range (the only memory
 *    the fake can read) holds the stream's later work until the word meets
 *    the condition: launches add up behind it, events recorded there stay
 *    pending, synchronisations poll the word (unlocked). The gate opens when
 *    a call touching its timeline sees the condition hold (the fake cannot
 *    know when the store was made), not before the work ahead of it is done.
 *    One gate per timeline: a second wait while it is closed must be implied
 *    by the first (GEQ on the same word, a value not behind: it replaces
 *    it), else CUDA_ERROR_NOT_SUPPORTED. Unregistering freezes the word.
 * One mutex guards all state (never held while sleeping); the current context
 * is per thread.
 *  - Stream capture (cuStreamBeginCapture_v2 / EndCapture / IsCapturing):
 *    launches into a capturing stream are counted apart and run nothing;
 *    every mode is treated as the global one, so an event query or a
 *    synchronisation anywhere during a capture invalidates it, and
 *    cuStreamEndCapture returns CUDA_ERROR_STREAM_CAPTURE_INVALIDATED.
 *    Stream waits are not captured: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED.
 *  - Graphs (cuGraphCreate, memory alloc/free, empty and child nodes;
 *    capture turns launches, cuMemAllocAsync and cuMemFreeAsync into nodes):
 *    an alloc node holds an address only. An executable graph gets its
 *    memory (each node rounded to 2 MiB) when uploaded or launched, from the
 *    device's graph pool: idle memory first, the rest from the card. A
 *    destroyed one leaves its memory idle in the pool; cuDeviceGraphMemTrim
 *    gives back all of it and unmaps live graphs (none runs meanwhile), which
 *    map again at their next launch. cuDeviceGetGraphMemAttribute reports it.
 *  - With $GPUSLICE_FAKE_PROCS set, the usage per card is published at
 *    every change for the fake NVML's process lists (fakeprocs.h).
 *  - With $FAKECUDA_LAUNCH_BLOCK=PATH (read at cuInit), the first launch of
 *    the process stays inside the driver, holding none of its locks (as a
 *    real launch into a full queue does): it creates PATH.inside, then
 *    returns once PATH exists. Tests of what other threads can do meanwhile.
 *    $FAKECUDA_LAUNCH_BLOCK_AT=N: the Nth launch instead (default 1).
 *  - With $FAKECUDA_NO_HOST_REGISTER=1 (read at cuInit), cuMemHostRegister
 *    refuses (CUDA_ERROR_NOT_SUPPORTED), as where memory cannot be pinned:
 *    tests of what a program does without a word the GPU can read.
 * Test hooks: fakecuda_used_bytes(), fakecuda_launch_count(),
 * fakecuda_captured_count() and fakecuda_wait_count().
 */
#define _GNU_SOURCE
#include "fakegpus.h"
#include "fakeprocs.h"

#include <gpuslice/cuda_api.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

#define LIB_PREFIX "gpuslice fake libcuda.so.1: "
#define FAKECUDA_DRIVER_VERSION 13000
/* What one context costs on its device unless the JSON says otherwise. */
#define FAKECUDA_CONTEXT_MIB 300
#define MIB (1ull << 20)
#define GRANULARITY (2ull << 20)
#define VA_BASE 0x7f0000000000ull
#define VA_WINDOW_SHIFT 40
#define VA_RESERVE_REGION FAKEGPUS_MAX_GPUS
#define HANDLE_BASE 0x100000ull /* arrays and VMM handles: small values */
#define MAX_CTXS 256            /* the first FAKEGPUS_MAX_GPUS are primary */
#define MAX_STREAMS 1024
#define MAX_POOLS (FAKEGPUS_MAX_GPUS + 256) /* the first ones are defaults */
#define MAX_EVENTS 4096
#define MAX_HOSTREGS 64
#define GATE_POLL_NS 50000ull /* how often a synchronisation looks at a closed gate's word */
#define NBUCKETS 4096

/* ------------------------------------------------ types cuda_api.h lacks */

/* Opaque handles of the real API, declared here because cuda_api.h does not
 * need them. */
typedef struct CUfunc_st *CUfunction;
typedef struct CUgraphExec_st *CUgraphExec;
/* cuda_api.h may declare it as well: repeating a typedef of the same type is
 * valid C11. */
typedef struct CUevent_st *CUevent;
typedef struct CUexecAffinityParam_st CUexecAffinityParam; /* only pointed to */
typedef struct CUctxCreateParams_st CUctxCreateParams;     /* only pointed to */
typedef struct CUlaunchAttribute_st CUlaunchAttribute;     /* only pointed to */
typedef int CUdevice_attribute;
typedef int CUmemPool_attribute;
typedef int CUmemAllocationGranularity_flags;

/* CUmemAccessDesc: where, and the access flags. */
typedef struct {
    CUmemLocation location;
    int flags;
} CUmemAccessDesc;

/* CUlaunchConfig as cuLaunchKernelEx takes it. */
typedef struct {
    unsigned int gridDimX, gridDimY, gridDimZ;
    unsigned int blockDimX, blockDimY, blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned int numAttrs;
} CUlaunchConfig;

enum { CU_MEM_ALLOCATION_TYPE_PINNED = 1 };
enum { CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES = 1,
       CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC = 2,
       CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES = 3,
       CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH = 6,
       CU_MEMPOOL_ATTR_USED_MEM_HIGH = 8 };
#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)
/* A macro, not an enumerator, so that this builds whether or not cuda_api.h
 * declares it (as an enumerator, of the same value). */
typedef struct CUgraph_st *CUgraph;
enum { CUDA_ERROR_ILLEGAL_STATE = 401, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
       CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901 };
#ifndef CUDA_ERROR_NOT_READY
#define CUDA_ERROR_NOT_READY 600
#endif
enum { CU_EVENT_BLOCKING_SYNC = 0x1, CU_EVENT_DISABLE_TIMING = 0x2,
       CU_EVENT_INTERPROCESS = 0x4 };
enum { CU_EVENT_RECORD_EXTERNAL = 0x1 };
/* Host memory registration and stream waits. Macros, not enumerators, and
 * a repeatable typedef, so that this builds whether or not cuda_api.h comes
 * to declare them (of the same values). */
typedef uint32_t cuuint32_t;
#define CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED 712
#define CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED 713
#define CU_MEMHOSTREGISTER_PORTABLE 0x01
#define CU_MEMHOSTREGISTER_DEVICEMAP 0x02
#define CU_MEMHOSTREGISTER_IOMEMORY 0x04
#define CU_MEMHOSTREGISTER_READ_ONLY 0x08
#define CU_STREAM_WAIT_VALUE_GEQ 0x0
#define CU_STREAM_WAIT_VALUE_EQ 0x1
#define CU_STREAM_WAIT_VALUE_AND 0x2
#define CU_STREAM_WAIT_VALUE_NOR 0x3
#define CU_STREAM_WAIT_VALUE_FLUSH (1u << 30)

/* ------------------------------------------------------------------ state */

struct card {
    unsigned gpu; /* index in g_gpus */
    uint64_t total, used, ctx_bytes;
    CUuuid uuid;
};

/*
 * A stream's timeline: a created stream's, or a context's default one. It
 * may wait at one gate (cuStreamWaitValue32): while that is closed, the work
 * queued after it adds up in behind_ns, as the GPU would hold it, and
 * done_ns is not yet known; the gate opens when a call finds its condition
 * true (gate_closed).
 */
struct timeline {
    uint64_t done_ns;     /* when its last queued work completes (no gate) */
    unsigned gate;        /* the closed gate's serial (g_gate_serial); 0: none */
    unsigned cond;        /* CU_STREAM_WAIT_VALUE_GEQ, _EQ, _AND or _NOR */
    const uint32_t *word; /* in a registered range, or &frozen once it is gone */
    uint32_t value;
    uint32_t frozen;      /* the word's last value, once its range is unregistered */
    uint64_t earliest_ns; /* done_ns when the wait was queued: it opens no sooner */
    uint64_t behind_ns;   /* work queued behind the gate */
};

struct ctx {
    bool alive, primary;
    int dev;
    unsigned refs; /* primary: the retain count */
    unsigned gen;  /* bumped at every destroy, so stale current ones die */
    struct timeline tl; /* the default stream's (handles 0, 1 and 2) */
    uint64_t last_ns; /* when all work queued in the context completes */
    size_t limits[3];     /* stack, printf FIFO, malloc heap (CUlimit 0-2) */
    uint64_t limit_bytes; /* what limits above their defaults hold */
    bool heap_resident;   /* a launch has made the malloc heap resident */
    uint64_t code_pending; /* modules' code, loaded at the next launch */
    uint64_t code_bytes;   /* modules' code loaded */
};

struct fgraph;
struct stream {
    bool alive;
    bool capturing; /* between cuStreamBeginCapture and cuStreamEndCapture */
    struct fgraph *graph; /* what the capture builds */
    struct ctx *ctx;
    struct timeline tl; /* kept after cuStreamDestroy: its work still runs */
};

struct event {
    bool alive, recorded;
    unsigned flags;
    struct ctx *ctx;
    uint64_t stamp_ns; /* complete once CLOCK_MONOTONIC reaches it */
    /* Recorded behind a closed gate: pending, no stamp until it opens. */
    unsigned gate;       /* that gate's serial; 0: not pending */
    struct timeline *tl; /* where it was recorded */
    uint64_t behind_ns;  /* the work queued behind the gate before it */
};

/* A host range made known to the driver by cuMemHostRegister. */
struct hostreg {
    bool alive, portable, devicemap;
    uintptr_t lo, hi;  /* [lo, hi) */
    struct ctx *ctx;   /* where it was registered; without PORTABLE, the only one */
};

struct pool {
    bool alive, is_default;
    int dev;
    uint64_t reserved, used, threshold, reserved_high, used_high;
    int reuse[4];
    unsigned outstanding; /* allocations not yet freed */
};

/* Graphs: nodes in a fixed array (a node handle is its address). Memory
 * alloc nodes get their address at creation; their memory is made resident
 * only when an executable graph is uploaded or launched (mapped), from the
 * device's graph memory pool, which keeps it until cuDeviceGraphMemTrim. */
#define MAX_GRAPHS 256
#define MAX_NODES 64
#define MAX_EXECS 256
enum { GN_KERNEL = 0, GN_EMPTY = 2 };
struct gnode {
    int type; /* CUgraphNodeType */
    int dev;  /* alloc nodes */
    uint64_t bytes;
    CUdeviceptr dptr;      /* alloc and free nodes */
    struct fgraph *child;  /* child graph nodes: a clone, owned */
};
struct fgraph {
    bool alive;
    unsigned n;
    struct gnode nodes[MAX_NODES];
};
struct fexec {
    bool alive, mapped;
    uint64_t bytes[FAKEGPUS_MAX_GPUS]; /* what its alloc nodes take, per device */
};
/* Per device: the graph memory pool. reserved = mapped to live executable
 * graphs + idle (left by destroyed ones, reusable, given back at trim). */
struct graphpool {
    uint64_t reserved, idle, reserved_high, used_high;
};

enum kind {
    K_ALLOC = 1, K_PITCH, K_MANAGED, K_POOL, K_RESERVE, /* keyed by address */
    K_ARRAY, K_MIPMAP, K_VMM, K_MODULE,                 /* keyed by handle */
};
#define KM(k) (1u << (k))
#define KM_FREEABLE (KM(K_ALLOC) | KM(K_PITCH) | KM(K_MANAGED) | KM(K_POOL))
#define KM_ADDRESS (KM_FREEABLE | KM(K_RESERVE))

struct alloc {
    struct alloc *hnext;       /* hash chain */
    struct alloc *prev, *next; /* list of all */
    unsigned long long key;
    uint64_t size;    /* what the caller asked for */
    uint64_t span;    /* address space used (2 MiB multiple) */
    uint64_t charged; /* bytes held on the device for this entry */
    int dev, kind;
    struct ctx *ctx;   /* owner for per-context kinds, else NULL */
    struct pool *pool; /* K_POOL */
    unsigned refs;     /* K_VMM: 1 until released, +1 per mapping */
    bool released;     /* K_VMM: cuMemRelease done */
};

struct mapping {
    struct mapping *next;
    CUdeviceptr va;
    uint64_t size;
    struct alloc *handle;
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static bool g_init_done;  /* cuInit ran (successfully or not) */
static CUresult g_init_rc = CUDA_ERROR_NOT_INITIALIZED;
static bool g_ready;      /* cuInit succeeded */
static struct fakegpus g_gpus;
static int g_ndev;
static struct card g_cards[FAKEGPUS_MAX_GPUS];
static uint64_t g_ctx_bytes_by_gpu[FAKEGPUS_MAX_GPUS]; /* by JSON index */
static struct ctx g_ctxs[MAX_CTXS];
static unsigned g_next_ctx = FAKEGPUS_MAX_GPUS;
static struct stream g_streams[MAX_STREAMS];
/* Stream capture, in the global mode (PyTorch's): while any stream captures,
 * a query or synchronisation from anywhere invalidates the capture, which
 * cuStreamEndCapture then reports. */
static int g_capturing;
static bool g_capture_invalidated;
static void unsafe_during_capture(void)
{
    if (g_capturing)
        g_capture_invalidated = true;
}
static struct event g_events[MAX_EVENTS];
static unsigned g_next_event;
static struct pool g_pools[MAX_POOLS];
static struct fgraph g_graphs[MAX_GRAPHS];
static struct fexec g_execs[MAX_EXECS];
static struct graphpool g_gpools[FAKEGPUS_MAX_GPUS];
static struct alloc *g_buckets[NBUCKETS];
static struct alloc g_all = {.prev = &g_all, .next = &g_all};
static struct mapping *g_maps;
static uint64_t g_va_next[FAKEGPUS_MAX_GPUS + 1];
static unsigned long long g_next_handle = HANDLE_BASE;
static unsigned long long g_launches;
static unsigned long long g_captured; /* launches into a capturing stream */
static unsigned long long g_waits;    /* stream waits queued (cuStreamWaitValue32) */
static unsigned g_gate_serial;        /* the last gate's serial */
static struct hostreg g_hostregs[MAX_HOSTREGS];
static uint64_t g_kernel_ns; /* FAKECUDA_KERNEL_NS */
static char g_block_path[4096]; /* FAKECUDA_LAUNCH_BLOCK: "" if unset */
static bool g_no_host_register; /* FAKECUDA_NO_HOST_REGISTER=1 */
static unsigned long g_block_at = 1; /* FAKECUDA_LAUNCH_BLOCK_AT */
static unsigned long g_launches_seen; /* launches that reached block_launch */

static _Thread_local struct ctx *t_cur;
static _Thread_local unsigned t_cur_gen;

/* ---------------------------------------------------------------- helpers */

static uint64_t round_up(uint64_t v, uint64_t to)
{
    return (v + to - 1) / to * to;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t max_u64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a + b < a ? UINT64_MAX : a + b;
}

/* Sleeps until CLOCK_MONOTONIC reaches `ns`; absolute, so a signal that
 * interrupts it does not stretch the wait. */
static void sleep_until(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
                          .tv_nsec = (long)(ns % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

static struct card *card_of(CUdevice dev)
{
    return (dev >= 0 && dev < g_ndev) ? &g_cards[dev] : NULL;
}

/* What this process holds on each card, for the fake NVML (fakeprocs.h). */
static void publish(void)
{
    const char *uuids[FAKEGPUS_MAX_GPUS];
    uint64_t bytes[FAKEGPUS_MAX_GPUS];
    for (int d = 0; d < g_ndev; d++) {
        uuids[d] = g_gpus.gpus[g_cards[d].gpu].uuid;
        bytes[d] = g_cards[d].used;
    }
    fakeprocs_publish(uuids, bytes, (unsigned)g_ndev);
}

static CUresult charge(int dev, uint64_t bytes)
{
    struct card *c = &g_cards[dev];
    if (bytes > c->total - c->used)
        return CUDA_ERROR_OUT_OF_MEMORY;
    c->used += bytes;
    publish();
    return CUDA_SUCCESS;
}

static void uncharge(int dev, uint64_t bytes)
{
    struct card *c = &g_cards[dev];
    c->used = bytes > c->used ? 0 : c->used - bytes;
    publish();
}

__attribute__((constructor)) static void fakeprocs_at_fork(void)
{
    pthread_atfork(NULL, NULL, fakeprocs_forget);
}

static struct ctx *cur_ctx(void)
{
    if (t_cur && t_cur->alive && t_cur->gen == t_cur_gen)
        return t_cur;
    return NULL;
}

static void set_cur(struct ctx *c)
{
    t_cur = c;
    t_cur_gen = c ? c->gen : 0;
}

static struct ctx *ctx_of(CUcontext h)
{
    uintptr_t p = (uintptr_t)h, base = (uintptr_t)g_ctxs;
    if (p < base || p >= base + sizeof(g_ctxs) || (p - base) % sizeof(struct ctx))
        return NULL;
    struct ctx *c = (struct ctx *)h;
    return c->alive ? c : NULL;
}

static struct pool *pool_of(CUmemoryPool h)
{
    uintptr_t p = (uintptr_t)h, base = (uintptr_t)g_pools;
    if (p < base || p >= base + sizeof(g_pools) || (p - base) % sizeof(struct pool))
        return NULL;
    struct pool *pl = (struct pool *)h;
    return pl->alive ? pl : NULL;
}

/* A created stream, or NULL for the special ones and bad handles; *ok says
 * whether the handle is usable at all. */
static struct stream *stream_of(CUstream h, bool *ok)
{
    *ok = true;
    if (h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD)
        return NULL;
    uintptr_t p = (uintptr_t)h, base = (uintptr_t)g_streams;
    if (p < base || p >= base + sizeof(g_streams) || (p - base) % sizeof(struct stream) ||
        !((struct stream *)h)->alive || !((struct stream *)h)->ctx->alive) {
        *ok = false;
        return NULL;
    }
    return (struct stream *)h;
}

/* The context a stream operation runs in: the stream's, else the current. */
static CUresult stream_ctx(CUstream h, struct ctx **out)
{
    bool ok;
    struct stream *s = stream_of(h, &ok);
    if (!ok)
        return CUDA_ERROR_INVALID_HANDLE;
    *out = s ? s->ctx : cur_ctx();
    return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

/* The stream's context and timeline: a created stream's own, else the
 * default one of the current context. */
static CUresult stream_timeline(CUstream h, struct ctx **pc, struct timeline **pt)
{
    bool ok;
    struct stream *s = stream_of(h, &ok);
    if (!ok)
        return CUDA_ERROR_INVALID_HANDLE;
    struct ctx *c = s ? s->ctx : cur_ctx();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    *pc = c;
    *pt = s ? &s->tl : &c->tl;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ gates */

/* Whether the word meets a wait's condition now. Another thread of the
 * process stores into it, as the shim's watcher does, without our lock. */
static bool wait_holds(const uint32_t *word, uint32_t value, unsigned cond)
{
    uint32_t w = __atomic_load_n(word, __ATOMIC_ACQUIRE);
    switch (cond) {
    case CU_STREAM_WAIT_VALUE_GEQ:
        return (int32_t)(w - value) >= 0; /* cyclic, as the GPU compares */
    case CU_STREAM_WAIT_VALUE_EQ:
        return w == value;
    case CU_STREAM_WAIT_VALUE_AND:
        return (w & value) != 0;
    default: /* CU_STREAM_WAIT_VALUE_NOR */
        return ~(w | value) != 0;
    }
}

/* Opens t's gate at `now`: the work behind it runs from then on (from the
 * end of the work before the wait, if later), and the events recorded
 * behind it get their stamps. */
static void gate_open(struct ctx *c, struct timeline *t, uint64_t now)
{
    uint64_t base = max_u64(now, t->earliest_ns);
    for (int i = 0; i < MAX_EVENTS; i++) {
        struct event *e = &g_events[i];
        if (e->alive && e->gate == t->gate) {
            e->stamp_ns = add_sat(base, e->behind_ns);
            e->gate = 0;
        }
    }
    *t = (struct timeline){.done_ns = add_sat(base, t->behind_ns)};
    c->last_ns = max_u64(c->last_ns, t->done_ns);
}

/* Whether t waits at a closed gate. Every call that touches a timeline asks
 * this first, so a gate opens at the first call that finds its condition
 * true: the fake cannot know when the store was made, only when it is seen. */
static bool gate_closed(struct ctx *c, struct timeline *t)
{
    if (!t->gate)
        return false;
    if (!wait_holds(t->word, t->value, t->cond))
        return true;
    gate_open(c, t, now_ns());
    return false;
}

/* Queues `ns` of work on the timeline: behind its gate while that is closed. */
static void timeline_queue(struct ctx *c, struct timeline *t, uint64_t ns)
{
    if (gate_closed(c, t)) {
        t->behind_ns = add_sat(t->behind_ns, ns);
        return;
    }
    t->done_ns = add_sat(max_u64(now_ns(), t->done_ns), ns);
    c->last_ns = max_u64(c->last_ns, t->done_ns);
}

/* Whether the event waits behind a gate still closed (an event and the
 * stream it was recorded on are of one context). */
static bool event_pending(struct event *e)
{
    if (e->gate)
        gate_closed(e->ctx, e->tl);
    return e->gate != 0;
}

/* The registration that holds [p, p + len) for context c; NULL if none. */
static struct hostreg *hostreg_find(uintptr_t p, uintptr_t len, const struct ctx *c)
{
    for (int i = 0; i < MAX_HOSTREGS; i++) {
        struct hostreg *r = &g_hostregs[i];
        if (r->alive && r->lo <= p && p < r->hi && len <= r->hi - p &&
            (r->portable || r->ctx == c))
            return r;
    }
    return NULL;
}

/* A gate whose word lies in a range going away reads it one last time: the
 * memory may be unmapped next. If still closed, it stays closed, on that
 * last value (on the real GPU, the wait would never see the store). */
static void gate_freeze(struct ctx *c, struct timeline *t, const struct hostreg *r)
{
    uintptr_t w = (uintptr_t)t->word;
    if (!t->gate || w < r->lo || w >= r->hi || !gate_closed(c, t))
        return;
    t->frozen = __atomic_load_n(t->word, __ATOMIC_ACQUIRE);
    t->word = &t->frozen;
}

static void hostreg_drop(struct hostreg *r)
{
    for (int i = 0; i < MAX_STREAMS; i++)
        if (g_streams[i].tl.gate)
            gate_freeze(g_streams[i].ctx, &g_streams[i].tl, r);
    for (int i = 0; i < MAX_CTXS; i++)
        if (g_ctxs[i].tl.gate)
            gate_freeze(&g_ctxs[i], &g_ctxs[i].tl, r);
    r->alive = false;
}

/* ---------------------------------------------------------- the table */

static unsigned bucket(unsigned long long key)
{
    return (unsigned)((key * 0x9E3779B97F4A7C15ull) >> 52) % NBUCKETS;
}

static struct alloc *find(unsigned long long key, unsigned kinds)
{
    for (struct alloc *a = g_buckets[bucket(key)]; a; a = a->hnext)
        if (a->key == key && (KM(a->kind) & kinds))
            return a;
    return NULL;
}

static struct alloc *add_entry(unsigned long long key, int kind, int dev, uint64_t size)
{
    struct alloc *a = calloc(1, sizeof(*a));
    if (!a)
        return NULL;
    a->key = key;
    a->kind = kind;
    a->dev = dev;
    a->size = size;
    unsigned b = bucket(key);
    a->hnext = g_buckets[b];
    g_buckets[b] = a;
    a->prev = g_all.prev;
    a->next = &g_all;
    g_all.prev->next = a;
    g_all.prev = a;
    return a;
}

/* Unlink and free the entry; gives back what it charged. */
static void drop_entry(struct alloc *a)
{
    struct alloc **pp = &g_buckets[bucket(a->key)];
    while (*pp != a)
        pp = &(*pp)->hnext;
    *pp = a->hnext;
    a->prev->next = a->next;
    a->next->prev = a->prev;
    if (a->charged)
        uncharge(a->dev, a->charged);
    free(a);
}

/* 0 if [lo, lo + span) is free, else the end of an entry in the way. */
static uint64_t range_conflict(uint64_t lo, uint64_t span)
{
    for (struct alloc *a = g_all.next; a != &g_all; a = a->next)
        if ((KM(a->kind) & KM_ADDRESS) && a->key < lo + span && lo < a->key + a->span)
            return a->key + a->span;
    return 0;
}

/* A fresh 2 MiB aligned address range in a region's window. */
static CUresult va_alloc(int region, uint64_t span, uint64_t align, CUdeviceptr *out)
{
    uint64_t lo = VA_BASE + ((uint64_t)region << VA_WINDOW_SHIFT);
    uint64_t hi = lo + (1ull << VA_WINDOW_SHIFT);
    if (align < GRANULARITY)
        align = GRANULARITY;
    if (span > hi - lo || align > hi - lo)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t next = g_va_next[region] ? g_va_next[region] : lo;
    uint64_t p = round_up(next, align);
    if (p >= hi || span > hi - p) {
        /* The window is used up once: first fit from its start. */
        uint64_t end;
        p = lo;
        while (p < hi && span <= hi - p && (end = range_conflict(p, span)))
            p = round_up(end, align);
        if (p >= hi || span > hi - p)
            return CUDA_ERROR_OUT_OF_MEMORY;
    }
    g_va_next[region] = p + span;
    *out = p;
    return CUDA_SUCCESS;
}

/* A new allocation that owns device memory and an address range. */
static CUresult new_alloc(int kind, int dev, uint64_t size, uint64_t charged, struct ctx *owner,
                          CUdeviceptr *out)
{
    uint64_t span = round_up(size, GRANULARITY);
    CUdeviceptr va;
    CUresult rc = va_alloc(dev, span, GRANULARITY, &va);
    if (rc)
        return rc;
    if ((rc = charge(dev, charged)))
        return rc;
    struct alloc *a = add_entry(va, kind, dev, size);
    if (!a) {
        uncharge(dev, charged);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->span = span;
    a->charged = charged;
    a->ctx = owner;
    *out = va;
    return CUDA_SUCCESS;
}

/* A new object of the context's, known by a handle, holding `bytes` of its
 * device until destroyed or the context ends (arrays, modules). */
static CUresult handle_entry(void **handle, int kind, struct ctx *c, uint64_t bytes)
{
    CUresult rc = charge(c->dev, bytes);
    if (rc)
        return rc;
    unsigned long long key = g_next_handle;
    g_next_handle += 0x10;
    struct alloc *a = add_entry(key, kind, c->dev, bytes);
    if (!a) {
        uncharge(c->dev, bytes);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->charged = bytes;
    a->ctx = c;
    *handle = (void *)(uintptr_t)key;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ pools */

static void pool_shrink_to(struct pool *p, uint64_t keep)
{
    uint64_t target = keep > p->used ? keep : p->used;
    if (target >= p->reserved)
        return;
    target = round_up(target, GRANULARITY);
    if (target >= p->reserved)
        return;
    uncharge(p->dev, p->reserved - target);
    p->reserved = target;
}

/* What the real pools do at a synchronisation point. */
static void pools_sync(void)
{
    for (int i = 0; i < MAX_POOLS; i++)
        if (g_pools[i].alive)
            pool_shrink_to(&g_pools[i], g_pools[i].threshold);
}

static CUresult pool_alloc(struct pool *p, uint64_t size, CUdeviceptr *out)
{
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t idle = p->reserved - p->used, grow = 0;
    if (size > idle) {
        grow = round_up(size - idle, GRANULARITY);
        if (grow < size - idle) /* wrapped */
            return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUresult rc = charge(p->dev, grow);
    if (rc)
        return rc;
    CUdeviceptr va;
    rc = new_alloc(K_POOL, p->dev, size, 0, NULL, &va);
    if (rc) {
        uncharge(p->dev, grow);
        return rc;
    }
    find(va, KM(K_POOL))->pool = p;
    p->reserved += grow;
    p->used += size;
    p->outstanding++;
    if (p->reserved > p->reserved_high)
        p->reserved_high = p->reserved;
    if (p->used > p->used_high)
        p->used_high = p->used;
    *out = va;
    return CUDA_SUCCESS;
}

static void free_any(struct alloc *a)
{
    if (a->kind == K_POOL) {
        struct pool *p = a->pool;
        p->used -= a->size;
        p->outstanding--;
        if (!p->alive) {
            pool_shrink_to(p, 0);
            if (p->outstanding == 0) {
                uncharge(p->dev, p->reserved);
                p->reserved = 0;
            }
        }
    }
    drop_entry(a);
}


/* ----------------------------------------------------------------- graphs */

static struct fgraph *graph_new(void)
{
    for (int i = 0; i < MAX_GRAPHS; i++)
        if (!g_graphs[i].alive) {
            memset(&g_graphs[i], 0, sizeof g_graphs[i]);
            g_graphs[i].alive = true;
            return &g_graphs[i];
        }
    return NULL;
}

static void graph_free(struct fgraph *g)
{
    for (unsigned i = 0; i < g->n; i++)
        if (g->nodes[i].child)
            graph_free(g->nodes[i].child);
    g->alive = false;
}

/* A deep copy (child graphs too); NULL when the table is full. */
static struct fgraph *graph_clone(const struct fgraph *src)
{
    struct fgraph *c = graph_new();
    if (!c)
        return NULL;
    *c = *src;
    for (unsigned i = 0; i < c->n; i++)
        c->nodes[i].child = NULL; /* src's, until cloned */
    for (unsigned i = 0; i < c->n; i++) {
        if (src->nodes[i].child && !(c->nodes[i].child = graph_clone(src->nodes[i].child))) {
            graph_free(c);
            return NULL;
        }
    }
    return c;
}

static struct fgraph *graph_of(CUgraph h)
{
    uintptr_t p = (uintptr_t)h, base = (uintptr_t)g_graphs;
    if (p < base || p >= base + sizeof(g_graphs) || (p - base) % sizeof(struct fgraph))
        return NULL;
    struct fgraph *g = (struct fgraph *)h;
    return g->alive ? g : NULL;
}

static struct gnode *node_of(CUgraphNode h)
{
    uintptr_t p = (uintptr_t)h, base = (uintptr_t)g_graphs;
    if (p < base || p >= base + sizeof(g_graphs))
        return NULL;
    struct fgraph *g = &g_graphs[(p - base) / sizeof(struct fgraph)];
    uintptr_t first = (uintptr_t)&g->nodes[0];
    if (!g->alive || p < first || (p - first) % sizeof(struct gnode) ||
        (p - first) / sizeof(struct gnode) >= g->n)
        return NULL;
    return (struct gnode *)h;
}

static struct gnode *graph_add(struct fgraph *g, int type)
{
    if (g->n >= MAX_NODES)
        return NULL;
    struct gnode *n = &g->nodes[g->n++];
    memset(n, 0, sizeof *n);
    n->type = type;
    return n;
}

/* An alloc node: its address now, its memory when the graph runs. */
static CUresult graph_add_alloc(struct fgraph *g, int dev, uint64_t bytes, CUgraphNode *ph,
                                CUdeviceptr *dptr)
{
    if (!card_of(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr va;
    CUresult rc = va_alloc(dev, round_up(bytes, GRANULARITY), GRANULARITY, &va);
    if (rc)
        return rc;
    struct gnode *n = graph_add(g, CU_GRAPH_NODE_TYPE_MEM_ALLOC);
    if (!n)
        return CUDA_ERROR_OUT_OF_MEMORY;
    n->dev = dev;
    n->bytes = bytes;
    n->dptr = *dptr = va;
    if (ph)
        *ph = (CUgraphNode)n;
    return CUDA_SUCCESS;
}

static void graph_bytes(const struct fgraph *g, uint64_t *bytes)
{
    for (unsigned i = 0; i < g->n; i++) {
        const struct gnode *n = &g->nodes[i];
        if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC)
            bytes[n->dev] += round_up(n->bytes, GRANULARITY);
        else if (n->child)
            graph_bytes(n->child, bytes);
    }
}

static struct fexec *exec_of(CUgraphExec h)
{
    uintptr_t p = (uintptr_t)h, base = (uintptr_t)g_execs;
    if (p < base || p >= base + sizeof(g_execs) || (p - base) % sizeof(struct fexec))
        return NULL;
    struct fexec *e = (struct fexec *)h;
    return e->alive ? e : NULL;
}

/* What the graph pool of `dev` has mapped to live executable graphs. */
static uint64_t gpool_used(int dev)
{
    uint64_t used = 0;
    for (int i = 0; i < MAX_EXECS; i++)
        if (g_execs[i].alive && g_execs[i].mapped)
            used += g_execs[i].bytes[dev];
    return used;
}

/* Upload or launch: the exec's alloc nodes get memory, idle pool memory
 * first, the rest from the card. Nothing changes if it does not fit. */
static CUresult exec_map(struct fexec *e)
{
    if (e->mapped)
        return CUDA_SUCCESS;
    uint64_t grow[FAKEGPUS_MAX_GPUS] = {0};
    for (int d = 0; d < g_ndev; d++) {
        struct graphpool *gp = &g_gpools[d];
        grow[d] = e->bytes[d] > gp->idle ? e->bytes[d] - gp->idle : 0;
        if (grow[d] && charge(d, grow[d]) != CUDA_SUCCESS) {
            while (d-- > 0)
                uncharge(d, grow[d]);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    e->mapped = true;
    for (int d = 0; d < g_ndev; d++) {
        struct graphpool *gp = &g_gpools[d];
        gp->idle -= e->bytes[d] - grow[d];
        gp->reserved += grow[d];
        gp->reserved_high = max_u64(gp->reserved_high, gp->reserved);
        gp->used_high = max_u64(gp->used_high, gpool_used(d));
    }
    return CUDA_SUCCESS;
}

/* -------------------------------------------------------------- contexts */

static void ctx_teardown(struct ctx *c)
{
    for (struct alloc *a = g_all.next, *n; a != &g_all; a = n) {
        n = a->next;
        if (a->ctx == c)
            free_any(a);
    }
    /* Host ranges registered here without PORTABLE go with it. */
    for (int i = 0; i < MAX_HOSTREGS; i++)
        if (g_hostregs[i].alive && !g_hostregs[i].portable && g_hostregs[i].ctx == c)
            hostreg_drop(&g_hostregs[i]);
    /* Its streams, destroyed ones too, and their gates: nothing waits for
     * them any more. */
    for (int i = 0; i < MAX_STREAMS; i++) {
        if (g_streams[i].ctx == c) {
            g_streams[i].alive = false;
            g_streams[i].tl = (struct timeline){0};
        }
    }
    c->tl = (struct timeline){0};
    for (int i = 0; i < MAX_EVENTS; i++)
        if (g_events[i].alive && g_events[i].ctx == c)
            g_events[i].alive = false;
    uncharge(c->dev, g_cards[c->dev].ctx_bytes + c->limit_bytes + c->code_bytes);
    c->limit_bytes = c->code_bytes = c->code_pending = 0;
    c->heap_resident = false;
    c->alive = false;
    c->refs = 0;
    c->gen++;
    if (t_cur == c)
        set_cur(NULL);
}

static CUresult ctx_create(CUcontext *pctx, CUdevice dev)
{
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (!card_of(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    struct ctx *c = NULL;
    for (unsigned k = 0; k < MAX_CTXS - FAKEGPUS_MAX_GPUS; k++) {
        unsigned i = g_next_ctx + k;
        if (i >= MAX_CTXS)
            i -= MAX_CTXS - FAKEGPUS_MAX_GPUS;
        if (!g_ctxs[i].alive) {
            c = &g_ctxs[i];
            g_next_ctx = i + 1 >= MAX_CTXS ? FAKEGPUS_MAX_GPUS : i + 1;
            break;
        }
    }
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = charge(dev, g_cards[dev].ctx_bytes);
    if (rc)
        return rc;
    c->alive = true;
    c->primary = false;
    c->dev = dev;
    c->refs = 1;
    c->tl = (struct timeline){0};
    c->last_ns = 0;
    c->limit_bytes = c->code_bytes = c->code_pending = 0;
    c->heap_resident = false;
    memset(c->limits, 0, sizeof c->limits);
    set_cur(c);
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- loading */

/* Hex digits of "GPU-xxxxxxxx-xxxx-..." as 16 bytes; a hash if not that. */
static void uuid_bytes(const char *text, CUuuid *out)
{
    unsigned char b[16] = {0};
    unsigned nd = 0;
    const char *p = strncmp(text, "GPU-", 4) == 0 ? text + 4 : text;
    for (; *p && nd < 33; p++) {
        int v;
        if (*p >= '0' && *p <= '9')
            v = *p - '0';
        else if (*p >= 'a' && *p <= 'f')
            v = *p - 'a' + 10;
        else if (*p >= 'A' && *p <= 'F')
            v = *p - 'A' + 10;
        else if (*p == '-')
            continue;
        else
            break;
        if (nd < 32)
            b[nd / 2] |= (unsigned char)(nd % 2 ? v : v << 4);
        nd++;
    }
    if (nd != 32 || *p) {
        uint64_t h1 = 1469598103934665603ull, h2 = 0x9E3779B97F4A7C15ull;
        for (p = text; *p; p++) {
            h1 = (h1 ^ (unsigned char)*p) * 1099511628211ull;
            h2 = (h2 ^ (unsigned char)*p) * 0x100000001B3ull + 7;
        }
        memcpy(b, &h1, 8);
        memcpy(b + 8, &h2, 8);
    }
    memcpy(out->bytes, b, 16);
}

/* CUDA_VISIBLE_DEVICES: the JSON's indexes in CUDA's order. */
static int visible_devices(unsigned *order)
{
    const char *env = getenv("CUDA_VISIBLE_DEVICES");
    if (!env) {
        for (unsigned i = 0; i < g_gpus.count; i++)
            order[i] = i;
        return (int)g_gpus.count;
    }
    int n = 0;
    const char *p = env;
    while (*p && n < FAKEGPUS_MAX_GPUS) {
        char tok[128];
        size_t len = strcspn(p, ",");
        const char *s = p, *e = p + len;
        while (s < e && (*s == ' ' || *s == '\t'))
            s++;
        while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        if ((size_t)(e - s) >= sizeof(tok))
            break;
        memcpy(tok, s, (size_t)(e - s));
        tok[e - s] = '\0';
        int found = -1;
        if (strncasecmp(tok, "GPU-", 4) == 0) {
            size_t tl = strlen(tok);
            for (unsigned i = 0; i < g_gpus.count; i++) {
                if (strncasecmp(g_gpus.gpus[i].uuid, tok, tl) == 0) {
                    if (found >= 0) { /* an ambiguous prefix */
                        found = -1;
                        break;
                    }
                    found = (int)i;
                }
            }
        } else if (tok[0] >= '0' && tok[0] <= '9') {
            char *end;
            unsigned long v = strtoul(tok, &end, 10);
            if (*end == '\0' && v < g_gpus.count)
                found = (int)v;
        }
        for (int k = 0; found >= 0 && k < n; k++)
            if (order[k] == (unsigned)found)
                found = -1; /* a repeat is invalid too */
        if (found < 0)
            break; /* this entry and all after it are hidden */
        order[n++] = (unsigned)found;
        p += len;
        if (*p == ',')
            p++;
    }
    return n;
}

/* FAKECUDA_KERNEL_NS: how long each launch keeps its stream busy. Unset or
 * empty is 0; anything but a plain decimal number is reported and taken as 0,
 * so that a typo shows instead of silently changing the timings. */
static uint64_t kernel_ns_from_env(void)
{
    const char *v = getenv("FAKECUDA_KERNEL_NS");
    if (!v || !*v)
        return 0;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (*v < '0' || *v > '9' || *end || errno == ERANGE) {
        fprintf(stderr, LIB_PREFIX "FAKECUDA_KERNEL_NS=%s: expected a whole number of "
                "nanoseconds; using 0\n", v);
        return 0;
    }
    return n;
}

static CUresult do_init(void)
{
    char err[1024] = "";
    g_kernel_ns = kernel_ns_from_env();
    const char *block = getenv("FAKECUDA_LAUNCH_BLOCK");
    snprintf(g_block_path, sizeof g_block_path, "%s", block ? block : "");
    const char *block_at = getenv("FAKECUDA_LAUNCH_BLOCK_AT");
    char *end = NULL;
    unsigned long at = block_at ? strtoul(block_at, &end, 10) : 0;
    g_block_at = at && end && !*end ? at : 1;
    const char *no_register = getenv("FAKECUDA_NO_HOST_REGISTER");
    g_no_host_register = no_register && strcmp(no_register, "1") == 0;
    if (fakegpus_load(NULL, &g_gpus, err, sizeof(err)) != 0) {
        fprintf(stderr, LIB_PREFIX "%s\n", err);
        return CUDA_ERROR_NO_DEVICE;
    }
    for (unsigned i = 0; i < g_gpus.count; i++) {
        const struct fakegpu *g = &g_gpus.gpus[i];
        uint64_t mib = g->has_context_mib ? g->context_mib : FAKECUDA_CONTEXT_MIB;
        g_ctx_bytes_by_gpu[i] = mib * MIB;
    }
    unsigned order[FAKEGPUS_MAX_GPUS];
    g_ndev = visible_devices(order);
    memset(g_cards, 0, sizeof(g_cards));
    for (int d = 0; d < g_ndev; d++) {
        struct card *c = &g_cards[d];
        c->gpu = order[d];
        c->total = g_gpus.gpus[order[d]].memory_mib * MIB;
        c->ctx_bytes = g_ctx_bytes_by_gpu[order[d]];
        uuid_bytes(g_gpus.gpus[order[d]].uuid, &c->uuid);
        g_ctxs[d].primary = true;
        g_ctxs[d].dev = d;
        struct pool *p = &g_pools[d];
        p->alive = p->is_default = true;
        p->dev = d;
    }
    return g_ndev ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

/* --------------------------------------------------------- entry points */

/* Runs `call` under the lock once cuInit has succeeded. */
#define LOCKED(call)                                                                   \
    do {                                                                               \
        pthread_mutex_lock(&g_mu);                                                     \
        CUresult rc_ = g_ready ? (call) : CUDA_ERROR_NOT_INITIALIZED;                  \
        pthread_mutex_unlock(&g_mu);                                                   \
        return rc_;                                                                    \
    } while (0)

EXPORT CUresult cuInit(unsigned int Flags)
{
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_mu);
    if (!g_init_done) {
        g_init_rc = do_init();
        g_ready = g_init_rc == CUDA_SUCCESS;
        g_init_done = true;
    }
    CUresult rc = g_init_rc;
    pthread_mutex_unlock(&g_mu);
    return rc;
}

EXPORT CUresult cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = FAKECUDA_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

static CUresult dev_count(int *count)
{
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = g_ndev;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetCount(int *count) { LOCKED(dev_count(count)); }

static CUresult dev_get(CUdevice *device, int ordinal)
{
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (!card_of(ordinal))
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal) { LOCKED(dev_get(device, ordinal)); }

static CUresult dev_name(char *name, int len, CUdevice dev)
{
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct card *c = card_of(dev);
    if (!c)
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "%s", g_gpus.gpus[c->gpu].name);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    LOCKED(dev_name(name, len, dev));
}

static CUresult dev_uuid(CUuuid *uuid, CUdevice dev)
{
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    struct card *c = card_of(dev);
    if (!c)
        return CUDA_ERROR_INVALID_DEVICE;
    *uuid = c->uuid;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) { LOCKED(dev_uuid(uuid, dev)); }
EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) { LOCKED(dev_uuid(uuid, dev)); }

static CUresult dev_total(size_t *bytes, unsigned int *bytes32, CUdevice dev)
{
    if (!bytes && !bytes32)
        return CUDA_ERROR_INVALID_VALUE;
    struct card *c = card_of(dev);
    if (!c)
        return CUDA_ERROR_INVALID_DEVICE;
    if (bytes)
        *bytes = c->total;
    else
        *bytes32 = c->total > UINT_MAX ? UINT_MAX : (unsigned int)c->total;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    LOCKED(bytes ? dev_total(bytes, NULL, dev) : CUDA_ERROR_INVALID_VALUE);
}
/* The legacy 32-bit variant: saturates at 4 GiB - 1. */
EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
    LOCKED(bytes ? dev_total(NULL, bytes, dev) : CUDA_ERROR_INVALID_VALUE);
}

static CUresult dev_attr(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    struct card *c = card_of(dev);
    if (!c)
        return CUDA_ERROR_INVALID_DEVICE;
    const struct fakegpu *g = &g_gpus.gpus[c->gpu];
    int v;
    switch (attrib) {
    case 1: v = 1024; break;               /* MAX_THREADS_PER_BLOCK */
    case 2: case 3: v = 1024; break;       /* MAX_BLOCK_DIM_X, Y */
    case 4: v = 64; break;                 /* MAX_BLOCK_DIM_Z */
    case 5: v = INT_MAX; break;            /* MAX_GRID_DIM_X */
    case 6: case 7: v = 65535; break;      /* MAX_GRID_DIM_Y, Z */
    case 8: v = 49152; break;              /* MAX_SHARED_MEMORY_PER_BLOCK */
    case 10: v = 32; break;                /* WARP_SIZE */
    case 16: v = 132; break;               /* MULTIPROCESSOR_COUNT */
    case 33: v = (int)g->pci_bus; break;   /* PCI_BUS_ID */
    case 34: v = (int)g->pci_device; break; /* PCI_DEVICE_ID */
    case 39: v = 2048; break;              /* MAX_THREADS_PER_MULTIPROCESSOR */
    case 41: v = 1; break;                 /* UNIFIED_ADDRESSING */
    case 50: v = (int)g->pci_domain; break; /* PCI_DOMAIN_ID */
    case 75: v = g->cc_major; break;       /* COMPUTE_CAPABILITY_MAJOR */
    case 76: v = g->cc_minor; break;       /* COMPUTE_CAPABILITY_MINOR */
    case 83: v = 1; break;                 /* MANAGED_MEMORY */
    case 102: v = 1; break;                /* VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED */
    case 115: v = 1; break;                /* MEMORY_POOLS_SUPPORTED */
    default:
        if (attrib <= 0 || attrib >= 256)
            return CUDA_ERROR_INVALID_VALUE;
        v = 0;
    }
    *pi = v;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    LOCKED(dev_attr(pi, attrib, dev));
}

/* ---------------------------------------------------------- contexts */

static CUresult primary_retain(CUcontext *pctx, CUdevice dev)
{
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (!card_of(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    struct ctx *c = &g_ctxs[dev];
    if (c->refs == 0) {
        CUresult rc = charge(dev, g_cards[dev].ctx_bytes);
        if (rc)
            return rc;
        c->alive = true;
        c->tl = (struct timeline){0};
        c->last_ns = 0;
    }
    c->refs++;
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    LOCKED(primary_retain(pctx, dev));
}

static CUresult primary_release(CUdevice dev)
{
    if (!card_of(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    struct ctx *c = &g_ctxs[dev];
    if (c->refs == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (--c->refs == 0)
        ctx_teardown(c);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) { LOCKED(primary_release(dev)); }
EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { LOCKED(primary_release(dev)); }

EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    (void)flags;
    LOCKED(ctx_create(pctx, dev));
}
EXPORT CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    (void)flags;
    LOCKED(ctx_create(pctx, dev));
}
EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                               unsigned int flags, CUdevice dev)
{
    (void)paramsArray, (void)numParams, (void)flags;
    LOCKED(ctx_create(pctx, dev));
}
EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                               unsigned int flags, CUdevice dev)
{
    (void)ctxCreateParams, (void)flags;
    LOCKED(ctx_create(pctx, dev));
}

static CUresult ctx_destroy(CUcontext h)
{
    struct ctx *c = ctx_of(h);
    if (!c || c->primary)
        return CUDA_ERROR_INVALID_CONTEXT;
    ctx_teardown(c);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) { LOCKED(ctx_destroy(ctx)); }

/* Interop contexts: plain contexts here (no OpenGL or VDPAU behind them). */
EXPORT CUresult cuGLCtxCreate_v2(CUcontext *pCtx, unsigned int Flags, CUdevice device)
{
    (void)Flags;
    LOCKED(ctx_create(pCtx, device));
}
EXPORT CUresult cuVDPAUCtxCreate_v2(CUcontext *pCtx, unsigned int flags, CUdevice device,
                                    unsigned int vdpDevice, void *vdpGetProcAddress)
{
    (void)flags, (void)vdpDevice, (void)vdpGetProcAddress;
    LOCKED(ctx_create(pCtx, device));
}

/* A green context: a context of its own (the fake gives it all the SMs),
 * not made current. */
static CUresult green_create(CUgreenCtx *ph, CUdevice dev)
{
    struct ctx *was = cur_ctx();
    CUcontext c;
    CUresult rc = ctx_create(&c, dev);
    set_cur(was);
    if (rc == CUDA_SUCCESS)
        *ph = (CUgreenCtx)c;
    return rc;
}
EXPORT CUresult cuGreenCtxCreate(CUgreenCtx *phCtx, CUdevResourceDesc desc, CUdevice dev,
                                 unsigned int flags)
{
    (void)desc, (void)flags;
    LOCKED(phCtx ? green_create(phCtx, dev) : CUDA_ERROR_INVALID_VALUE);
}
EXPORT CUresult cuGreenCtxDestroy(CUgreenCtx hCtx) { LOCKED(ctx_destroy((CUcontext)hCtx)); }

/* Limits: above their defaults, the stack (for every resident thread: 132
 * SMs x 2048) and the printf FIFO hold memory at once; the malloc heap only
 * from the next launch on, as the H200's driver does (nothing of a 5 GiB
 * heap was resident after cuCtxSetLimit). */
static const size_t limit_default[3] = {1024, 1 << 20, 8 << 20};
static uint64_t limit_cost(const size_t *v, bool heap)
{
    uint64_t b = 0;
    for (int i = 0; i < (heap ? 3 : 2); i++)
        if (v[i] > limit_default[i])
            b += (v[i] - limit_default[i]) * (i == 0 ? 132ull * 2048 : 1);
    return b;
}
static CUresult ctx_limit(int limit, size_t *value, bool set)
{
    struct ctx *c = cur_ctx();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (limit < 0 || limit > 2 || !value)
        return CUDA_ERROR_INVALID_VALUE; /* only those that hold memory */
    size_t *cur = c->limits;
    for (int i = 0; i < 3; i++)
        if (!cur[i])
            cur[i] = limit_default[i];
    if (!set) {
        *value = cur[limit];
        return CUDA_SUCCESS;
    }
    size_t next[3] = {cur[0], cur[1], cur[2]};
    next[limit] = *value;
    uint64_t cost = limit_cost(next, c->heap_resident);
    if (cost > c->limit_bytes && charge(c->dev, cost - c->limit_bytes) != CUDA_SUCCESS)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (cost < c->limit_bytes)
        uncharge(c->dev, c->limit_bytes - cost);
    c->limit_bytes = cost;
    cur[limit] = *value;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxSetLimit(int limit, size_t value) { LOCKED(ctx_limit(limit, &value, true)); }
EXPORT CUresult cuCtxGetLimit(size_t *pvalue, int limit) { LOCKED(ctx_limit(limit, pvalue, false)); }
EXPORT CUresult cuCtxDestroy(CUcontext ctx) { LOCKED(ctx_destroy(ctx)); }

static CUresult ctx_set_current(CUcontext h)
{
    if (!h) {
        set_cur(NULL);
        return CUDA_SUCCESS;
    }
    struct ctx *c = ctx_of(h);
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    set_cur(c);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) { LOCKED(ctx_set_current(ctx)); }

static CUresult ctx_get_current(CUcontext *pctx)
{
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = (CUcontext)cur_ctx();
    return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx) { LOCKED(ctx_get_current(pctx)); }

static CUresult ctx_get_device(CUdevice *device)
{
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    struct ctx *c = cur_ctx();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    *device = c->dev;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxGetDevice(CUdevice *device) { LOCKED(ctx_get_device(device)); }

/* Like LOCKED, then sleeps (unlocked) until `until` when `call` succeeded.
 * While `call` finds a closed gate in the way (sets `closed`), it is made
 * again every GATE_POLL_NS, unlocked in between, until the gate opens. */
#define LOCKED_WAIT(call, until, closed)                                               \
    do {                                                                               \
        CUresult rc_;                                                                  \
        for (;;) {                                                                     \
            closed = false;                                                            \
            pthread_mutex_lock(&g_mu);                                                 \
            rc_ = g_ready ? (call) : CUDA_ERROR_NOT_INITIALIZED;                       \
            pthread_mutex_unlock(&g_mu);                                               \
            if (rc_ != CUDA_SUCCESS || !closed)                                        \
                break;                                                                 \
            sleep_until(now_ns() + GATE_POLL_NS);                                      \
        }                                                                              \
        if (rc_ == CUDA_SUCCESS)                                                       \
            sleep_until(until);                                                        \
        return rc_;                                                                    \
    } while (0)

/* Everything queued in the context: its default stream and its streams,
 * destroyed ones too, behind their gates included. */
static CUresult ctx_sync(uint64_t *until, bool *closed)
{
    struct ctx *c = cur_ctx();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    pools_sync();
    *closed = gate_closed(c, &c->tl);
    for (int i = 0; i < MAX_STREAMS; i++)
        if (g_streams[i].ctx == c && gate_closed(c, &g_streams[i].tl))
            *closed = true;
    *until = c->last_ns;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxSynchronize(void)
{
    uint64_t until = 0;
    bool closed;
    LOCKED_WAIT(ctx_sync(&until, &closed), until, closed);
}

/* ------------------------------------------------------------ memory */

static CUresult mem_info(size_t *freeb, size_t *total)
{
    if (!freeb || !total)
        return CUDA_ERROR_INVALID_VALUE;
    struct ctx *c = cur_ctx();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    *freeb = g_cards[c->dev].total - g_cards[c->dev].used;
    *total = g_cards[c->dev].total;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total) { LOCKED(mem_info(free, total)); }

static CUresult mem_alloc(int kind, CUdeviceptr *dptr, uint64_t bytes)
{
    if (!dptr || bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct ctx *c = cur_ctx();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    return new_alloc(kind, c->dev, bytes, bytes, c, dptr);
}
EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    LOCKED(mem_alloc(K_ALLOC, dptr, bytesize));
}

/* The legacy 32-bit pointer variant: no 64-bit address fits in it. */
EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize)
{
    (void)dptr, (void)bytesize;
    return CUDA_ERROR_NOT_SUPPORTED;
}

static CUresult mem_alloc_pitch(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                unsigned elem)
{
    if (!dptr || !pitch || width == 0 || height == 0 || (elem != 4 && elem != 8 && elem != 16))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t p = round_up(width, 512), bytes;
    if (p < width || __builtin_mul_overflow(p, (uint64_t)height, &bytes))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = mem_alloc(K_PITCH, dptr, bytes);
    if (rc == CUDA_SUCCESS)
        *pitch = p;
    return rc;
}
EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                   size_t Height, unsigned int ElementSizeBytes)
{
    LOCKED(mem_alloc_pitch(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes));
}

static CUresult mem_alloc_managed(CUdeviceptr *dptr, size_t bytes, unsigned flags)
{
    if (flags != 1 && flags != 2) /* CU_MEM_ATTACH_GLOBAL, CU_MEM_ATTACH_HOST */
        return CUDA_ERROR_INVALID_VALUE;
    return mem_alloc(K_MANAGED, dptr, bytes);
}
EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    LOCKED(mem_alloc_managed(dptr, bytesize, flags));
}

static CUresult mem_free(CUdeviceptr p)
{
    struct alloc *a = find(p, KM_FREEABLE);
    if (!a)
        return CUDA_ERROR_INVALID_VALUE;
    free_any(a);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) { LOCKED(mem_free(dptr)); }

static CUresult mem_range(CUdeviceptr *pbase, size_t *psize, CUdeviceptr p)
{
    if (!pbase && !psize)
        return CUDA_ERROR_INVALID_VALUE;
    for (struct alloc *a = g_all.next; a != &g_all; a = a->next) {
        if ((KM(a->kind) & KM_FREEABLE) && p >= a->key && p - a->key < a->size) {
            if (pbase)
                *pbase = a->key;
            if (psize)
                *psize = a->size;
            return CUDA_SUCCESS;
        }
    }
    for (struct mapping *m = g_maps; m; m = m->next) {
        if (p >= m->va && p - m->va < m->size) {
            if (pbase)
                *pbase = m->va;
            if (psize)
                *psize = m->size;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_NOT_FOUND;
}
EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    LOCKED(mem_range(pbase, psize, dptr));
}

/* ------------------------------------------------------- pinned host memory */

/* Pinned host memory is not device memory: nothing is charged. */
static CUresult host_register(void *p, size_t bytes, unsigned flags)
{
    unsigned known = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                     CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;
    uintptr_t lo = (uintptr_t)p;
    if (!p || bytes == 0 || bytes > UINTPTR_MAX - lo || (flags & ~known))
        return CUDA_ERROR_INVALID_VALUE;
    struct ctx *c = cur_ctx();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (g_no_host_register)
        return CUDA_ERROR_NOT_SUPPORTED;
    struct hostreg *slot = NULL;
    for (int i = 0; i < MAX_HOSTREGS; i++) {
        struct hostreg *r = &g_hostregs[i];
        if (!r->alive)
            slot = slot ? slot : r;
        else if (r->lo < lo + bytes && lo < r->hi)
            return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    }
    if (!slot)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *slot = (struct hostreg){.alive = true, .lo = lo, .hi = lo + bytes, .ctx = c,
                             .portable = flags & CU_MEMHOSTREGISTER_PORTABLE,
                             .devicemap = flags & CU_MEMHOSTREGISTER_DEVICEMAP};
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    LOCKED(host_register(p, bytesize, Flags));
}
EXPORT CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)
{
    LOCKED(host_register(p, bytesize, Flags));
}

/* By the address that was registered, as the real driver. */
static CUresult host_unregister(void *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    if (!cur_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    for (int i = 0; i < MAX_HOSTREGS; i++) {
        if (g_hostregs[i].alive && g_hostregs[i].lo == (uintptr_t)p) {
            hostreg_drop(&g_hostregs[i]);
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}
EXPORT CUresult cuMemHostUnregister(void *p) { LOCKED(host_unregister(p)); }

/* The host address itself, as the real driver with unified addressing. */
static CUresult host_device_pointer(CUdeviceptr *pdptr, void *p, unsigned flags)
{
    if (!pdptr || !p || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct ctx *c = cur_ctx();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    const struct hostreg *r = hostreg_find((uintptr_t)p, 1, c);
    if (!r || !r->devicemap)
        return CUDA_ERROR_INVALID_VALUE;
    *pdptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    LOCKED(host_device_pointer(pdptr, p, Flags));
}
/* The legacy 32-bit pointer variant: no host address fits in it. */
EXPORT CUresult cuMemHostGetDevicePointer(CUdeviceptr_v1 *pdptr, void *p, unsigned int Flags)
{
    (void)pdptr, (void)p, (void)Flags;
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* ------------------------------------------------------------------ VMM */

static CUresult check_prop(const CUmemAllocationProp *prop)
{
    if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    return card_of(prop->location.id) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

static CUresult vmm_create(CUmemGenericAllocationHandle *handle, size_t size,
                           const CUmemAllocationProp *prop, unsigned long long flags)
{
    if (!handle || size == 0 || size % GRANULARITY || flags)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = check_prop(prop);
    if (rc)
        return rc;
    int dev = prop->location.id;
    if ((rc = charge(dev, size)))
        return rc;
    unsigned long long key = g_next_handle;
    g_next_handle += 0x10;
    struct alloc *a = add_entry(key, K_VMM, dev, size);
    if (!a) {
        uncharge(dev, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->charged = size;
    a->refs = 1;
    *handle = key;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                            const CUmemAllocationProp *prop, unsigned long long flags)
{
    LOCKED(vmm_create(handle, size, prop, flags));
}

static void vmm_unref(struct alloc *a)
{
    if (--a->refs == 0)
        drop_entry(a);
}

static CUresult vmm_release(CUmemGenericAllocationHandle handle)
{
    struct alloc *a = find(handle, KM(K_VMM));
    if (!a || a->released)
        return CUDA_ERROR_INVALID_VALUE;
    a->released = true;
    vmm_unref(a);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) { LOCKED(vmm_release(handle)); }

static CUresult va_reserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                           unsigned long long flags)
{
    (void)addr; /* a hint only, as for the real driver */
    if (!ptr || size == 0 || size % GRANULARITY || flags ||
        (alignment & (alignment - 1)))
        return CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr va;
    CUresult rc = va_alloc(VA_RESERVE_REGION, size, alignment, &va);
    if (rc)
        return rc;
    struct alloc *a = add_entry(va, K_RESERVE, -1, size);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    a->span = size;
    *ptr = va;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                    CUdeviceptr addr, unsigned long long flags)
{
    LOCKED(va_reserve(ptr, size, alignment, addr, flags));
}

static CUresult va_free(CUdeviceptr ptr, size_t size)
{
    struct alloc *a = find(ptr, KM(K_RESERVE));
    if (!a || a->size != size)
        return CUDA_ERROR_INVALID_VALUE;
    for (struct mapping *m = g_maps; m; m = m->next)
        if (m->va >= ptr && m->va - ptr < size)
            return CUDA_ERROR_INVALID_VALUE; /* still mapped */
    drop_entry(a);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) { LOCKED(va_free(ptr, size)); }

static struct alloc *reservation_of(CUdeviceptr ptr, uint64_t size)
{
    for (struct alloc *a = g_all.next; a != &g_all; a = a->next)
        if (a->kind == K_RESERVE && ptr >= a->key && ptr - a->key < a->size &&
            size <= a->size - (ptr - a->key))
            return a;
    return NULL;
}

static CUresult vmm_map(CUdeviceptr ptr, size_t size, size_t offset,
                        CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    if (size == 0 || flags || ptr % GRANULARITY || size % GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    struct alloc *h = find(handle, KM(K_VMM));
    if (!h || h->released || offset > h->size || size > h->size - offset)
        return CUDA_ERROR_INVALID_VALUE;
    if (!reservation_of(ptr, size))
        return CUDA_ERROR_INVALID_VALUE;
    for (struct mapping *m = g_maps; m; m = m->next)
        if (m->va < ptr + size && ptr < m->va + m->size)
            return CUDA_ERROR_INVALID_VALUE; /* already mapped */
    struct mapping *m = calloc(1, sizeof(*m));
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    m->va = ptr;
    m->size = size;
    m->handle = h;
    m->next = g_maps;
    g_maps = m;
    h->refs++;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                         CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    LOCKED(vmm_map(ptr, size, offset, handle, flags));
}

/* Unmaps every mapping inside [ptr, ptr + size); one cut in half is refused. */
static CUresult vmm_unmap(CUdeviceptr ptr, size_t size)
{
    if (size == 0 || ptr + size < ptr)
        return CUDA_ERROR_INVALID_VALUE;
    bool any = false;
    for (struct mapping *m = g_maps; m; m = m->next) {
        if (m->va < ptr + size && ptr < m->va + m->size) {
            if (m->va < ptr || m->va + m->size > ptr + size)
                return CUDA_ERROR_INVALID_VALUE;
            any = true;
        }
    }
    if (!any)
        return CUDA_ERROR_INVALID_VALUE;
    for (struct mapping **pp = &g_maps; *pp;) {
        struct mapping *m = *pp;
        if (m->va >= ptr && m->va + m->size <= ptr + size) {
            *pp = m->next;
            vmm_unref(m->handle);
            free(m);
        } else {
            pp = &m->next;
        }
    }
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) { LOCKED(vmm_unmap(ptr, size)); }

static CUresult vmm_set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                               size_t count)
{
    if (!desc || count == 0 || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE)
            return CUDA_ERROR_INVALID_VALUE;
        if (!card_of(desc[i].location.id))
            return CUDA_ERROR_INVALID_DEVICE;
    }
    /* Every byte of the range must be mapped. */
    CUdeviceptr p = ptr, end = ptr + size;
    while (p < end) {
        struct mapping *hit = NULL;
        for (struct mapping *m = g_maps; m && !hit; m = m->next)
            if (p >= m->va && p < m->va + m->size)
                hit = m;
        if (!hit)
            return CUDA_ERROR_INVALID_VALUE;
        p = hit->va + hit->size;
    }
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                               size_t count)
{
    LOCKED(vmm_set_access(ptr, size, desc, count));
}

static CUresult vmm_granularity(size_t *granularity, const CUmemAllocationProp *prop,
                                CUmemAllocationGranularity_flags option)
{
    if (!granularity || (option != 0 && option != 1))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = check_prop(prop);
    if (rc)
        return rc;
    *granularity = GRANULARITY;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemGetAllocationGranularity(size_t *granularity,
                                              const CUmemAllocationProp *prop,
                                              CUmemAllocationGranularity_flags option)
{
    LOCKED(vmm_granularity(granularity, prop, option));
}

/* ---------------------------------------------------------------- pools */

static CUresult default_pool(CUmemoryPool *pool_out, CUdevice dev)
{
    if (!pool_out)
        return CUDA_ERROR_INVALID_VALUE;
    if (!card_of(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *pool_out = (CUmemoryPool)&g_pools[dev];
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    LOCKED(default_pool(pool_out, dev));
}

/* The pool cuMemAllocAsync draws from; no cuDeviceSetMemPool here, so the default. */
EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    LOCKED(default_pool(pool_out, dev));
}

static CUresult pool_create(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    if (!pool || !props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (!card_of(props->location.id))
        return CUDA_ERROR_INVALID_DEVICE;
    for (int i = FAKEGPUS_MAX_GPUS; i < MAX_POOLS; i++) {
        struct pool *p = &g_pools[i];
        if (!p->alive && p->outstanding == 0) {
            memset(p, 0, sizeof(*p));
            p->alive = true;
            p->dev = props->location.id;
            *pool = (CUmemoryPool)p;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_OUT_OF_MEMORY;
}
EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
    LOCKED(pool_create(pool, poolProps));
}

static CUresult pool_destroy(CUmemoryPool h)
{
    struct pool *p = pool_of(h);
    if (!p || p->is_default)
        return CUDA_ERROR_INVALID_VALUE;
    p->alive = false;
    pool_shrink_to(p, 0);
    if (p->outstanding == 0) {
        uncharge(p->dev, p->reserved);
        p->reserved = 0;
    }
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) { LOCKED(pool_destroy(pool)); }

static CUresult pool_trim(CUmemoryPool h, size_t keep)
{
    struct pool *p = pool_of(h);
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    pool_shrink_to(p, keep);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    LOCKED(pool_trim(pool, minBytesToKeep));
}

static CUresult pool_attr(CUmemoryPool h, CUmemPool_attribute attr, void *value, bool set)
{
    struct pool *p = pool_of(h);
    if (!p || !value)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t *u64 = NULL;
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        if (set)
            p->reuse[attr] = *(int *)value != 0;
        else
            *(int *)value = p->reuse[attr];
        return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        if (set)
            p->threshold = *(cuuint64_t *)value;
        else
            *(cuuint64_t *)value = p->threshold;
        return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
        if (set)
            return CUDA_ERROR_INVALID_VALUE;
        *(cuuint64_t *)value = attr == CU_MEMPOOL_ATTR_USED_MEM_CURRENT ? p->used : p->reserved;
        return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        u64 = &p->reserved_high;
        break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        u64 = &p->used_high;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!set) {
        *(cuuint64_t *)value = *u64;
        return CUDA_SUCCESS;
    }
    if (*(cuuint64_t *)value != 0) /* only a reset to zero is allowed */
        return CUDA_ERROR_INVALID_VALUE;
    *u64 = attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH ? p->used : p->reserved;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    LOCKED(pool_attr(pool, attr, value, false));
}
EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    LOCKED(pool_attr(pool, attr, value, true));
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t bytes, CUmemoryPool h, bool from_pool,
                            CUstream stream)
{
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    struct ctx *c;
    CUresult rc = stream_ctx(stream, &c);
    if (rc)
        return rc;
    struct pool *p = from_pool ? pool_of(h) : &g_pools[c->dev];
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    bool ok;
    struct stream *s = stream_of(stream, &ok);
    if (s && s->capturing) /* a memory alloc node: memory when the graph runs */
        return graph_add_alloc(s->graph, p->dev, bytes, NULL, dptr);
    return pool_alloc(p, bytes, dptr);
}
EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    LOCKED(alloc_async(dptr, bytesize, NULL, false, hStream));
}
EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    LOCKED(alloc_async(dptr, bytesize, NULL, false, hStream));
}
EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                        CUstream hStream)
{
    LOCKED(alloc_async(dptr, bytesize, pool, true, hStream));
}
EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
                                             CUmemoryPool pool, CUstream hStream)
{
    LOCKED(alloc_async(dptr, bytesize, pool, true, hStream));
}

static CUresult free_async(CUdeviceptr p, CUstream stream)
{
    bool ok;
    struct stream *s = stream_of(stream, &ok);
    if (!ok)
        return CUDA_ERROR_INVALID_HANDLE;
    if (s && s->capturing) { /* a memory free node */
        struct gnode *n = graph_add(s->graph, CU_GRAPH_NODE_TYPE_MEM_FREE);
        if (!n)
            return CUDA_ERROR_OUT_OF_MEMORY;
        n->dptr = p;
        return CUDA_SUCCESS;
    }
    return mem_free(p);
}
EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    LOCKED(free_async(dptr, hStream));
}
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    LOCKED(free_async(dptr, hStream));
}

/* -------------------------------------------------------------- streams */

static CUresult stream_create(CUstream *ph, unsigned flags)
{
    if (!ph || flags > 1)
        return CUDA_ERROR_INVALID_VALUE;
    struct ctx *c = cur_ctx();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    /* A free slot, one whose destroyed stream waits at no gate if any. */
    struct stream *s = NULL;
    for (int i = 0; i < MAX_STREAMS && (!s || s->tl.gate); i++)
        if (!g_streams[i].alive && (!s || !g_streams[i].tl.gate))
            s = &g_streams[i];
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (s->tl.gate) /* reused at last: its gate opens, so nothing waits for it forever */
        gate_open(s->ctx, &s->tl, now_ns());
    s->alive = true;
    s->capturing = false;
    s->ctx = c;
    s->tl = (struct timeline){0};
    *ph = (CUstream)s;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    LOCKED(stream_create(phStream, Flags));
}

static CUresult stream_destroy(CUstream h)
{
    bool ok;
    struct stream *s = stream_of(h, &ok);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    s->alive = false;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamDestroy_v2(CUstream hStream) { LOCKED(stream_destroy(hStream)); }

static CUresult begin_capture(CUstream h)
{
    bool ok;
    struct stream *s = stream_of(h, &ok);
    if (!s) /* the default streams cannot be captured */
        return ok ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_ERROR_INVALID_HANDLE;
    if (s->capturing)
        return CUDA_ERROR_ILLEGAL_STATE;
    if (!(s->graph = graph_new()))
        return CUDA_ERROR_OUT_OF_MEMORY;
    s->capturing = true;
    if (g_capturing++ == 0)
        g_capture_invalidated = false;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamBeginCapture_v2(CUstream hStream, int mode)
{
    (void)mode; /* every mode is treated as global, the strictest */
    LOCKED(begin_capture(hStream));
}

static CUresult end_capture(CUstream h, CUgraph *graph)
{
    bool ok;
    struct stream *s = stream_of(h, &ok);
    if (!s || !graph)
        return !ok || !s ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_INVALID_VALUE;
    if (!s->capturing)
        return CUDA_ERROR_ILLEGAL_STATE;
    s->capturing = false;
    g_capturing--;
    *graph = (CUgraph)s->graph;
    if (g_capture_invalidated) {
        graph_free(s->graph);
        *graph = NULL;
    }
    s->graph = NULL;
    return g_capture_invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
}
EXPORT CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    LOCKED(end_capture(hStream, phGraph));
}

static CUresult is_capturing(CUstream h, int *status)
{
    bool ok;
    struct stream *s = stream_of(h, &ok);
    if (!ok || !status)
        return !ok ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_INVALID_VALUE;
    *status = s && s->capturing ? 1 : 0; /* CU_STREAM_CAPTURE_STATUS_ACTIVE : NONE */
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamIsCapturing(CUstream hStream, int *captureStatus)
{
    LOCKED(is_capturing(hStream, captureStatus));
}
EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream hStream, int *captureStatus)
{
    LOCKED(is_capturing(hStream, captureStatus));
}
EXPORT CUresult cuStreamDestroy(CUstream hStream) { LOCKED(stream_destroy(hStream)); }

static CUresult stream_sync(CUstream h, uint64_t *until, bool *closed)
{
    struct ctx *c;
    struct timeline *t;
    CUresult rc = stream_timeline(h, &c, &t);
    if (rc)
        return rc;
    unsafe_during_capture();
    pools_sync();
    *closed = gate_closed(c, t);
    *until = t->done_ns;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamSynchronize(CUstream hStream)
{
    uint64_t until = 0;
    bool closed;
    LOCKED_WAIT(stream_sync(hStream, &until, &closed), until, closed);
}
EXPORT CUresult cuStreamSynchronize_ptsz(CUstream hStream)
{
    uint64_t until = 0;
    bool closed;
    LOCKED_WAIT(stream_sync(hStream, &until, &closed), until, closed);
}

/* Done when a sync would not wait: no gate holds the stream, its timeline ran out. */
static CUresult stream_query(CUstream h)
{
    uint64_t until = 0;
    bool closed;
    CUresult rc = stream_sync(h, &until, &closed);
    if (rc)
        return rc;
    return !closed && now_ns() >= until ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
EXPORT CUresult cuStreamQuery(CUstream hStream) { LOCKED(stream_query(hStream)); }
EXPORT CUresult cuStreamQuery_ptsz(CUstream hStream) { LOCKED(stream_query(hStream)); }

/* A blocking copy: it runs on the default stream, after the work queued
 * before it, and returns once done. The fake's device addresses hold
 * nothing: the host gets zeros. Legacy and per-thread default streams both
 * wait for the whole context here (the legacy one does so for blocking
 * streams; this fake's streams are all blocking). */
static CUresult copy_wait(void *dst, size_t n, uint64_t *until, bool *closed)
{
    if (n && !dst)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = ctx_sync(until, closed);
    if (rc == CUDA_SUCCESS && !*closed && n)
        memset(dst, 0, n);
    return rc;
}
EXPORT CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t n)
{
    (void)srcDevice;
    uint64_t until = 0;
    bool closed;
    LOCKED_WAIT(copy_wait(dstHost, n, &until, &closed), until, closed);
}
EXPORT CUresult cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t n)
{
    (void)srcDevice;
    uint64_t until = 0;
    bool closed;
    LOCKED_WAIT(copy_wait(dstHost, n, &until, &closed), until, closed);
}
/* Unified addressing: the fake copies nothing between its addresses, it waits. */
EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    (void)dst, (void)src, (void)n;
    uint64_t until = 0;
    bool closed;
    LOCKED_WAIT(ctx_sync(&until, &closed), until, closed);
}
EXPORT CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    (void)dst, (void)src, (void)n;
    uint64_t until = 0;
    bool closed;
    LOCKED_WAIT(ctx_sync(&until, &closed), until, closed);
}

/* cuStreamWaitValue32: the stream's later work waits until the word meets
 * the condition. The fake can read only host memory registered with
 * DEVICEMAP (its device addresses hold nothing). One gate per timeline: a
 * second wait while it is closed must be implied by the first (the same
 * one, or GEQ on the same word with a value not behind the first's, which
 * it replaces); anything else is refused, as a limit of the fake. */
static CUresult wait_value(CUstream h, CUdeviceptr addr, cuuint32_t value, unsigned flags)
{
    struct ctx *c;
    struct timeline *t;
    CUresult rc = stream_timeline(h, &c, &t);
    if (rc)
        return rc;
    unsigned cond = flags & 0x3u;
    const struct hostreg *r = hostreg_find((uintptr_t)addr, sizeof(uint32_t), c);
    if ((flags & ~(0x3u | CU_STREAM_WAIT_VALUE_FLUSH)) || addr % sizeof(uint32_t) || !r ||
        !r->devicemap)
        return CUDA_ERROR_INVALID_VALUE;
    bool ok;
    struct stream *s = stream_of(h, &ok);
    if (s && s->capturing) /* the fake's graphs have no memory-operation nodes */
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    const uint32_t *word = (const uint32_t *)(uintptr_t)addr;
    if (gate_closed(c, t)) {
        bool implied = word == t->word && cond == t->cond &&
                       (value == t->value || (cond == CU_STREAM_WAIT_VALUE_GEQ &&
                                              (int32_t)(value - t->value) >= 0));
        if (!implied)
            return CUDA_ERROR_NOT_SUPPORTED;
        t->value = value;
    } else if (!wait_holds(word, value, cond)) {
        if (++g_gate_serial == 0) /* 0 means no gate */
            g_gate_serial = 1;
        *t = (struct timeline){.done_ns = t->done_ns, .gate = g_gate_serial, .cond = cond,
                               .word = word, .value = value, .earliest_ns = t->done_ns};
    }
    g_waits++;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamWaitValue32_v2(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                       unsigned int flags)
{
    LOCKED(wait_value(stream, addr, value, flags));
}
EXPORT CUresult cuStreamWaitValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                    unsigned int flags)
{
    LOCKED(wait_value(stream, addr, value, flags));
}
EXPORT CUresult cuStreamWaitValue32_v2_ptsz(CUstream stream, CUdeviceptr addr,
                                            cuuint32_t value, unsigned int flags)
{
    LOCKED(wait_value(stream, addr, value, flags));
}
EXPORT CUresult cuStreamWaitValue32_ptsz(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                         unsigned int flags)
{
    LOCKED(wait_value(stream, addr, value, flags));
}

/* --------------------------------------------------------------- arrays */

static unsigned format_bytes(int format)
{
    switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32: case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT: return 4;
    default: return 0;
    }
}

/* Bytes of one level: width * max(h,1) * max(d,1) * channels * element. */
static bool level_bytes(uint64_t w, uint64_t h, uint64_t d, unsigned ch, unsigned elem,
                        uint64_t *out)
{
    uint64_t v = w;
    return !__builtin_mul_overflow(v, h ? h : 1, &v) && !__builtin_mul_overflow(v, d ? d : 1, &v) &&
           !__builtin_mul_overflow(v, (uint64_t)ch * elem, &v) && (*out = v, true);
}

static CUresult array_create(void **handle, int kind, size_t w, size_t h, size_t d, int format,
                             unsigned ch, unsigned levels)
{
    unsigned elem = format_bytes(format);
    if (!handle || w == 0 || elem == 0 || (ch != 1 && ch != 2 && ch != 4) || levels == 0 ||
        (d && !h))
        return CUDA_ERROR_INVALID_VALUE;
    struct ctx *c = cur_ctx();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    /* At most 1 + floor(log2(largest extent)) levels, as the real driver. */
    uint64_t largest = w > h ? w : h;
    largest = largest > d ? largest : d;
    unsigned max_levels = 1;
    while (largest >>= 1)
        max_levels++;
    if (levels > max_levels)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t total = 0;
    for (unsigned l = 0; l < levels; l++) {
        uint64_t lw = w >> l, lh = h >> l, ld = d >> l, b;
        lw = lw ? lw : 1;
        lh = h ? (lh ? lh : 1) : 0;
        ld = d ? (ld ? ld : 1) : 0;
        if (!level_bytes(lw, lh, ld, ch, elem, &b) || __builtin_add_overflow(total, b, &total))
            return CUDA_ERROR_INVALID_VALUE;
    }
    return handle_entry(handle, kind, c, total);
}

EXPORT CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *desc)
{
    LOCKED(desc ? array_create((void **)pHandle, K_ARRAY, desc->Width, desc->Height, 0,
                               desc->Format, desc->NumChannels, 1)
                : CUDA_ERROR_INVALID_VALUE);
}
EXPORT CUresult cuArrayCreate(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR_v1 *desc)
{
    LOCKED(desc ? array_create((void **)pHandle, K_ARRAY, desc->Width, desc->Height, 0,
                               desc->Format, desc->NumChannels, 1)
                : CUDA_ERROR_INVALID_VALUE);
}
EXPORT CUresult cuArray3DCreate(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR_v1 *desc)
{
    LOCKED(desc ? array_create((void **)pHandle, K_ARRAY, desc->Width, desc->Height, desc->Depth,
                               desc->Format, desc->NumChannels, 1)
                : CUDA_ERROR_INVALID_VALUE);
}
/* The 32-bit pointer form: not usable on a 64-bit driver, as cuMemAlloc. */
EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch,
                                unsigned int WidthInBytes, unsigned int Height,
                                unsigned int ElementSizeBytes)
{
    (void)dptr, (void)pPitch, (void)WidthInBytes, (void)Height, (void)ElementSizeBytes;
    return CUDA_ERROR_NOT_SUPPORTED;
}
EXPORT CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc)
{
    LOCKED(desc ? array_create((void **)pHandle, K_ARRAY, desc->Width, desc->Height, desc->Depth,
                               desc->Format, desc->NumChannels, 1)
                : CUDA_ERROR_INVALID_VALUE);
}
EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle,
                                       const CUDA_ARRAY3D_DESCRIPTOR *desc,
                                       unsigned int numMipmapLevels)
{
    LOCKED(desc ? array_create((void **)pHandle, K_MIPMAP, desc->Width, desc->Height,
                               desc->Depth, desc->Format, desc->NumChannels, numMipmapLevels)
                : CUDA_ERROR_INVALID_VALUE);
}

static CUresult array_destroy(const void *h, int kind)
{
    struct alloc *a = find((unsigned long long)(uintptr_t)h, KM(kind));
    if (!a)
        return CUDA_ERROR_INVALID_HANDLE;
    drop_entry(a);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuArrayDestroy(CUarray hArray) { LOCKED(array_destroy(hArray, K_ARRAY)); }
EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray)
{
    LOCKED(array_destroy(hMipmappedArray, K_MIPMAP));
}

/* ---------------------------------------------------- modules, libraries */

/* A fake image is the text "globals=<bytes>[,code=<bytes>]": what its
 * globals take on the device, held from the load (eager, into the current
 * context) until the unload or the context's end; and its code, loaded into
 * the context at its next launch, as the real driver loads kernels lazily
 * (CUDA_MODULE_LOADING=LAZY, the default), held until the context's end.
 * Anything else is not an image. */
static CUresult module_load(void **handle, const char *image)
{
    struct ctx *c = cur_ctx();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    char *end;
    if (!handle || !image || strncmp(image, "globals=", 8) != 0)
        return CUDA_ERROR_INVALID_VALUE; /* CUDA_ERROR_INVALID_IMAGE in the real one */
    uint64_t globals = strtoull(image + 8, &end, 10), code = 0;
    if (!strncmp(end, ",code=", 6))
        code = strtoull(end + 6, &end, 10);
    if (*end && *end != '\n')
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = handle_entry(handle, K_MODULE, c, globals);
    if (rc == CUDA_SUCCESS)
        c->code_pending += code;
    return rc;
}

static CUresult module_load_file(void **handle, const char *path)
{
    char text[64] = {0};
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f)
        return CUDA_ERROR_NOT_FOUND; /* CUDA_ERROR_FILE_NOT_FOUND in the real one */
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    return module_load(handle, text);
}

static CUresult module_unload(const void *h)
{
    struct alloc *a = find((uintptr_t)h, KM(K_MODULE));
    if (!a)
        return CUDA_ERROR_INVALID_HANDLE;
    drop_entry(a);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    LOCKED(module_load_file((void **)module, fname));
}
EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    LOCKED(module_load((void **)module, image));
}
EXPORT CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                   int *options, void **optionValues)
{
    (void)numOptions, (void)options, (void)optionValues;
    LOCKED(module_load((void **)module, image));
}
EXPORT CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin)
{
    LOCKED(module_load((void **)module, fatCubin));
}
EXPORT CUresult cuModuleUnload(CUmodule hmod) { LOCKED(module_unload(hmod)); }
EXPORT CUresult cuLibraryLoadData(CUlibrary *library, const void *code, int *jitOptions,
                                  void **jitOptionsValues, unsigned int numJitOptions,
                                  int *libraryOptions, void **libraryOptionValues,
                                  unsigned int numLibraryOptions)
{
    (void)jitOptions, (void)jitOptionsValues, (void)numJitOptions, (void)libraryOptions;
    (void)libraryOptionValues, (void)numLibraryOptions;
    LOCKED(module_load((void **)library, code));
}
EXPORT CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *fileName, int *jitOptions,
                                      void **jitOptionsValues, unsigned int numJitOptions,
                                      int *libraryOptions, void **libraryOptionValues,
                                      unsigned int numLibraryOptions)
{
    (void)jitOptions, (void)jitOptionsValues, (void)numJitOptions, (void)libraryOptions;
    (void)libraryOptionValues, (void)numLibraryOptions;
    LOCKED(module_load_file((void **)library, fileName));
}
EXPORT CUresult cuLibraryUnload(CUlibrary library) { LOCKED(module_unload(library)); }

/* ------------------------------------------------------------- launches */

/* FAKECUDA_LAUNCH_BLOCK: the process's first launch (or its
 * FAKECUDA_LAUNCH_BLOCK_AT-th) waits, outside g_mu, until the file exists.
 * g_block_path and g_block_at are written once, at cuInit, before any
 * launch can be made. */
static void block_launch(void)
{
    if (!g_block_path[0] || __atomic_add_fetch(&g_launches_seen, 1, __ATOMIC_ACQ_REL) != g_block_at)
        return;
    char inside[sizeof g_block_path + 8];
    snprintf(inside, sizeof inside, "%s.inside", g_block_path);
    FILE *f = fopen(inside, "w");
    if (f)
        fclose(f);
    while (access(g_block_path, F_OK) != 0) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

/* Queues FAKECUDA_KERNEL_NS of work on the stream's timeline. */
static CUresult launch(CUstream stream)
{
    struct ctx *c;
    struct timeline *t;
    CUresult rc = stream_timeline(stream, &c, &t);
    if (rc)
        return rc;
    bool ok;
    struct stream *st = stream_of(stream, &ok);
    if (st && st->capturing) {
        g_captured++; /* into the graph: runs at cuGraphLaunch, not now */
        graph_add(st->graph, GN_KERNEL);
        return CUDA_SUCCESS;
    }
    if (c->code_pending) {
        if (charge(c->dev, c->code_pending) != CUDA_SUCCESS)
            return CUDA_ERROR_OUT_OF_MEMORY;
        c->code_bytes += c->code_pending;
        c->code_pending = 0;
    }
    if (!c->heap_resident && c->limits[2]) {
        uint64_t cost = limit_cost(c->limits, true);
        if (cost > c->limit_bytes && charge(c->dev, cost - c->limit_bytes) != CUDA_SUCCESS)
            return CUDA_ERROR_OUT_OF_MEMORY;
        c->limit_bytes = max_u64(cost, c->limit_bytes);
        c->heap_resident = true;
    }
    timeline_queue(c, t, g_kernel_ns);
    g_launches++;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                               unsigned int gridDimZ, unsigned int blockDimX,
                               unsigned int blockDimY, unsigned int blockDimZ,
                               unsigned int sharedMemBytes, CUstream hStream,
                               void **kernelParams, void **extra)
{
    (void)f, (void)gridDimX, (void)gridDimY, (void)gridDimZ, (void)blockDimX, (void)blockDimY;
    (void)blockDimZ, (void)sharedMemBytes, (void)kernelParams, (void)extra;
    block_launch();
    LOCKED(launch(hStream));
}
EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                    unsigned int gridDimZ, unsigned int blockDimX,
                                    unsigned int blockDimY, unsigned int blockDimZ,
                                    unsigned int sharedMemBytes, CUstream hStream,
                                    void **kernelParams, void **extra)
{
    (void)f, (void)gridDimX, (void)gridDimY, (void)gridDimZ, (void)blockDimX, (void)blockDimY;
    (void)blockDimZ, (void)sharedMemBytes, (void)kernelParams, (void)extra;
    block_launch();
    LOCKED(launch(hStream));
}
EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                 void **extra)
{
    (void)f, (void)kernelParams, (void)extra;
    block_launch();
    LOCKED(config ? launch(config->hStream) : CUDA_ERROR_INVALID_VALUE);
}
EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                                      void **kernelParams, void **extra)
{
    (void)f, (void)kernelParams, (void)extra;
    block_launch();
    LOCKED(config ? launch(config->hStream) : CUDA_ERROR_INVALID_VALUE);
}
EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX,
                                          unsigned int gridDimY, unsigned int gridDimZ,
                                          unsigned int blockDimX, unsigned int blockDimY,
                                          unsigned int blockDimZ, unsigned int sharedMemBytes,
                                          CUstream hStream, void **kernelParams)
{
    (void)f, (void)gridDimX, (void)gridDimY, (void)gridDimZ, (void)blockDimX, (void)blockDimY;
    (void)blockDimZ, (void)sharedMemBytes, (void)kernelParams;
    block_launch();
    LOCKED(launch(hStream));
}
EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX,
                                               unsigned int gridDimY, unsigned int gridDimZ,
                                               unsigned int blockDimX, unsigned int blockDimY,
                                               unsigned int blockDimZ,
                                               unsigned int sharedMemBytes, CUstream hStream,
                                               void **kernelParams)
{
    (void)f, (void)gridDimX, (void)gridDimY, (void)gridDimZ, (void)blockDimX, (void)blockDimY;
    (void)blockDimZ, (void)sharedMemBytes, (void)kernelParams;
    block_launch();
    LOCKED(launch(hStream));
}
/* A graph launch: an executable graph of ours gets its memory first (a
 * handle we did not make is launched as a plain kernel, as tests of the
 * pacer do with NULL). */
static CUresult graph_launch(CUgraphExec h, CUstream stream)
{
    struct fexec *e = exec_of(h);
    struct ctx *c;
    struct timeline *t;
    CUresult rc = stream_timeline(stream, &c, &t);
    if (rc == CUDA_SUCCESS && e)
        rc = exec_map(e);
    return rc ? rc : launch(stream);
}
EXPORT CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    block_launch();
    LOCKED(graph_launch(hGraphExec, hStream));
}
EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    block_launch();
    LOCKED(graph_launch(hGraphExec, hStream));
}


/* ------------------------------------------------------- graph building */

static CUresult graph_create(CUgraph *ph, unsigned flags)
{
    if (!ph || flags)
        return CUDA_ERROR_INVALID_VALUE;
    struct fgraph *g = graph_new();
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *ph = (CUgraph)g;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
    LOCKED(graph_create(phGraph, flags));
}

static CUresult graph_destroy(CUgraph h)
{
    struct fgraph *g = graph_of(h);
    if (!g)
        return CUDA_ERROR_INVALID_VALUE;
    graph_free(g);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuGraphDestroy(CUgraph hGraph) { LOCKED(graph_destroy(hGraph)); }

static CUresult add_alloc_node(CUgraphNode *ph, CUgraph h, CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
    struct fgraph *g = graph_of(h);
    if (!g || !ph || !p || p->poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    return graph_add_alloc(g, p->poolProps.location.id, p->bytesize, ph, &p->dptr);
}
EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                       const CUgraphNode *dependencies, size_t numDependencies,
                                       CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams)
{
    (void)dependencies, (void)numDependencies; /* order is not modelled */
    LOCKED(add_alloc_node(phGraphNode, hGraph, nodeParams));
}

static CUresult add_node(CUgraphNode *ph, CUgraph h, int type, CUdeviceptr dptr, CUgraph child)
{
    struct fgraph *g = graph_of(h), *c = NULL;
    if (!g || !ph || (type == CU_GRAPH_NODE_TYPE_GRAPH && !graph_of(child)))
        return CUDA_ERROR_INVALID_VALUE;
    if (type == CU_GRAPH_NODE_TYPE_GRAPH && !(c = graph_clone(graph_of(child))))
        return CUDA_ERROR_OUT_OF_MEMORY; /* the child is cloned, as the driver does */
    struct gnode *n = graph_add(g, type);
    if (!n) {
        if (c)
            graph_free(c);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    n->dptr = dptr;
    n->child = c;
    *ph = (CUgraphNode)n;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuGraphAddMemFreeNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                      const CUgraphNode *dependencies, size_t numDependencies,
                                      CUdeviceptr dptr)
{
    (void)dependencies, (void)numDependencies;
    LOCKED(add_node(phGraphNode, hGraph, CU_GRAPH_NODE_TYPE_MEM_FREE, dptr, NULL));
}
EXPORT CUresult cuGraphAddEmptyNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                    const CUgraphNode *dependencies, size_t numDependencies)
{
    (void)dependencies, (void)numDependencies;
    LOCKED(add_node(phGraphNode, hGraph, GN_EMPTY, 0, NULL));
}
EXPORT CUresult cuGraphAddChildGraphNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                         const CUgraphNode *dependencies,
                                         size_t numDependencies, CUgraph childGraph)
{
    (void)dependencies, (void)numDependencies;
    LOCKED(add_node(phGraphNode, hGraph, CU_GRAPH_NODE_TYPE_GRAPH, 0, childGraph));
}

static CUresult child_graph(CUgraphNode h, CUgraph *out)
{
    struct gnode *n = node_of(h);
    if (!n || !out || n->type != CU_GRAPH_NODE_TYPE_GRAPH)
        return CUDA_ERROR_INVALID_VALUE;
    *out = (CUgraph)n->child;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode hNode, CUgraph *phGraph)
{
    LOCKED(child_graph(hNode, phGraph));
}

static CUresult get_nodes(CUgraph h, CUgraphNode *nodes, size_t *num)
{
    struct fgraph *g = graph_of(h);
    if (!g || !num)
        return CUDA_ERROR_INVALID_VALUE;
    if (nodes) {
        for (size_t i = 0; i < *num; i++)
            nodes[i] = i < g->n ? (CUgraphNode)&g->nodes[i] : NULL;
        if (*num > g->n)
            *num = g->n;
    } else {
        *num = g->n;
    }
    return CUDA_SUCCESS;
}
EXPORT CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
{
    LOCKED(get_nodes(hGraph, nodes, numNodes));
}

static CUresult node_type(CUgraphNode h, int *type)
{
    struct gnode *n = node_of(h);
    if (!n || !type)
        return CUDA_ERROR_INVALID_VALUE;
    *type = n->type;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuGraphNodeGetType(CUgraphNode hNode, int *type) { LOCKED(node_type(hNode, type)); }

static CUresult alloc_node_params(CUgraphNode h, CUDA_MEM_ALLOC_NODE_PARAMS *out)
{
    struct gnode *n = node_of(h);
    if (!n || !out || n->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC)
        return CUDA_ERROR_INVALID_VALUE;
    memset(out, 0, sizeof *out);
    out->poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    out->poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    out->poolProps.location.id = n->dev;
    out->bytesize = n->bytes;
    out->dptr = n->dptr;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuGraphMemAllocNodeGetParams(CUgraphNode hNode,
                                             CUDA_MEM_ALLOC_NODE_PARAMS *params_out)
{
    LOCKED(alloc_node_params(hNode, params_out));
}

/* ---------------------------------------------------- executable graphs */

static CUresult instantiate(CUgraphExec *ph, CUgraph h, unsigned long long flags,
                            CUstream upload)
{
    struct fgraph *g = graph_of(h);
    if (!g || !ph)
        return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < MAX_EXECS; i++) {
        struct fexec *e = &g_execs[i];
        if (e->alive)
            continue;
        memset(e, 0, sizeof *e);
        graph_bytes(g, e->bytes);
        e->alive = true;
        if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) {
            bool ok;
            stream_of(upload, &ok);
            CUresult rc = ok ? exec_map(e) : CUDA_ERROR_INVALID_HANDLE;
            if (rc) {
                e->alive = false;
                return rc;
            }
        }
        *ph = (CUgraphExec)e;
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_OUT_OF_MEMORY;
}
EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                            unsigned long long flags)
{
    LOCKED(instantiate(phGraphExec, hGraph, flags & ~(unsigned long long)CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD, NULL));
}
/* The CUDA 10/11 form (cuGraphInstantiate and _v2 export it). */
EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph,
                                      CUgraphNode *phErrorNode, char *logBuffer,
                                      size_t bufferSize)
{
    (void)phErrorNode, (void)logBuffer, (void)bufferSize;
    LOCKED(instantiate(phGraphExec, hGraph, 0, NULL));
}
EXPORT CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph,
                                   CUgraphNode *phErrorNode, char *logBuffer, size_t bufferSize)
{
    (void)phErrorNode, (void)logBuffer, (void)bufferSize;
    LOCKED(instantiate(phGraphExec, hGraph, 0, NULL));
}
static CUresult instantiate_params(CUgraphExec *ph, CUgraph h, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = instantiate(ph, h, p->flags, p->hUploadStream);
    p->result_out = rc == CUDA_SUCCESS ? 0 : 1; /* CUDA_GRAPH_INSTANTIATE_SUCCESS / _ERROR */
    p->hErrNode_out = NULL;
    return rc;
}
EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
                                             CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    LOCKED(instantiate_params(phGraphExec, hGraph, params));
}
EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                  CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    LOCKED(instantiate_params(phGraphExec, hGraph, params));
}

static CUresult exec_destroy(CUgraphExec h)
{
    struct fexec *e = exec_of(h);
    if (!e)
        return CUDA_ERROR_INVALID_VALUE;
    if (e->mapped) /* stays in the pool, idle, until trimmed */
        for (int d = 0; d < g_ndev; d++)
            g_gpools[d].idle += e->bytes[d];
    e->alive = false;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuGraphExecDestroy(CUgraphExec hGraphExec) { LOCKED(exec_destroy(hGraphExec)); }

static CUresult upload(CUgraphExec h, CUstream stream)
{
    struct fexec *e = exec_of(h);
    bool ok;
    stream_of(stream, &ok);
    if (!e || !ok)
        return CUDA_ERROR_INVALID_VALUE;
    return exec_map(e);
}
EXPORT CUresult cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream)
{
    LOCKED(upload(hGraphExec, hStream));
}
EXPORT CUresult cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    LOCKED(upload(hGraphExec, hStream));
}

/* The exec takes the new graph's alloc nodes; a mapped one maps the growth
 * at once (the fake's choice: what a shim must expect of a driver). */
static CUresult exec_update(CUgraphExec h, CUgraph hg)
{
    struct fexec *e = exec_of(h);
    struct fgraph *g = graph_of(hg);
    if (!e || !g)
        return CUDA_ERROR_INVALID_VALUE;
    struct fexec next = {.alive = true};
    graph_bytes(g, next.bytes);
    if (e->mapped) {
        for (int d = 0; d < g_ndev; d++) {
            uint64_t grow = next.bytes[d] > e->bytes[d] ? next.bytes[d] - e->bytes[d] : 0;
            if (grow && charge(d, grow) != CUDA_SUCCESS) {
                while (d-- > 0) {
                    grow = next.bytes[d] > e->bytes[d] ? next.bytes[d] - e->bytes[d] : 0;
                    uncharge(d, grow);
                    g_gpools[d].reserved -= grow;
                }
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
            g_gpools[d].reserved += grow;
            if (e->bytes[d] > next.bytes[d])
                g_gpools[d].idle += e->bytes[d] - next.bytes[d];
        }
        next.mapped = true;
    }
    *e = next;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph, void *resultInfo)
{
    (void)resultInfo;
    LOCKED(exec_update(hGraphExec, hGraph));
}
EXPORT CUresult cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph,
                                  CUgraphNode *hErrorNode_out, int *updateResult_out)
{
    if (hErrorNode_out)
        *hErrorNode_out = NULL;
    if (updateResult_out)
        *updateResult_out = 0;
    LOCKED(exec_update(hGraphExec, hGraph));
}

/* Trim: the idle memory goes, and the mappings of every executable graph
 * (none runs while the fake's lock is held); they map again at launch. */
static CUresult graph_trim(CUdevice dev)
{
    if (!card_of(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    struct graphpool *gp = &g_gpools[dev];
    uncharge(dev, gp->reserved);
    gp->reserved = gp->idle = 0;
    for (int i = 0; i < MAX_EXECS; i++) {
        struct fexec *e = &g_execs[i];
        if (!e->alive || !e->mapped)
            continue;
        for (int d = 0; d < g_ndev; d++)
            if (d != dev && e->bytes[d]) /* still mapped elsewhere: kept there as idle */
                g_gpools[d].idle += e->bytes[d];
        e->mapped = false;
    }
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGraphMemTrim(CUdevice device) { LOCKED(graph_trim(device)); }

static CUresult graph_mem_attr(CUdevice dev, int attr, void *value, bool set)
{
    if (!card_of(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    struct graphpool *gp = &g_gpools[dev];
    uint64_t *v = value;
    if (set) { /* only the high marks, and only back to the current value */
        if (*v != 0)
            return CUDA_ERROR_INVALID_VALUE;
        if (attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH)
            gp->used_high = gpool_used(dev);
        else if (attr == CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH)
            gp->reserved_high = gp->reserved;
        else
            return CUDA_ERROR_INVALID_VALUE;
        return CUDA_SUCCESS;
    }
    switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT: *v = gpool_used(dev); break;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH: *v = gp->used_high; break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: *v = gp->reserved; break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: *v = gp->reserved_high; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetGraphMemAttribute(CUdevice device, int attr, void *value)
{
    LOCKED(graph_mem_attr(device, attr, value, false));
}
EXPORT CUresult cuDeviceSetGraphMemAttribute(CUdevice device, int attr, void *value)
{
    LOCKED(graph_mem_attr(device, attr, value, true));
}

/* --------------------------------------------------------------- events */

static struct event *event_of(CUevent h)
{
    uintptr_t p = (uintptr_t)h, base = (uintptr_t)g_events;
    if (p < base || p >= base + sizeof(g_events) || (p - base) % sizeof(struct event))
        return NULL;
    struct event *e = (struct event *)h;
    return e->alive && e->ctx->alive ? e : NULL;
}

static CUresult event_create(CUevent *ph, unsigned flags)
{
    unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
    if (!ph || (flags & ~known) ||
        ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING)))
        return CUDA_ERROR_INVALID_VALUE;
    struct ctx *c = cur_ctx();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    /* Round robin, so that a destroyed handle is not at once a live one. */
    for (unsigned k = 0; k < MAX_EVENTS; k++) {
        struct event *e = &g_events[(g_next_event + k) % MAX_EVENTS];
        if (!e->alive) {
            *e = (struct event){.alive = true, .flags = flags, .ctx = c};
            g_next_event = (unsigned)(e - g_events + 1) % MAX_EVENTS;
            *ph = (CUevent)e;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_OUT_OF_MEMORY;
}
EXPORT CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    LOCKED(event_create(phEvent, Flags));
}

static CUresult event_destroy(CUevent h)
{
    struct event *e = event_of(h);
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    e->alive = false;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventDestroy(CUevent hEvent) { LOCKED(event_destroy(hEvent)); }
EXPORT CUresult cuEventDestroy_v2(CUevent hEvent) { LOCKED(event_destroy(hEvent)); }

/* The event completes when the work queued on the stream so far has. */
static CUresult event_record(CUevent h, CUstream stream, unsigned flags)
{
    struct event *e = event_of(h);
    if (!e || (flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL))
        return e ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
    struct ctx *c;
    struct timeline *t;
    CUresult rc = stream_timeline(stream, &c, &t);
    if (rc)
        return rc;
    if (c != e->ctx) /* as the real driver: event and stream of one context */
        return CUDA_ERROR_INVALID_HANDLE;
    e->recorded = true;
    e->gate = 0;
    if (gate_closed(c, t)) { /* stamped when the gate opens */
        e->gate = t->gate;
        e->tl = t;
        e->behind_ns = t->behind_ns;
        return CUDA_SUCCESS;
    }
    e->stamp_ns = max_u64(now_ns(), t->done_ns);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
    LOCKED(event_record(hEvent, hStream, 0));
}
EXPORT CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
    LOCKED(event_record(hEvent, hStream, 0));
}
EXPORT CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)
{
    LOCKED(event_record(hEvent, hStream, flags));
}
EXPORT CUresult cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream,
                                            unsigned int flags)
{
    LOCKED(event_record(hEvent, hStream, flags));
}

/* A never-recorded event counts as complete, as with the real driver; one
 * behind a closed gate does not. The clock is read after event_pending,
 * which may open the gate. */
static bool event_done(const struct event *e, uint64_t now)
{
    return !e->recorded || (!e->gate && now >= e->stamp_ns);
}

static CUresult event_query(CUevent h)
{
    struct event *e = event_of(h);
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    unsafe_during_capture();
    event_pending(e);
    return event_done(e, now_ns()) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
EXPORT CUresult cuEventQuery(CUevent hEvent) { LOCKED(event_query(hEvent)); }

static CUresult event_sync(CUevent h, uint64_t *until, bool *closed)
{
    struct event *e = event_of(h);
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    unsafe_during_capture();
    *closed = event_pending(e);
    *until = e->recorded ? e->stamp_ns : 0;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventSynchronize(CUevent hEvent)
{
    uint64_t until = 0;
    bool closed;
    LOCKED_WAIT(event_sync(hEvent, &until, &closed), until, closed);
}

/* The real driver's order: bad handles, then timing disabled or never
 * recorded (both INVALID_HANDLE), then not yet complete. */
static CUresult event_elapsed(float *ms, CUevent start, CUevent end)
{
    if (!ms)
        return CUDA_ERROR_INVALID_VALUE;
    struct event *a = event_of(start), *b = event_of(end);
    if (!a || !b)
        return CUDA_ERROR_INVALID_HANDLE;
    if (((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) || !a->recorded || !b->recorded)
        return CUDA_ERROR_INVALID_HANDLE;
    event_pending(a);
    event_pending(b);
    uint64_t now = now_ns();
    if (!event_done(a, now) || !event_done(b, now))
        return CUDA_ERROR_NOT_READY;
    /* Signed: end recorded before start gives a negative time. */
    double d = b->stamp_ns >= a->stamp_ns ? (double)(b->stamp_ns - a->stamp_ns)
                                          : -(double)(a->stamp_ns - b->stamp_ns);
    *ms = (float)(d / 1e6);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    LOCKED(event_elapsed(pMilliseconds, hStart, hEnd));
}
EXPORT CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    LOCKED(event_elapsed(pMilliseconds, hStart, hEnd));
}

/* --------------------------------------------------------------- errors */

static const struct {
    CUresult code;
    const char *name, *text;
} g_errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
     "part or all of the requested memory range is already mapped"},
    {CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
     "pointer does not correspond to a registered memory region"},
    {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE",
     "the operation is not permitted in this state"},
    {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "operation not permitted when stream is capturing"},
    {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
     "operation failed due to a previous error during capture"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static CUresult error_text(CUresult error, const char **pStr, bool name)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof(g_errors) / sizeof(g_errors[0]); i++) {
        if (g_errors[i].code == error) {
            *pStr = name ? g_errors[i].name : g_errors[i].text;
            return CUDA_SUCCESS;
        }
    }
    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}
EXPORT CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    return error_text(error, pStr, false);
}
EXPORT CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    return error_text(error, pStr, true);
}

/* ------------------------------------------------------------ test hooks */

/* What the "driver" holds on CUDA device `ordinal`, as NVML would see it. */
EXPORT int fakecuda_used_bytes(int ordinal, unsigned long long *out)
{
    int rc = -1;
    pthread_mutex_lock(&g_mu);
    if (g_ready && out && card_of(ordinal)) {
        *out = g_cards[ordinal].used;
        rc = 0;
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

/* Kernel and graph launches so far, all kinds together. */
EXPORT unsigned long long fakecuda_captured_count(void)
{
    pthread_mutex_lock(&g_mu);
    unsigned long long n = g_captured;
    pthread_mutex_unlock(&g_mu);
    return n;
}

EXPORT unsigned long long fakecuda_launch_count(void)
{
    pthread_mutex_lock(&g_mu);
    unsigned long long n = g_launches;
    pthread_mutex_unlock(&g_mu);
    return n;
}

/* Stream waits queued (cuStreamWaitValue32, all variants), refused ones not
 * counted: whether a program set gates. */
EXPORT unsigned long long fakecuda_wait_count(void)
{
    pthread_mutex_lock(&g_mu);
    unsigned long long n = g_waits;
    pthread_mutex_unlock(&g_mu);
    return n;
}

/* ------------------------------------------------------ cuGetProcAddress */

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                 cuuint64_t flags);
EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                    cuuint64_t flags, CUdriverProcAddressQueryResult *status);

/*
 * Every variant cuGetProcAddress hands out: X(base symbol, the CUDA version
 * that introduced this variant, the exported function, stream mode). Mode N
 * is the default/legacy-stream variant, P the per-thread-stream one (_ptsz).
 * The versions are those of the toolkit's cudaTypedefs.h PFN names.
 */
#define FAKECUDA_PROCS(X)                                              \
    X(cuInit, 2000, cuInit, N)                                         \
    X(cuDriverGetVersion, 2020, cuDriverGetVersion, N)                 \
    X(cuDeviceGet, 2000, cuDeviceGet, N)                               \
    X(cuDeviceGetCount, 2000, cuDeviceGetCount, N)                     \
    X(cuDeviceGetName, 2000, cuDeviceGetName, N)                       \
    X(cuDeviceGetUuid, 9020, cuDeviceGetUuid, N)                       \
    X(cuDeviceGetUuid, 11040, cuDeviceGetUuid_v2, N)                   \
    X(cuDeviceTotalMem, 2000, cuDeviceTotalMem, N)                     \
    X(cuDeviceTotalMem, 3020, cuDeviceTotalMem_v2, N)                  \
    X(cuDeviceGetAttribute, 2000, cuDeviceGetAttribute, N)             \
    X(cuDevicePrimaryCtxRetain, 7000, cuDevicePrimaryCtxRetain, N)     \
    X(cuDevicePrimaryCtxRelease, 7000, cuDevicePrimaryCtxRelease, N)   \
    X(cuDevicePrimaryCtxRelease, 11000, cuDevicePrimaryCtxRelease_v2, N) \
    X(cuCtxCreate, 2000, cuCtxCreate, N)                               \
    X(cuCtxCreate, 3020, cuCtxCreate_v2, N)                            \
    X(cuCtxCreate, 11040, cuCtxCreate_v3, N)                           \
    X(cuCtxCreate, 12050, cuCtxCreate_v4, N)                           \
    X(cuCtxDestroy, 2000, cuCtxDestroy, N)                             \
    X(cuCtxDestroy, 4000, cuCtxDestroy_v2, N)                          \
    X(cuCtxSetCurrent, 4000, cuCtxSetCurrent, N)                       \
    X(cuGreenCtxCreate, 12040, cuGreenCtxCreate, N)                    \
    X(cuGLCtxCreate, 3020, cuGLCtxCreate_v2, N)                        \
    X(cuVDPAUCtxCreate, 3020, cuVDPAUCtxCreate_v2, N)                  \
    X(cuGreenCtxDestroy, 12040, cuGreenCtxDestroy, N)                  \
    X(cuCtxSetLimit, 3010, cuCtxSetLimit, N)                           \
    X(cuCtxGetLimit, 3010, cuCtxGetLimit, N)                           \
    X(cuCtxGetCurrent, 4000, cuCtxGetCurrent, N)                       \
    X(cuCtxGetDevice, 2000, cuCtxGetDevice, N)                         \
    X(cuCtxSynchronize, 2000, cuCtxSynchronize, N)                     \
    X(cuMemGetInfo, 3020, cuMemGetInfo_v2, N)                          \
    X(cuMemAlloc, 2000, cuMemAlloc, N)                                 \
    X(cuMemAlloc, 3020, cuMemAlloc_v2, N)                              \
    X(cuMemAllocPitch, 3020, cuMemAllocPitch_v2, N)                    \
    X(cuMemAllocManaged, 6000, cuMemAllocManaged, N)                   \
    X(cuMemFree, 3020, cuMemFree_v2, N)                                \
    X(cuMemGetAddressRange, 3020, cuMemGetAddressRange_v2, N)          \
    X(cuMemHostRegister, 4000, cuMemHostRegister, N)                   \
    X(cuMemHostRegister, 6050, cuMemHostRegister_v2, N)                \
    X(cuMemHostUnregister, 4000, cuMemHostUnregister, N)               \
    X(cuMemHostGetDevicePointer, 2020, cuMemHostGetDevicePointer, N)   \
    X(cuMemHostGetDevicePointer, 3020, cuMemHostGetDevicePointer_v2, N) \
    X(cuMemCreate, 10020, cuMemCreate, N)                              \
    X(cuMemRelease, 10020, cuMemRelease, N)                            \
    X(cuMemAddressReserve, 10020, cuMemAddressReserve, N)              \
    X(cuMemAddressFree, 10020, cuMemAddressFree, N)                    \
    X(cuMemMap, 10020, cuMemMap, N)                                    \
    X(cuMemUnmap, 10020, cuMemUnmap, N)                                \
    X(cuMemSetAccess, 10020, cuMemSetAccess, N)                        \
    X(cuMemGetAllocationGranularity, 10020, cuMemGetAllocationGranularity, N) \
    X(cuDeviceGetDefaultMemPool, 11020, cuDeviceGetDefaultMemPool, N)  \
    X(cuDeviceGetMemPool, 11020, cuDeviceGetMemPool, N)                \
    X(cuMemPoolCreate, 11020, cuMemPoolCreate, N)                      \
    X(cuMemPoolDestroy, 11020, cuMemPoolDestroy, N)                    \
    X(cuMemPoolTrimTo, 11020, cuMemPoolTrimTo, N)                      \
    X(cuMemPoolGetAttribute, 11020, cuMemPoolGetAttribute, N)          \
    X(cuMemPoolSetAttribute, 11020, cuMemPoolSetAttribute, N)          \
    X(cuMemAllocAsync, 11020, cuMemAllocAsync, N)                      \
    X(cuMemAllocAsync, 11020, cuMemAllocAsync_ptsz, P)                 \
    X(cuMemAllocFromPoolAsync, 11020, cuMemAllocFromPoolAsync, N)      \
    X(cuMemAllocFromPoolAsync, 11020, cuMemAllocFromPoolAsync_ptsz, P) \
    X(cuMemFreeAsync, 11020, cuMemFreeAsync, N)                        \
    X(cuMemFreeAsync, 11020, cuMemFreeAsync_ptsz, P)                   \
    X(cuStreamCreate, 2000, cuStreamCreate, N)                         \
    X(cuStreamBeginCapture, 10010, cuStreamBeginCapture_v2, N)         \
    X(cuStreamEndCapture, 10000, cuStreamEndCapture, N)                \
    X(cuStreamIsCapturing, 10000, cuStreamIsCapturing, N)              \
    X(cuStreamIsCapturing, 10000, cuStreamIsCapturing_ptsz, P)         \
    X(cuStreamDestroy, 2000, cuStreamDestroy, N)                       \
    X(cuStreamDestroy, 4000, cuStreamDestroy_v2, N)                    \
    X(cuStreamSynchronize, 2000, cuStreamSynchronize, N)               \
    X(cuStreamSynchronize, 7000, cuStreamSynchronize_ptsz, P)          \
    X(cuStreamQuery, 2000, cuStreamQuery, N)                           \
    X(cuStreamQuery, 7000, cuStreamQuery_ptsz, P)                      \
    X(cuMemcpyDtoH, 3020, cuMemcpyDtoH_v2, N)                          \
    X(cuMemcpyDtoH, 7000, cuMemcpyDtoH_v2_ptds, P)                     \
    X(cuMemcpy, 4000, cuMemcpy, N)                                     \
    X(cuMemcpy, 7000, cuMemcpy_ptds, P)                                \
    X(cuStreamWaitValue32, 8000, cuStreamWaitValue32, N)               \
    X(cuStreamWaitValue32, 8000, cuStreamWaitValue32_ptsz, P)          \
    X(cuStreamWaitValue32, 11070, cuStreamWaitValue32_v2, N)           \
    X(cuStreamWaitValue32, 11070, cuStreamWaitValue32_v2_ptsz, P)      \
    X(cuEventCreate, 2000, cuEventCreate, N)                           \
    X(cuEventDestroy, 2000, cuEventDestroy, N)                         \
    X(cuEventDestroy, 4000, cuEventDestroy_v2, N)                      \
    X(cuEventRecord, 2000, cuEventRecord, N)                           \
    X(cuEventRecord, 7000, cuEventRecord_ptsz, P)                      \
    X(cuEventRecordWithFlags, 11010, cuEventRecordWithFlags, N)        \
    X(cuEventRecordWithFlags, 11010, cuEventRecordWithFlags_ptsz, P)   \
    X(cuEventQuery, 2000, cuEventQuery, N)                             \
    X(cuEventSynchronize, 2000, cuEventSynchronize, N)                 \
    X(cuEventElapsedTime, 2000, cuEventElapsedTime, N)                 \
    X(cuEventElapsedTime, 12080, cuEventElapsedTime_v2, N)             \
    X(cuModuleLoad, 2000, cuModuleLoad, N)                             \
    X(cuModuleLoadData, 2000, cuModuleLoadData, N)                     \
    X(cuModuleLoadDataEx, 2010, cuModuleLoadDataEx, N)                 \
    X(cuModuleLoadFatBinary, 2000, cuModuleLoadFatBinary, N)           \
    X(cuModuleUnload, 2000, cuModuleUnload, N)                         \
    X(cuLibraryLoadData, 12000, cuLibraryLoadData, N)                  \
    X(cuLibraryLoadFromFile, 12000, cuLibraryLoadFromFile, N)          \
    X(cuLibraryUnload, 12000, cuLibraryUnload, N)                      \
    X(cuArrayCreate, 2000, cuArrayCreate, N)                           \
    X(cuArrayCreate, 3020, cuArrayCreate_v2, N)                        \
    X(cuArray3DCreate, 2000, cuArray3DCreate, N)                       \
    X(cuArray3DCreate, 3020, cuArray3DCreate_v2, N)                    \
    X(cuMemAllocPitch, 2000, cuMemAllocPitch, N)                       \
    X(cuArrayDestroy, 2000, cuArrayDestroy, N)                         \
    X(cuMipmappedArrayCreate, 5000, cuMipmappedArrayCreate, N)         \
    X(cuMipmappedArrayDestroy, 5000, cuMipmappedArrayDestroy, N)       \
    X(cuLaunchKernel, 4000, cuLaunchKernel, N)                         \
    X(cuLaunchKernel, 7000, cuLaunchKernel_ptsz, P)                    \
    X(cuLaunchKernelEx, 11060, cuLaunchKernelEx, N)                    \
    X(cuLaunchKernelEx, 11060, cuLaunchKernelEx_ptsz, P)               \
    X(cuLaunchCooperativeKernel, 9000, cuLaunchCooperativeKernel, N)   \
    X(cuLaunchCooperativeKernel, 9000, cuLaunchCooperativeKernel_ptsz, P) \
    X(cuGraphLaunch, 10000, cuGraphLaunch, N)                          \
    X(cuGraphCreate, 10000, cuGraphCreate, N)                          \
    X(cuGraphDestroy, 10000, cuGraphDestroy, N)                        \
    X(cuGraphAddMemAllocNode, 11040, cuGraphAddMemAllocNode, N)        \
    X(cuGraphAddMemFreeNode, 11040, cuGraphAddMemFreeNode, N)          \
    X(cuGraphAddEmptyNode, 10000, cuGraphAddEmptyNode, N)              \
    X(cuGraphAddChildGraphNode, 10000, cuGraphAddChildGraphNode, N)    \
    X(cuGraphChildGraphNodeGetGraph, 10000, cuGraphChildGraphNodeGetGraph, N) \
    X(cuGraphGetNodes, 10000, cuGraphGetNodes, N)                      \
    X(cuGraphNodeGetType, 10000, cuGraphNodeGetType, N)                \
    X(cuGraphMemAllocNodeGetParams, 11040, cuGraphMemAllocNodeGetParams, N) \
    X(cuGraphInstantiate, 10000, cuGraphInstantiate, N)                \
    X(cuGraphInstantiate, 11000, cuGraphInstantiate_v2, N)             \
    X(cuGraphInstantiate, 12000, cuGraphInstantiateWithFlags, N)       \
    X(cuGraphInstantiateWithFlags, 11040, cuGraphInstantiateWithFlags, N) \
    X(cuGraphInstantiateWithParams, 12000, cuGraphInstantiateWithParams, N) \
    X(cuGraphInstantiateWithParams, 12000, cuGraphInstantiateWithParams_ptsz, P) \
    X(cuGraphExecDestroy, 10000, cuGraphExecDestroy, N)                \
    X(cuGraphUpload, 11010, cuGraphUpload, N)                          \
    X(cuGraphUpload, 11010, cuGraphUpload_ptsz, P)                     \
    X(cuGraphExecUpdate, 10020, cuGraphExecUpdate, N)                  \
    X(cuGraphExecUpdate, 12000, cuGraphExecUpdate_v2, N)               \
    X(cuDeviceGraphMemTrim, 11040, cuDeviceGraphMemTrim, N)            \
    X(cuDeviceGetGraphMemAttribute, 11040, cuDeviceGetGraphMemAttribute, N) \
    X(cuDeviceSetGraphMemAttribute, 11040, cuDeviceSetGraphMemAttribute, N) \
    X(cuGraphLaunch, 10000, cuGraphLaunch_ptsz, P)                     \
    X(cuGetErrorString, 6000, cuGetErrorString, N)                     \
    X(cuGetErrorName, 6000, cuGetErrorName, N)                         \
    X(cuGetProcAddress, 11030, cuGetProcAddress, N)                    \
    X(cuGetProcAddress, 12000, cuGetProcAddress_v2, N)

struct proc {
    const char *symbol;
    int version;
    bool per_thread;
    const char *variant;
    void *fn;
};

#define N false
#define P true
#define PROC_ROW(sym, ver, fn, mode) {#sym, ver, mode, #fn, (void *)fn},
static const struct proc g_procs[] = {FAKECUDA_PROCS(PROC_ROW)};
#undef PROC_ROW
#undef N
#undef P

/*
 * The real driver's choice: among the variants of `symbol` introduced at or
 * before cudaVersion, the newest; with the per-thread flag the newest _ptsz
 * variant if there is one, else the newest plain one.
 */
static const struct proc *proc_lookup(const char *symbol, int version, bool per_thread,
                                      bool *known)
{
    const struct proc *best[2] = {NULL, NULL}; /* [per_thread] */
    *known = false;
    for (size_t i = 0; i < sizeof(g_procs) / sizeof(g_procs[0]); i++) {
        const struct proc *p = &g_procs[i];
        if (strcmp(p->symbol, symbol) != 0)
            continue;
        *known = true;
        if (p->version > version)
            continue;
        if (!best[p->per_thread] || p->version >= best[p->per_thread]->version)
            best[p->per_thread] = p;
    }
    return (per_thread && best[1]) ? best[1] : best[0];
}

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                    cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
    if (!symbol || !pfn || flags > CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
        return CUDA_ERROR_INVALID_VALUE;
    bool known;
    const struct proc *p = proc_lookup(symbol, cudaVersion,
                                       flags == CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                                       &known);
    *pfn = p ? p->fn : NULL;
    if (status)
        *status = p ? CU_GET_PROC_ADDRESS_SUCCESS
                    : known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                            : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return p ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                 cuuint64_t flags)
{
    return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, NULL);
}
