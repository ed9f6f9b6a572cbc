/*
 * Kernel launches: the compute limiter's side that talks to the driver.
 * pace.c, pace_card.c and pace_turns.c decide; this file records the events
 * they ask for, reads them back, moves charges into the container's bucket
 * in the region, sleeps when the bucket is in debt, and keeps this
 * process's seat in the card file up to date. Reasoning: docs/compute-limit.md.
 *
 * Cost: a process without a cap, on a host without card files, gets the
 * driver's own launch functions from dlsym and cuGetProcAddress (nothing in
 * between); a direct call to our export costs one relaxed load. A process
 * without a cap or a priority beside a capped or prioritised one pays a
 * clock read and a few loads of the card file per launch (between fence
 * points on a quiet card: on tickets, without the mutex) and an event
 * record per quarter millisecond of GPU work, and waits while others hold
 * the card: it takes part in the turns (with gates, gate.c, its work waits
 * on the GPU instead, and it pays a stream wait per stream and closed
 * period, and a watcher thread).
 */
#define _GNU_SOURCE /* clock_nanosleep */
#include "gate.h"
#include "gpuslice.h"
#include "pace.h"
#include "presence.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define PER_THREAD_STREAM ((CUstream)0x2) /* CU_STREAM_PER_THREAD */
#define POOL (GS_PACE_RING + 8)            /* events kept per device: ring + reference + spare */

int gs_pace_mode = -1;

struct pacer_dev {
    struct gs_pace_io io; /* first: the callbacks find the rest from it */
    /* The pacer's decisions run under mu, and some call the driver: the
     * event calls of the io (create, record, query, synchronize, elapsed
     * time, whether the stream is captured). It is held across them on
     * purpose. Holding back is what the pacer does: while it waits for its
     * oldest fence, sleeps for the bucket, waits for a turn or stands
     * aside, every other thread of the process launching on this device
     * must wait too (they queue on mu; enter() withdraws the tickets), or
     * they would launch through a throttle. And a fence's record and its
     * place in the ring are one step, on events of the context pd->ctx,
     * which another thread may replace (a reset, under mu). The driver's
     * launch itself never runs under mu (PACED), and launches between
     * fence points skip it (tickets). */
    pthread_mutex_t mu;
    struct gs_pacer p;
    int dev;
    CUcontext ctx; /* events below belong to it; written under mu, read without */
    CUevent pool[POOL];
    int npool;
    int card_opened; /* io.card: NULL if there is no card file */
    /* Bumped (under mu) whenever the pacer holds the process back: a launch
     * that saw another value before it went to the driver ran meanwhile. */
    unsigned held;
    /* Launches past the mutex, on lines of their own (every launching
     * thread writes them): tickets left, and the clock they expire at. */
    _Alignas(64) long tickets;
    unsigned long long tickets_until;
    /* Tickets on a card with turns (the pacer's last look found it quiet):
     * that card, whose quiet words must still read these; NULL: no card. */
    struct gpuslice_cardfile *tickets_card;
    unsigned long long quiet[GS_CARD_QUIET_WORDS];
    /* Launches the driver took on a ticket, not yet handed to the pacer;
     * unseen: those of them that ran while the pacer held the process back. */
    _Alignas(64) unsigned long long counted;
    unsigned long long unseen;
    struct gs_gate gate; /* GPUSLICE_COMPUTE_GATES=1 on a card with turns */
};

static struct pacer_dev pacers[GPUSLICE_MAX_DEVICES];
/* Mode 2: the cards of this process's devices, checked on every launch for a
 * capped or prioritised tenant (managed_ns). */
static struct gpuslice_cardfile *watched[GPUSLICE_MAX_DEVICES];
static int nwatched;
static unsigned long long card_token;
static pthread_once_t pace_once = PTHREAD_ONCE_INIT;

int gs_is_paced_fn(int index)
{
    switch (index) {
#define GS_CASE(lib, name, ret, params) case GS_FN_##name:
        GS_LAUNCH_FUNCTIONS(GS_CASE)
        GS_SYNC_FUNCTIONS(GS_CASE)
#undef GS_CASE
        return 1;
    default:
        return 0;
    }
}

int gs_pace_possible(void)
{
    static int possible = -1; /* decided once: the answer must not flip mid-run */
    int p = __atomic_load_n(&possible, __ATOMIC_RELAXED);
    if (p < 0) {
        gs_core_init();
        p = !gs_cfg.disabled &&
            (gs_cfg.any_core || access(gs_cfg.card_dir, R_OK | W_OK | X_OK) == 0);
        __atomic_store_n(&possible, p, __ATOMIC_RELAXED);
    }
    return p;
}

/* ------------------------------------------------------------- card file */

static struct gpuslice_cardfile *open_card(const char *uuid)
{
    char path[sizeof gs_cfg.card_dir + GPUSLICE_UUID_SIZE + 2];
    snprintf(path, sizeof path, "%s/%s", gs_cfg.card_dir, uuid);
    void *m;
    int fd;
    long long found;
    switch (gs_map_locked(path, sizeof(struct gpuslice_cardfile), 1, &m, &fd, &found)) {
    case GS_MAP_OK:
        break;
    case GS_MAP_NO_FILE:
        GS_LOG(GS_LOG_INFO, "no card file %s (%s): compute caps assume no neighbours", path,
               strerror(errno));
        return NULL;
    case GS_MAP_BAD_SIZE:
        gs_log_write(GS_LOG_WARN, "%s has size %lld, expected %zu; compute caps assume no "
                     "neighbours", path, found, sizeof(struct gpuslice_cardfile));
        return NULL;
    default:
        return NULL;
    }
    struct gpuslice_cardfile *c = m;
    if (c->magic == 0) {
        c->version = GPUSLICE_CARDFILE_VERSION;
        c->size = sizeof *c;
        __atomic_store_n(&c->magic, GPUSLICE_CARDFILE_MAGIC, __ATOMIC_RELEASE);
    } else if (c->magic != GPUSLICE_CARDFILE_MAGIC || c->version != GPUSLICE_CARDFILE_VERSION ||
               c->size != sizeof *c) {
        gs_log_write(GS_LOG_WARN, "%s is not a gpuslice card file of this version; compute "
                     "caps assume no neighbours", path);
        munmap(m, sizeof *c);
        c = NULL;
    }
    gs_map_done(fd);
    return c;
}

/* With pd->mu held (or before any launch thread exists). */
static struct gpuslice_cardfile *card_of(struct pacer_dev *pd, int dev)
{
    if (!pd->card_opened) {
        pd->card_opened = 1;
        gs_device_note(dev);
        char uuid[GPUSLICE_UUID_SIZE];
        memcpy(uuid, gs_region()->devices[dev].uuid, sizeof uuid);
        uuid[sizeof uuid - 1] = '\0';
        /* The name becomes a path: only what a UUID is made of. */
        if (uuid[0] && strspn(uuid, "GPU-MIG0123456789abcdef") == strlen(uuid))
            pd->io.card = open_card(uuid);
        pd->io.seat = -1;
    }
    return pd->io.card;
}

/* ----------------------------------------------------------- mode, once */

/* Under pthread_once, with the driver asked (the device count, the cards'
 * UUIDs): every thread's first paced launch must wait for the mode and the
 * pacers' mutexes made here; it happens once per process. */
static void decide_mode(void)
{
    for (int i = 0; i < GPUSLICE_MAX_DEVICES; i++) {
        pthread_mutex_init(&pacers[i].mu, NULL);
        gs_gate_init(&pacers[i].gate, i, &pacers[i].p, &pacers[i].io);
    }
    gs_cuda_ready();
    int mode = 0;
    if (!gs_cfg.disabled) {
        struct gpuslice_region *r = gs_region();
        for (int i = 0; i < GPUSLICE_MAX_DEVICES; i++)
            if (__atomic_load_n(&r->devices[i].core_limit, __ATOMIC_RELAXED))
                mode = 1;
        /* A prioritised process says so on the card at every launch. */
        if (gs_cfg.priority != GPUSLICE_PRIORITY_NORMAL && gs_pace_possible())
            mode = 1;
        if (!mode && gs_pace_possible()) {
            /* Uncapped: watch the cards for a capped or prioritised neighbour. */
            int n = 0;
            if (HAS_REAL(cuDeviceGetCount) && REAL(cuDeviceGetCount)(&n) == CUDA_SUCCESS)
                for (int i = 0; i < n && i < GPUSLICE_MAX_DEVICES; i++)
                    if (card_of(&pacers[i], i))
                        watched[nwatched++] = pacers[i].io.card;
            if (nwatched)
                mode = 2;
        }
    }
    card_token = gs_unique_id();
    GS_LOG(GS_LOG_INFO, "compute: %s", mode == 1 ? "capped" : mode == 2 ? "watching the card"
                                                                   : "not paced");
    /* Release: whoever reads the mode without pthread_once sees watched[]. */
    __atomic_store_n(&gs_pace_mode, mode, __ATOMIC_RELEASE);
}

int gs_pace_wanted_slow(int mode)
{
    mode = __atomic_load_n(&gs_pace_mode, __ATOMIC_ACQUIRE);
    if (mode < 0) {
        pthread_once(&pace_once, decide_mode);
        mode = __atomic_load_n(&gs_pace_mode, __ATOMIC_RELAXED);
    }
    if (mode != 2)
        return mode;
    for (int i = 0; i < nwatched; i++)
        if (__atomic_load_n(&watched[i]->managed_ns, __ATOMIC_RELAXED))
            return 1;
    return 0;
}

/* ------------------------------------------------- the limiter's I/O */

static struct pacer_dev *of(struct gs_pace_io *io)
{
    return (struct pacer_dev *)(void *)io; /* io is the first member */
}

static void *event_take(struct gs_pace_io *io)
{
    struct pacer_dev *pd = of(io);
    if (pd->npool)
        return pd->pool[--pd->npool];
    CUevent e = NULL;
    return REAL(cuEventCreate)(&e, 0) == CUDA_SUCCESS ? e : NULL;
}

static void event_give(struct gs_pace_io *io, void *e)
{
    struct pacer_dev *pd = of(io);
    if (pd->npool < POOL)
        pd->pool[pd->npool++] = e;
    /* else cannot happen: at most the ring and the reference exist */
}

static int event_record(struct gs_pace_io *io, void *e, void *stream)
{
    (void)io;
    return REAL(cuEventRecord)(e, stream) == CUDA_SUCCESS ? 0 : -1;
}

/* Asked only where the pacer would touch events (a fence or marker point):
 * a launch into a stream being captured runs later, in its graph (paced at
 * cuGraphLaunch), and PyTorch captures in the global mode, which an event
 * query from this thread would invalidate. */
static int io_capturing(struct gs_pace_io *io, void *stream)
{
    (void)io;
    int status = 0;
    if (!HAS_REAL(cuStreamIsCapturing))
        return 0;
    return REAL(cuStreamIsCapturing)(stream, &status) != CUDA_SUCCESS || status != 0;
}

static int event_done(struct gs_pace_io *io, void *e)
{
    (void)io;
    return REAL(cuEventQuery)(e) == CUDA_SUCCESS;
}

static int event_wait(struct gs_pace_io *io, void *e)
{
    struct pacer_dev *pd = of(io);
    if (REAL(cuEventSynchronize)(e) == CUDA_SUCCESS)
        return 0;
    GS_LOG(GS_LOG_DEBUG, "device %d: event sync failed; pacing restarts", pd->dev);
    pd->npool = 0; /* with the ring: the context's events are gone */
    return -1;
}

/* The time first: it says CUDA_ERROR_NOT_READY while either event is not
 * complete, as a query would. Another error (none is expected: both are
 * timed events of one context, recorded) leaves it to a query. */
static int event_gap(struct gs_pace_io *io, void *a, void *b, unsigned long long *ns)
{
    float ms = 0;
    CUresult r = HAS_REAL(cuEventElapsedTime_v2) ? REAL(cuEventElapsedTime_v2)(&ms, a, b)
                                                 : REAL(cuEventElapsedTime)(&ms, a, b);
    *ns = r == CUDA_SUCCESS && ms > 0 ? (unsigned long long)((double)ms * 1e6) : 0;
    if (r == CUDA_SUCCESS)
        return 1;
    return r == CUDA_ERROR_NOT_READY ? 0 : event_done(io, b);
}

static unsigned long long io_now(struct gs_pace_io *io)
{
    (void)io;
    return gs_now_ns();
}

/* The pacer holds the process back (sleep, wait, pause: throttled, standing
 * aside, waiting for a turn): launches in flight past it are told apart. */
static void holding(struct gs_pace_io *io)
{
    struct pacer_dev *pd = of(io);
    __atomic_store_n(&pd->held, pd->held + 1, __ATOMIC_RELAXED);
}

static void io_sleep(struct gs_pace_io *io, unsigned long long ns)
{
    holding(io);
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == EINTR)
        ;
}

/* A futex on the card file, a MAP_SHARED mapping of one file for every
 * tenant: shared, not private, futex operations. Anyone can write the word,
 * so a wake-up proves nothing: the pacer looks again and bounds every wait. */
static void io_wait_word(struct gs_pace_io *io, unsigned *word, unsigned seen,
                         unsigned long long ns)
{
    holding(io);
    gs_futex_wait(word, seen, 1, ns);
}

static void io_wake_word(struct gs_pace_io *io, unsigned *word)
{
    (void)io;
    gs_futex_wake(word, 1);
}

/* A few microseconds awake (a waiter about to be handed the card). */
static void io_pause(struct gs_pace_io *io)
{
    holding(io);
    for (int i = 0; i < 64; i++) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        __asm__ __volatile__("yield");
#endif
    }
}

/* The gate: gate.c. A driver that cannot gate turns gates off for the device. */
static int io_gate_close(struct gs_pace_io *io, void *stream)
{
    struct pacer_dev *pd = of(io);
    if (gs_gate_close(&pd->gate, pd->ctx, stream) == 0)
        return 0;
    if (pd->gate.off)
        io->gate_close = NULL;
    return -1;
}

static void io_gate_hold(struct gs_pace_io *io, void *stream)
{
    gs_gate_hold(&of(io)->gate, stream);
}

static void io_gate_open(struct gs_pace_io *io)
{
    gs_gate_open(&of(io)->gate);
}

static unsigned io_cap(struct gs_pace_io *io)
{
    unsigned cap = __atomic_load_n(&gs_region()->devices[of(io)->dev].core_limit,
                                   __ATOMIC_RELAXED);
    return cap > 100 ? 100 : cap;
}

static unsigned io_settle(struct gs_pace_io *io, unsigned long long charge_ns,
                          unsigned long long launches, unsigned long long held_ns,
                          unsigned long long *wait)
{
    *wait = 0;
    struct gpuslice_region *r = gs_region();
    if (gs_region_lock(r) != 0)
        return 0;
    struct gpuslice_device *d = &r->devices[of(io)->dev];
    unsigned cap = d->core_limit > 100 ? 100 : d->core_limit;
    unsigned long long cut = cap ? gs_bucket_refill(&d->compute, cap, gs_now_ns(), held_ns) : 0;
    gs_bucket_charge(&d->compute, charge_ns);
    d->compute.launches += launches;
    *wait = gs_bucket_wait_ns(&d->compute, cap);
    gs_region_unlock(r);
    if (cut) {
        of(io)->p.credit_cut_ns += cut;
        of(io)->p.credit_cuts++;
    }
    return cap;
}

static void io_throttled(struct gs_pace_io *io, unsigned long long ns)
{
    struct gpuslice_region *r = gs_region();
    if (gs_region_lock(r) != 0)
        return;
    r->devices[of(io)->dev].compute.throttled_ns += ns;
    gs_region_unlock(r);
}

static void io_init(struct pacer_dev *pd, int dev)
{
    pd->io = (struct gs_pace_io){
        .event_take = event_take, .event_give = event_give, .event_record = event_record,
        .capturing = io_capturing, .event_done = event_done, .event_wait = event_wait, .event_gap = event_gap,
        .now = io_now, .sleep = io_sleep, .settle = io_settle, .throttled = io_throttled,
        .cap = io_cap, .card = pd->io.card, .seat = -1, .token = card_token,
        .turns = gs_cfg.compute_turns, .wait_word = io_wait_word, .wake_word = io_wake_word,
        .side = gs_cfg.compute_side && !gs_cfg.compute_gates,
        .pause = io_pause,
        .prio = gs_cfg.priority,
    };
    if (gs_cfg.compute_gates && gs_cfg.compute_turns && pd->io.card && !pd->gate.off) {
        pd->io.gate_close = io_gate_close;
        pd->io.gate_hold = io_gate_hold;
        pd->io.gate_open = io_gate_open;
    }
    pd->dev = dev;
}

/* ------------------------------------------------------------ the launch */

struct launch {
    struct pacer_dev *pd;
    CUcontext ctx;
    CUstream s;
    int ticket;    /* went past the mutex */
    unsigned held; /* pd->held when it went to the driver */
};

static __thread CUcontext t_ctx;
static __thread int t_dev = -1;

/* The calling thread's current context, in *ctx, and its device (cached per
 * thread while the context stays the same); -1: none we pace. */
static int current_dev(CUcontext *ctx)
{
    *ctx = NULL;
    if (!HAS_REAL(cuCtxGetCurrent) || REAL(cuCtxGetCurrent)(ctx) != CUDA_SUCCESS || !*ctx)
        return -1;
    if (*ctx != t_ctx) {
        t_dev = gs_current_device();
        t_ctx = *ctx;
    }
    return t_dev >= 0 && t_dev < GPUSLICE_MAX_DEVICES ? t_dev : -1;
}

/* With pd->mu held, on the way in: no new ticket from here on (what the
 * pacer does now may depend on the count, or hold the process back), and
 * the launches that went on tickets so far are handed over. A ticket taken
 * before this is a launch in flight: it is counted at the next hand-over. */
static void enter(struct pacer_dev *pd)
{
    __atomic_store_n(&pd->tickets, 0, __ATOMIC_RELAXED);
    unsigned long long n = __atomic_exchange_n(&pd->counted, 0, __ATOMIC_RELAXED);
    unsigned long long unseen = __atomic_exchange_n(&pd->unseen, 0, __ATOMIC_RELAXED);
    if (n)
        gs_pace_count(&pd->p, n, unseen);
}

/* With pd->mu held, on the way out: tickets for the launches until the next
 * fence point. Only where the pacer does nothing at a launch that is no
 * fence point: on a card with turns every launch asks the card (gate),
 * unless its last look found the card quiet; then the tickets hold while
 * the card's quiet words stay as they were (a turn taken, a stamp raised,
 * a want said: the next launch asks the card). Without them, an uncapped
 * process beside an idle high-priority tenant took the mutex at every
 * launch (0.64-0.86 of native launches on an H100), and so did a capped
 * holder nobody waited for. On the way into the driver (to_driver) with a
 * fence due at that launch's end, tickets from that fence on: its end
 * takes them back before it fences (enter). */
static void leave(struct pacer_dev *pd, int to_driver)
{
    int on_card = pd->io.card && pd->io.turns;
    unsigned n = 0;
    unsigned long long until = 0;
    if (!on_card || pd->p.quiet) {
        unsigned ahead = to_driver ? gs_pace_room_ahead(&pd->p, &until) : 0;
        n = ahead ? ahead : gs_pace_room(&pd->p);
        if (!ahead)
            until = gs_pace_room_until(&pd->p);
    }
    if (n) {
        __atomic_store_n(&pd->tickets_card, on_card ? pd->io.card : NULL, __ATOMIC_RELAXED);
        if (on_card) /* the words the pacer's look read, not the card now */
            for (int i = 0; i < GS_CARD_QUIET_WORDS; i++)
                __atomic_store_n(&pd->quiet[i], pd->p.quiet_words[i], __ATOMIC_RELAXED);
        __atomic_store_n(&pd->tickets_until, until, __ATOMIC_RELAXED);
        /* Release: a thread that takes a ticket sees the clock it expires at. */
        __atomic_store_n(&pd->tickets, (long)n, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&pd->mu);
}

/* A ticket: this launch goes to the driver without the mutex. */
static int take_ticket(struct pacer_dev *pd, CUcontext ctx, struct launch *L)
{
    if (__atomic_load_n(&pd->tickets, __ATOMIC_ACQUIRE) <= 0 ||
        __atomic_load_n(&pd->ctx, __ATOMIC_RELAXED) != ctx ||
        gs_now_ns() >= __atomic_load_n(&pd->tickets_until, __ATOMIC_RELAXED))
        return 0;
    struct gpuslice_cardfile *card = __atomic_load_n(&pd->tickets_card, __ATOMIC_RELAXED);
    if (card) {
        unsigned long long w[GS_CARD_QUIET_WORDS];
        gs_card_quiet_words(card, w);
        for (int i = 0; i < GS_CARD_QUIET_WORDS; i++)
            if (w[i] != __atomic_load_n(&pd->quiet[i], __ATOMIC_RELAXED))
                return 0;
    }
    L->held = __atomic_load_n(&pd->held, __ATOMIC_RELAXED);
    /* Below zero: others took the last ones first; the mutex it is (the
     * count is set anew at the next hand-out). */
    return __atomic_sub_fetch(&pd->tickets, 1, __ATOMIC_RELAXED) >= 0;
}

/* Before the driver's launch: the pacer's decisions under pd->mu (released
 * before the launch), or a ticket; L->pd NULL: not paced. */
static void begin(struct launch *L, CUstream s, int ptsz)
{
    L->pd = NULL;
    L->ticket = 0;
    CUcontext ctx;
    int dev = HAS_REAL(cuEventRecord) ? current_dev(&ctx) : -1;
    if (dev < 0)
        return;
    struct pacer_dev *pd = &pacers[dev];
    L->pd = pd;
    L->ctx = ctx;
    L->s = ptsz && s == NULL ? PER_THREAD_STREAM : s;
    if (take_ticket(pd, ctx, L)) {
        L->ticket = 1;
        return;
    }
    pthread_mutex_lock(&pd->mu);
    enter(pd);
    if (card_of(pd, dev) && __atomic_load_n(&gs_pace_mode, __ATOMIC_RELAXED) == 1)
        gs_presence_note(dev, pd->io.card);
    if (pd->ctx != ctx) {
        /* A new context: the old one's events are not ours to touch, nor
         * its streams that wait at our gate (opened). The watcher reads
         * the io and the pacer's gate: not while they are rewritten. */
        pthread_mutex_lock(&pd->gate.look);
        gs_gate_release(&pd->gate);
        gs_pace_reset(&pd->p);
        io_init(pd, dev);
        pthread_mutex_unlock(&pd->gate.look);
        pd->npool = 0;
        __atomic_store_n(&pd->ctx, ctx, __ATOMIC_RELAXED);
    }
    gs_pace_launch_begin(&pd->p, &pd->io, L->s);
    L->held = pd->held;
    leave(pd, 1);
}

/* After the driver's launch: counted (a ticket), or the pacer's decisions
 * after a launch under pd->mu (a fence is recorded after this thread's
 * launch returned, into its stream). */
static void end(struct launch *L, CUresult r)
{
    struct pacer_dev *pd = L->pd;
    if (!pd)
        return;
    int ok = r == CUDA_SUCCESS;
    if (L->ticket) {
        if (ok) {
            if (__atomic_load_n(&pd->held, __ATOMIC_RELAXED) != L->held)
                __atomic_add_fetch(&pd->unseen, 1, __ATOMIC_RELAXED);
            __atomic_add_fetch(&pd->counted, 1, __ATOMIC_RELAXED);
        }
        return;
    }
    pthread_mutex_lock(&pd->mu);
    enter(pd);
    /* A context made meanwhile by another thread reset the pacer: this
     * launch's stream is not one its events may be recorded into. */
    if (pd->ctx == L->ctx) {
        if (ok && pd->held != L->held)
            gs_pace_count(&pd->p, 0, 1); /* ran while the pacer held the process back */
        gs_pace_launch_end(&pd->p, &pd->io, L->s, ok);
    }
    leave(pd, 0);
}

/* The driver's launch runs with no lock of ours held: begin() and end()
 * each take and release pd->mu (see struct pacer_dev for what runs under
 * it). With no cap and no card to watch: no lock, no allocation, a load
 * of the mode, and the driver. */
#define PACED(name, stream, ptsz, args)                                                       \
    do {                                                                                      \
        gs_cuda_ready();                                                                      \
        if (GS_UNLIKELY(!HAS_REAL(name)))                                                     \
            return CUDA_ERROR_NOT_FOUND;                                                      \
        if (GS_LIKELY(!gs_pace_wanted()))                                                     \
            return REAL(name) args;                                                           \
        struct launch L;                                                                      \
        begin(&L, (stream), (ptsz));                                                          \
        CUresult r = REAL(name) args;                                                         \
        end(&L, r);                                                                           \
        return r;                                                                             \
    } while (0)

#define LAUNCH_ARGS                                                                           \
    (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,        \
     hStream, kernelParams, extra)
#define COOP_ARGS                                                                             \
    (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,        \
     hStream, kernelParams)

GS_API CUresult cuLaunchKernel GS_LAUNCH_PARAMS
{
    PACED(cuLaunchKernel, hStream, 0, LAUNCH_ARGS);
}
GS_API CUresult cuLaunchKernel_ptsz GS_LAUNCH_PARAMS
{
    PACED(cuLaunchKernel_ptsz, hStream, 1, LAUNCH_ARGS);
}
GS_API CUresult cuLaunchKernelEx(const CUlaunchConfig_prefix *config, CUfunction f,
                                 void **kernelParams, void **extra)
{
    PACED(cuLaunchKernelEx, config ? config->hStream : NULL, 0,
          (config, f, kernelParams, extra));
}
GS_API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig_prefix *config, CUfunction f,
                                      void **kernelParams, void **extra)
{
    PACED(cuLaunchKernelEx_ptsz, config ? config->hStream : NULL, 1,
          (config, f, kernelParams, extra));
}
GS_API CUresult cuLaunchCooperativeKernel GS_COOP_PARAMS
{
    PACED(cuLaunchCooperativeKernel, hStream, 0, COOP_ARGS);
}
GS_API CUresult cuLaunchCooperativeKernel_ptsz GS_COOP_PARAMS
{
    PACED(cuLaunchCooperativeKernel_ptsz, hStream, 1, COOP_ARGS);
}
GS_API CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    PACED(cuGraphLaunch, hStream, 0, (hGraphExec, hStream));
}
GS_API CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    PACED(cuGraphLaunch_ptsz, hStream, 1, (hGraphExec, hStream));
}

/* ------------------------------------------------------------------ syncs */

/* The application waited for the GPU until now: the pacer counts idling
 * (first service, guest() in pace.c) from here, not from its last launch.
 * Else a busy loop whose sync waited more than GS_PACE_GAP_NS for its own
 * work (behind a neighbour's request) came back as if from idle, earned
 * first service, and queued as a guest into the next request. And a
 * request answered lets its stand-aside stamp go (gs_pace_waited): the
 * neighbours standing aside are woken. The device is the calling thread's
 * context's; atomics, no lock. `what` names the route, once at debug level
 * (tests/gpu/check_shim.py asks). */
static void synced(unsigned long long began, unsigned long long now, int *said, const char *what)
{
    CUcontext ctx;
    int dev = current_dev(&ctx);
    if (dev < 0)
        return;
    struct gpuslice_cardfile *card = gs_pace_waited(&pacers[dev].p, began, now);
    if (card)
        gs_futex_wake(&card->seq, 1);
    if (!__atomic_exchange_n(said, 1, __ATOMIC_RELAXED))
        GS_LOG(GS_LOG_DEBUG, "device %d: the application's %s are seen", dev, what);
}

static int said_syncs, said_copies, said_polls;

/* The call, begun at `began`, returned: it waited for the GPU (a sync, a blocking copy). */
static CUresult waited(CUresult r, unsigned long long began, int *said, const char *what)
{
    synced(began, gs_now_ns(), said, what);
    return r;
}

/* Unpaced (no cap, no capped or prioritised neighbour): the driver's, and
 * one load of the mode. `seen`: what a paced process tells its pacer (t0:
 * when the call began, for side by side), and returns. */
#define WAIT(name, args, seen)                                                                \
    do {                                                                                      \
        gs_cuda_ready();                                                                      \
        if (GS_UNLIKELY(!HAS_REAL(name)))                                                     \
            return CUDA_ERROR_NOT_FOUND;                                                      \
        unsigned long long t0 = GS_UNLIKELY(gs_pace_wanted()) ? gs_now_ns() : 0;              \
        CUresult r = REAL(name) args;                                                         \
        return t0 ? (seen) : r;                                                               \
    } while (0)
#define SYNCED(name, args) WAIT(name, args, waited(r, t0, &said_syncs, "syncs"))
/* A blocking copy from the device waits for the stream's work first. */
#define COPIED(name, args) WAIT(name, args, waited(r, t0, &said_copies, "blocking copies"))

GS_API CUresult cuCtxSynchronize(void)
{
    SYNCED(cuCtxSynchronize, ());
}
GS_API CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
    SYNCED(cuCtxSynchronize_v2, (ctx));
}
GS_API CUresult cuStreamSynchronize(CUstream hStream)
{
    SYNCED(cuStreamSynchronize, (hStream));
}
GS_API CUresult cuStreamSynchronize_ptsz(CUstream hStream)
{
    SYNCED(cuStreamSynchronize_ptsz, (hStream));
}
GS_API CUresult cuEventSynchronize(CUevent hEvent)
{
    SYNCED(cuEventSynchronize, (hEvent));
}
GS_API CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t n)
{
    COPIED(cuMemcpyDtoH_v2, (dstHost, srcDevice, n));
}
GS_API CUresult cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t n)
{
    COPIED(cuMemcpyDtoH_v2_ptds, (dstHost, srcDevice, n));
}
GS_API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    COPIED(cuMemcpy, (dst, src, n));
}
GS_API CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    COPIED(cuMemcpy_ptds, (dst, src, n));
}

/* A query is a wait when it ends a poll: this thread heard "not ready" and
 * now hears "done" within GS_PACE_GAP_NS of it (a loop on cuEventQuery or
 * cuStreamQuery). A "done" with no "not ready" just before it waited for
 * nothing (an allocator reusing a block, a watchdog): it must not cut the
 * idling a server earns between requests. A poller that sleeps longer than
 * GS_PACE_GAP_NS between its looks is taken for idle, as launches that far
 * apart are. */
static __thread unsigned long long t_not_ready_ns;

static CUresult polled(CUresult r)
{
    if (r == CUDA_ERROR_NOT_READY) {
        t_not_ready_ns = gs_now_ns();
    } else if (t_not_ready_ns) {
        unsigned long long now = gs_now_ns();
        if (r == CUDA_SUCCESS && now - t_not_ready_ns <= GS_PACE_GAP_NS)
            synced(t_not_ready_ns, now, &said_polls, "polls");
        t_not_ready_ns = 0;
    }
    return r;
}

#define POLLED(name, args) WAIT(name, args, polled(r))

GS_API CUresult cuEventQuery(CUevent hEvent)
{
    POLLED(cuEventQuery, (hEvent));
}
GS_API CUresult cuStreamQuery(CUstream hStream)
{
    POLLED(cuStreamQuery, (hStream));
}
GS_API CUresult cuStreamQuery_ptsz(CUstream hStream)
{
    POLLED(cuStreamQuery_ptsz, (hStream));
}

/* ------------------------------------------------------------------ exit */

/* What the pacers counted since their last fence point goes into the region
 * at exit (no driver call: the driver may be gone by now). */
__attribute__((destructor)) static void flush_at_exit(void)
{
    if (__atomic_load_n(&gs_pace_mode, __ATOMIC_RELAXED) <= 0)
        return;
    for (int i = 0; i < GPUSLICE_MAX_DEVICES; i++) {
        struct pacer_dev *pd = &pacers[i];
        /* Whatever waits at our gate runs: the driver's teardown may wait for it. */
        gs_gate_open(&pd->gate);
        if (!__atomic_load_n(&pd->ctx, __ATOMIC_RELAXED) || pthread_mutex_trylock(&pd->mu) != 0)
            continue;
        enter(pd);
        unsigned long long wait;
        if (pd->p.charge_ns || pd->p.launches)
            io_settle(&pd->io, pd->p.charge_ns, pd->p.launches, 0, &wait);
        pd->p.charge_ns = pd->p.launches = 0;
        /* What the queue's bound rested on (docs/compute-limit.md). */
        GS_LOG(GS_LOG_DEBUG, "device %d: at exit %s: %d of %d at its last fence points "
               "found the GPU behind it; %llu ns a launch, learned", i,
               gs_pace_host_bound(&pd->p) ? "host-bound" : "GPU-bound", pd->p.fences_behind,
               GS_PACE_BEHIND, pd->p.per_launch_ns);
        /* What pacing cost the host, and where (pace.h, spent_*). */
        const struct gs_pacer *q = &pd->p;
        GS_LOG(GS_LOG_DEBUG, "device %d: pacing's host time: %llu launches (%llu on tickets), "
               "%llu fences; %llu us at fence points, %llu us waiting for its queue (%llu "
               "waits), %llu us asleep for its cap, %llu us at the card before launches", i,
               q->spent_launches, q->spent_ticketed, q->fences,
               q->spent_fence_ns / 1000, q->spent_queue_ns / 1000, q->spent_queue_waits,
               q->spent_sleep_ns / 1000, q->spent_card_ns / 1000);
        /* What it was charged, and where (pace.h, charged_*). */
        GS_LOG(GS_LOG_DEBUG, "device %d: pacing's charges: %llu us in %llu first intervals of "
               "busy periods (%llu launches), %llu us in later ones (%llu launches), %llu us at "
               "the estimate; %llu stand-asides, %llu us of others' work in their drains not "
               "charged", i, q->charged_first_ns / 1000, q->charged_firsts,
               q->charged_first_launches, q->charged_later_ns / 1000, q->charged_later_launches,
               q->charged_estimated_ns / 1000, q->asides, q->aside_others_ns / 1000);
        GS_LOG(GS_LOG_DEBUG, "device %d: its bucket: %llu us of credit earned and not kept "
               "(over its burst) in %llu refills", i, q->credit_cut_ns / 1000, q->credit_cuts);
        /* Side by side (pace_side.c): what kept it, or its neighbours, in turns. */
        if (q->epochs)
            GS_LOG(GS_LOG_DEBUG, "device %d: side by side: %llu of %llu epochs side by side, "
                   "its own waits %d per mille of its time; said it was short in %llu while "
                   "it learned its time a launch, %llu for long kernels, %llu for a cap over "
                   "half the card, %llu short of its cap (%lld per mille at exit)", i,
                   q->epochs_side, q->epochs, q->waiting_pm, q->epochs_learning, q->epochs_long,
                   q->epochs_high, q->epochs_owed, q->owed_pm);
        /* When its holds for running short began: whether they came in a
         * burst or one by one, early or late, is what a GPU run must show
         * (docs/compute-limit.md, What is left, Side by side). */
        if (q->holds) {
            char at[GS_PACE_HOLDS_KEPT * 48] = "";
            size_t n = 0;
            for (unsigned k = 0; k < q->holds && k < GS_PACE_HOLDS_KEPT && n < sizeof at; k++)
                n += (size_t)snprintf(at + n, sizeof at - n, "%s%u ms (%d per mille)",
                                      k ? ", " : "", q->hold_at_ms[k], q->hold_owed_pm[k]);
            /* Its first epoch on CLOCK_MONOTONIC, which a bench's own clock
             * shares: the holds at the times of its run, not of its setup. */
            GS_LOG(GS_LOG_DEBUG, "device %d: side by side: %u holds for running short, from %s; "
                   "its first epoch at %llu.%03llu s", i, q->holds, at,
                   q->first_epoch_ns / 1000000000ull, q->first_epoch_ns / 1000000ull % 1000ull);
        }
        gs_pace_leave(&pd->p, &pd->io);
        pthread_mutex_unlock(&pd->mu);
    }
}

/* ------------------------------------------------------------------ fork */

void gs_launch_fork_child(void)
{
    /* The parent's contexts and events are unusable here; its card seat is
     * its own. Mutexes may have been held by threads that do not exist. */
    for (int i = 0; i < GPUSLICE_MAX_DEVICES; i++) {
        pthread_mutex_init(&pacers[i].mu, NULL);
        gs_pace_reset(&pacers[i].p);
        pacers[i].ctx = NULL; /* the first launch re-initialises the rest */
        pacers[i].npool = 0;
        pacers[i].tickets = 0;
        pacers[i].counted = pacers[i].unseen = 0;
        gs_gate_init(&pacers[i].gate, i, &pacers[i].p, &pacers[i].io);
    }
    t_ctx = NULL;
    t_dev = -1;
    card_token = gs_unique_id();
    gs_presence_fork_child();
}
