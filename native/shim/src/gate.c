/*
 * Gates on the real driver (gate.h): a stream waits at a closed gate with
 * cuStreamWaitValue32 (GEQ) on a word of pinned host memory, mapped for the
 * device; the watcher opens it with a plain store, which the GPU sees
 * within microseconds (bench/stream_gate). Each closed period has its own
 * number (the epoch): a stream waits for the word to reach it, so a gate
 * opened once stays open for the waits of that period however late they
 * were queued, and a new period needs no reset of the word.
 */
#define _GNU_SOURCE /* MAP_ANONYMOUS */
#include "gate.h"

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define HOSTREGISTER_PORTABLE 0x01  /* CU_MEMHOSTREGISTER_PORTABLE: every context sees it */
#define HOSTREGISTER_DEVICEMAP 0x02 /* CU_MEMHOSTREGISTER_DEVICEMAP: the GPU can read it */
#define WAIT_VALUE_GEQ 0x0          /* CU_STREAM_WAIT_VALUE_GEQ: (int32_t)(*addr - value) >= 0 */
#define HOST_MEMORY_ALREADY_REGISTERED 712 /* CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED */
#define LEGACY_STREAM ((CUstream)0x1)
#define PER_THREAD_STREAM ((CUstream)0x2)
/* A gate still closed this long after the pacer stopped saying so (its
 * pacer reset: a broken context) is opened by the watcher: nothing else
 * would, and whatever waits there would wait for ever. */
#define STRAY_NS GS_PACE_SPIN_NS

/* The period this thread's per-thread default stream waits at, per device
 * (the handle CU_STREAM_PER_THREAD names another stream in each thread). */
static __thread unsigned t_per_thread[GPUSLICE_MAX_DEVICES];

void gs_gate_init(struct gs_gate *g, int dev, struct gs_pacer *p, struct gs_pace_io *io)
{
    /* A forked child: the parent's registration and watcher are not its own.
     * The epoch goes on, so that no stream's remembered period matches by chance. */
    if (g->word)
        munmap(g->word, (size_t)sysconf(_SC_PAGESIZE));
    unsigned epoch = g->epoch;
    memset(g, 0, sizeof *g);
    g->epoch = epoch;
    pthread_mutex_init(&g->look, NULL);
    g->dev = dev;
    g->p = p;
    g->io = io;
}

/* The word, registered, and its address in ctx. */
static int setup(struct gs_gate *g, CUcontext ctx)
{
    if (!HAS_REAL(cuMemHostRegister_v2) || !HAS_REAL(cuMemHostGetDevicePointer_v2) ||
        !HAS_REAL(cuStreamWaitValue32_v2)) {
        GS_LOG(GS_LOG_INFO, "device %d: the driver has no stream memory operations; no gates",
               g->dev);
        return -1;
    }
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (!g->word) {
        void *m = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
            return -1;
        g->word = m;
        __atomic_store_n(g->word, g->epoch, __ATOMIC_RELEASE); /* open */
    }
    /* Registered in every new context: portable, a later one finds it
     * registered already, unless the context that registered it took the
     * registration with it. Never a device address of memory not pinned. */
    CUdeviceptr d = 0;
    CUresult r = REAL(cuMemHostRegister_v2)(g->word, page,
                                            HOSTREGISTER_PORTABLE | HOSTREGISTER_DEVICEMAP);
    if (r == HOST_MEMORY_ALREADY_REGISTERED)
        r = CUDA_SUCCESS;
    if (r == CUDA_SUCCESS)
        r = REAL(cuMemHostGetDevicePointer_v2)(&d, g->word, 0);
    if (r != CUDA_SUCCESS) {
        GS_LOG(GS_LOG_INFO, "device %d: pinned host memory for a gate refused (%d); no gates",
               g->dev, (int)r);
        return -1;
    }
    g->dword = d;
    g->ctx = ctx;
    return 0;
}

/* Where the period that stream s waits at is kept (with the pacer's lock). */
static unsigned *period_of(struct gs_gate *g, CUstream s)
{
    if (s == PER_THREAD_STREAM)
        return &t_per_thread[g->dev];
    if (s == LEGACY_STREAM)
        s = NULL; /* the same stream as NULL */
    unsigned i = (unsigned)(((unsigned long long)(uintptr_t)s >> 4) * 0x9E3779B97F4A7C15ull >> 58) %
                 GS_GATE_STREAMS;
    if (g->streams[i].s != s) {
        g->streams[i].s = s;
        g->streams[i].epoch = 0; /* never a period: the first is 1 */
    }
    return &g->streams[i].epoch;
}

static int wait_at(struct gs_gate *g, CUstream s, unsigned epoch)
{
    return REAL(cuStreamWaitValue32_v2)(s, g->dword, epoch, WAIT_VALUE_GEQ) == CUDA_SUCCESS ? 0 : -1;
}

/* The watcher: asleep while the gate is open; while it is closed, a look
 * every GS_PACE_POLL_NS and whenever the card's seq changes (a turn ends,
 * a want or a window changes). It calls into the pacer only through
 * gs_pace_gate_watch, which touches the card file and the pacer's gate
 * atomics, never the driver. */
static void *watch(void *arg)
{
    struct gs_gate *g = arg;
    unsigned long long stray = 0;
    for (;;) {
        unsigned epoch = __atomic_load_n(&g->epoch, __ATOMIC_ACQUIRE);
        if (__atomic_load_n(g->word, __ATOMIC_RELAXED) == epoch) {
            gs_futex_wait(&g->epoch, epoch, 0, GS_FUTEX_FOREVER);
            stray = 0;
            continue;
        }
        pthread_mutex_lock(&g->look);
        struct gpuslice_cardfile *c = g->io->card;
        unsigned seen = c ? __atomic_load_n(&c->seq, __ATOMIC_RELAXED) : 0;
        unsigned long long now = gs_now_ns();
        int opened = c && gs_pace_gate_watch(g->p, g->io, now);
        if (!opened && !__atomic_load_n(&g->p->gate_since_ns, __ATOMIC_ACQUIRE)) {
            if (!stray)
                stray = now;
            if (!c || now - stray >= STRAY_NS) {
                gs_gate_open(g);
                opened = 1;
            }
        } else {
            stray = 0;
        }
        pthread_mutex_unlock(&g->look);
        if (!opened)
            gs_futex_wait(&c->seq, seen, 1, GS_PACE_POLL_NS);
    }
    return NULL;
}

static int start_watcher(struct gs_gate *g)
{
    if (gs_thread_start(watch, g, "gpuslice-gate") != 0) {
        GS_LOG(GS_LOG_INFO, "device %d: no thread for the gate's watcher; no gates", g->dev);
        return -1;
    }
    g->watching = 1;
    GS_LOG(GS_LOG_INFO, "device %d: gates on (the first closed)", g->dev);
    return 0;
}

int gs_gate_close(struct gs_gate *g, CUcontext ctx, CUstream s)
{
    if (g->off)
        return -1;
    if ((g->ctx != ctx && setup(g, ctx) != 0) || (!g->watching && start_watcher(g) != 0)) {
        g->off = 1;
        return -1;
    }
    unsigned epoch = g->epoch + 1;
    if (!epoch)
        epoch = 1;
    if (wait_at(g, s, epoch) != 0)
        return -1; /* this stream, this time: the pacer waits on the host */
    *period_of(g, s) = epoch;
    /* Release: the watcher that sees the new period sees the wait queued. */
    __atomic_store_n(&g->epoch, epoch, __ATOMIC_RELEASE);
    gs_futex_wake(&g->epoch, 0);
    return 0;
}

void gs_gate_hold(struct gs_gate *g, CUstream s)
{
    if (g->off || !g->ctx)
        return;
    unsigned *at = period_of(g, s);
    if (*at != g->epoch && wait_at(g, s, g->epoch) == 0)
        *at = g->epoch;
}

void gs_gate_open(struct gs_gate *g)
{
    if (g->word)
        __atomic_store_n(g->word, __atomic_load_n(&g->epoch, __ATOMIC_ACQUIRE), __ATOMIC_RELEASE);
}

void gs_gate_release(struct gs_gate *g)
{
    gs_gate_open(g);
    g->ctx = NULL; /* the next close asks for the word's address in the new context */
    memset(g->streams, 0, sizeof g->streams);
}
