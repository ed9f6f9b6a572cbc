/*
 * pace_sim: the compute limiter (native/shim/src/pace*.c, the very code the
 * shim runs) driven by a simulated GPU under a simulated clock.
 *
 * Each simulated process is a coroutine (ucontext) that runs a launch loop
 * through gs_pace_launch_begin/end with an I/O table backed by the model
 * below; whenever it would spend time (CPU work, a blocking event wait, a
 * sleep, a futex wait on the card file) it yields to the scheduler, which
 * advances the clock to the next thing that happens. Nothing here reads the
 * real clock: a run is exact and repeatable, whatever the machine's load.
 *
 * The GPU, as bench/card_handover measured an H200: one FIFO queue per
 * process (its context); it runs one context at a time, which keeps it
 * until its queue has no work left or, while another context has some
 * waiting, for TIMESLICE_NS (2 ms). Taking the GPU from a context that
 * still has work costs PREEMPT_NS idle (0.18 ms: two busy matmul loops
 * then execute 91.7 % of the time, as measured); moving to another context
 * when the last one ran dry, or from idle, costs SWITCH_NS (0.2 ms: the
 * switch and the hand-over's own latencies, which the shim's runs on the
 * H200 show: 30 + 70 and 90 beside an uncapped tenant come out as there). An
 * event completes when the GPU runs its context and reaches it (at once,
 * if it heads the queue of the context running). A queue holds at most QUEUE_DEPTH
 * kernels; a launch into a full queue blocks, as the driver's does.
 *
 * Usage: pace_sim [--no-turns | --no-side] SECONDS PROC...
 *   PROC = name:program:cap:container[:option]...
 *   --no-turns: tenants share the card side by side (GPUSLICE_COMPUTE_TURNS=0)
 *   --no-side: every process with the option noside (GPUSLICE_COMPUTE_SIDE=0
 *   in every container: turns as they were before side by side was the default)
 *   program: matmul (230 us kernels, 10 us launches), tiny (2 us kernels,
 *   10 us launches: CPU-bound), graph (570 us replays, 15 us launches),
 *   big (8 ms kernels), huge (13.7 ms: a 16384^2 fp16 matmul on an H200),
 *   long (40 ms kernels, 20 us launches both), train (a
 *   training step of 300 kernels and a sync), trainh (the same step
 *   host-bound: 73 us launches), trainv (host-bound, its kernels uneven: a
 *   0.6 ms one every 20 launches, 6 us between), eagerloop (an eager transformer's
 *   forward passes back to back, host-bound, a sync each); request tenants,
 *   whose latency runs from a request's arrival to its answer: request (two
 *   150 us kernels every 10 ms), eager (that transformer's forward: 150
 *   launches, 1.6 ms of GPU work behind 2.2 ms of launching, 40 a second),
 *   eagerl (a larger, GPU-bound one, 20 a second), graphreq (the small one as
 *   one graph replay), decode (32-128 tokens of 30 launches and a sync each, 4
 *   a second), cnn (60 launches of a batch-1 convnet, host-bound, 50 a second); forge (a
 *   hostile tenant without GPU work: every 0.5 ms it renews
 *   a turn for a process that does not exist), forgehigh (the same, saying
 *   high-priority work is queued), forgeblocked (every 0.5 ms it says its
 *   process waits for its own queue, a seat a holder waits for), forgegap
 *   (forge, letting go for 5 ms of every 100: no wait outlasts the grace);
 *   cap 0 = uncapped; processes with the same
 *   container share one bucket (one cap).
 *   options: high, low (priority; default normal), noshim (no limiter at all:
 *   plain time slicing), unseensync (its waits are none the shim's wrappers
 *   see: a poll that sleeps more than 2 ms between looks, a spin on mapped
 *   host memory), idle=FROM-TO (seconds without launches), rate=N
 *   (requests a second), poisson (requests at random, exponential gaps;
 *   default: periodic within 10 %), wake=MS (after the pacer kept it asleep
 *   1 ms or more within one launch, the host launches at half speed until it
 *   has lost MS ms: a CPU, driver or card that idled; default 0), gates (its
 *   shim has gates: an uncapped process whose turn it is not goes on
 *   launching behind a wait on a word of its own, which its watcher opens;
 *   the watcher polls every GS_PACE_POLL_NS, waking late as a sleep does,
 *   and WAKE_NS after the card's seq changed), gatefail (its shim has
 *   gates, but the driver refuses every wait: each close fails, and it
 *   waits for turns on the host), noside (GPUSLICE_COMPUTE_SIDE=0: uncapped,
 *   it waits for capped holders' turns however little of its time its own
 *   waits take)
 *   program may also be given by its figures, for shapes the suite does not
 *   have: req,KEY=V,... (a request tenant) or loop,KEY=V,... with k=US (a
 *   kernel), k2=US (every other kernel; with every=N all but one in N), l=US
 *   (a launch on the host), n=N (launches a step), h=US (host work after the
 *   step's sync), t=MIN-MAX (steps a request), r=N (requests a second)
 * Prints per process: "share <name> <w0> <w1> ..." percent per 1 s window of
 * the kernels it completed, against the same program alone and uncapped
 * (simulated first, in the same run); "cardtime <name> <w0> ...", percent
 * of each window the GPU executed its kernels; "launches <name> <n>";
 * "guests <name> <n>", the guest stretches it began after the first second;
 * "maxgap <name> <ms>", the longest it went without a kernel done after the
 * first second; "ticketed <name> <n>", of its launches after the first
 * second those that skipped the pacer on tickets (launch.c's, with turns:
 * between fence points, while the card is quiet); "maxwait <name> <ms>", the longest one launch was held back
 * by the limiter for others (after the first second; its own throttling is
 * not counted); "cut <name> <ms>", the credit its bucket's refills at its
 * settles earned and did not keep, over the burst (after the first second);
 * "side <name> <side> <epochs> <waits per mille> <learning> <long> <high> <short>",
 * side by side over its whole run, where it reckoned any epoch (the shim's
 * exit line: pace.h, epochs*); "holds <name> <n> <ms> <per mille> ...", a
 * capped one's holds for running short, how many and when the first began
 * with how short it ran (pace.h, hold_*);
 * for a request program "latency <name> <p50> <p99> <max>"
 * (ms, from its first launch to its last kernel done, after the first
 * second); then "executing <percent>", the time the GPU executed kernels.
 */
#define _GNU_SOURCE
#include "../../native/shim/src/pace.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#define MAX_PROCS 8
#define MAX_WINDOWS 64
#define QUEUE_DEPTH 1024
#define QUEUE_CAP 4096
#define TIMESLICE_NS 2e6
#define PREEMPT_NS 0.18e6
#define SWITCH_NS 0.2e6
#define STACK (256 * 1024)
/* What the driver calls cost the CPU (H200 order of magnitude). */
#define RECORD_NS 1500.0
#define QUERY_NS 400.0
#define WAKE_NS 500e3 /* a futex waiter runs this long after the word changed (the H200's VM) */
#define LATE_NS 60e3   /* a sleep's timeout ends this much late (an idle host's clock_nanosleep) */
#define NS 1e9
#define MAX_REQUESTS 8192
/* Less than this is nothing: a double's step at T of seconds is ~1e-7 ns, and
 * a remainder below it would stop the clock. */
#define EPS 1e-3

enum { LOOP, REQUEST, FORGE, FORGE_HIGH, FORGE_GAP, FORGE_BLOCKED };
/* A program: steps of `per_step` launches, each launch costing the host
 * launch_ns and its kernel kernel_ns of GPU time (every other one kernel2_ns,
 * if set: a model's big and small kernels); with `sync` each step ends with
 * a host sync and host_ns of host work (a forward pass, a decode token). A
 * request is steps_min..steps_max steps (tokens), arriving every every_ns
 * on average. */
struct program {
    const char *name;
    double kernel_ns, launch_ns;
    int kind;
    double kernel2_ns;
    int per_step, sync;
    double host_ns;
    int steps_min, steps_max;
    double every_ns;
    int long_every; /* if set: kernel_ns one launch in this many, kernel2_ns the rest */
};
static const struct program programs[] = {
    {"matmul", 230e3, 10e3, LOOP, 0, 1, 0, 0, 1, 1, 0, 0},
    {"tiny", 2e3, 10e3, LOOP, 0, 1, 0, 0, 1, 1, 0, 0},
    {"graph", 570e3, 15e3, LOOP, 0, 1, 0, 0, 1, 1, 0, 0},
    {"long", 40e6, 20e3, LOOP, 0, 1, 0, 0, 1, 1, 0, 0},
    {"big", 8e6, 20e3, LOOP, 0, 1, 0, 0, 1, 1, 0, 0},
    {"huge", 13.7e6, 20e3, LOOP, 0, 1, 0, 0, 1, 1, 0, 0},
    /* A training step: 300 kernels (GEMMs and elementwise), GPU-bound,
     * then the optimizer's host work and a sync. */
    {"train", 60e3, 8e3, LOOP, 6e3, 300, 1, 200e3, 1, 1, 0, 0},
    /* The same step host-bound, as PyTorch's eager training launched it on
     * the H200 (the card busy 43-47 % of the time uncapped). */
    {"trainh", 60e3, 73e3, LOOP, 6e3, 300, 1, 200e3, 1, 1, 0, 0},
    /* Host-bound on the whole (the card busy about half the time), but its
     * kernels are uneven: a 0.6 ms GEMM every 20 launches, the host ahead
     * of the card while it runs. */
    {"trainv", 600e3, 73e3, LOOP, 6e3, 300, 1, 200e3, 1, 1, 0, 20},
    /* An eager transformer's forward passes back to back, a sync each:
     * 150 launches, 1.6 ms of GPU work behind 2.2 ms of host launching. */
    {"eagerloop", 17e3, 14.6e3, LOOP, 4.3e3, 150, 1, 30e3, 1, 1, 0, 0},
    /* Requests (latency from arrival to answer). request: two 150 us
     * matmuls every 10 ms; eager: the transformer forward above, host-bound;
     * eagerl: a larger one, GPU-bound (6 ms of kernels behind 2.2 ms of
     * launches); graphreq: the small one as one graph replay; decode: 32 to
     * 128 tokens of 30 small launches and a sync each; cnn: a batch-1
     * convolutional network of 60 launches, host-bound as the H200 showed
     * resnet18 in PyTorch (3.3 ms a request alone, the card busy 0.75 ms
     * of it). */
    {"request", 150e3, 10e3, REQUEST, 0, 2, 1, 0, 1, 1, 10e6, 0},
    {"eager", 17e3, 14.6e3, REQUEST, 4.3e3, 150, 1, 30e3, 1, 1, 25e6, 0},
    {"eagerl", 60e3, 14.6e3, REQUEST, 20e3, 150, 1, 30e3, 1, 1, 50e6, 0},
    {"graphreq", 1.6e6, 20e3, REQUEST, 0, 1, 1, 30e3, 1, 1, 25e6, 0},
    {"decode", 12e3, 14e3, REQUEST, 4e3, 30, 1, 60e3, 32, 128, 250e6, 0},
    {"cnn", 20e3, 55e3, REQUEST, 5e3, 60, 1, 30e3, 1, 1, 20e6, 0},
    {"forge", 0, 0, FORGE, 0, 0, 0, 0, 0, 0, 0, 0},
    {"forgehigh", 0, 0, FORGE_HIGH, 0, 0, 0, 0, 0, 0, 0, 0},
    {"forgegap", 0, 0, FORGE_GAP, 0, 0, 0, 0, 0, 0, 0, 0},
    {"forgeblocked", 0, 0, FORGE_BLOCKED, 0, 0, 0, 0, 0, 0, 0, 0},
};
#define FORGE_EVERY_NS 0.5e6

struct sim_event {
    int recorded, done, waited;
    double t_done;
};

enum { EVENT_ITEM, KERNEL_ITEM, GATE_ITEM };
struct item {
    int kind; /* EVENT_ITEM, KERNEL_ITEM, GATE_ITEM */
    double remaining;
    struct sim_event *ev;
    unsigned epoch; /* GATE_ITEM: the context waits until its gate word reaches this */
};

enum { RUNNING, AT_TIME, ON_EVENT, ON_QUEUE, ON_WORD, ON_IDLE, FINISHED };

struct proc {
    struct gs_pace_io io; /* first: the callbacks find the process from it */
    char name[32];
    const struct program *prog;
    unsigned cap;
    int container;
    unsigned prio;
    int noshim;
    int unseen_syncs; /* its waits are none the shim's wrappers see (a lazy poll, a spin) */
    double idle_from, idle_to;
    int poisson;     /* requests arrive at random (exponential gaps) */
    double every_ns; /* requests: mean time between arrivals */
    double wake_ns;  /* host time lost, at half speed, after a wait of the pacer's */
    double wake_due; /* that loss, still to be spent */
    int gates;       /* its shim closes a gate instead of waiting for turns; 2: every close fails */
    int side;        /* GPUSLICE_COMPUTE_SIDE: on unless noside */
    unsigned gate_epoch, gate_word; /* the closed period, and what its word opens */
    double watch_at; /* the watcher's next look; INFINITY while the gate is open */
    double slept_ns; /* asleep in the pacer (sleeps, futex waits) within this launch */
    struct gs_pacer pacer;
    ucontext_t uc;
    char *stack;
    int state;
    double ready_at;
    struct sim_event *waiting;
    unsigned *word; /* ON_WORD: sleeping until *word != seen, or ready_at */
    unsigned seen;
    struct item q[QUEUE_CAP];
    int qhead, qlen, kernels_queued;
    struct sim_event events[64];
    struct sim_event *pool[64];
    int npool;
    long long completed[MAX_WINDOWS];
    double gpu_ns[MAX_WINDOWS]; /* the time the GPU executed its kernels, per window */
    unsigned long long launches;
    double last_done, max_gap; /* longest time without a kernel done, after 1 s */
    double max_wait;           /* longest a launch was held back for others, after 1 s */
    double credit_cut;         /* credit its settles' refills did not keep, after 1 s (ns) */
    double throttled_ns;       /* slept for its own cap during the current launch */
    double latency[MAX_REQUESTS];
    double open_ns[MAX_WINDOWS]; /* per window, the time it had a request open */
    int requests;
    unsigned long long rng;
    /* launch.c's tickets on a card with turns: launches between fence
     * points that skip the pacer while its last look found the card quiet
     * and the card's quiet words still read as then. */
    unsigned tickets;
    double tickets_until;
    unsigned long long quiet[GS_CARD_QUIET_WORDS];
    unsigned long long counted; /* launches on tickets, not yet handed to the pacer */
    unsigned long long ticketed; /* all its launches on tickets, after 1 s */
    unsigned long long guests;   /* guest stretches it began, after 1 s */
};

static double T;  /* the simulated clock, ns */
static double END;
static struct proc procs[MAX_PROCS];
static int nprocs;
static ucontext_t sched_uc;
static struct proc *current;
static struct gpuslice_bucket buckets[MAX_PROCS + 1];
/* What each bucket was charged in the first second (a new tenant's guest
 * stretch may still run there): "charged" is judged from 1 s on. */
static unsigned long long early_charged[MAX_PROCS + 1];
static unsigned bucket_cap[MAX_PROCS + 1];
static struct gpuslice_cardfile card;
static int turns = 1;
static int side_none; /* --no-side */
/* The GPU's state: the context it runs (-1: none), the one it ran last, how
 * much of the slice and of a context switch is left, the time it executed. */
static int gpu_on, gpu_last;
static double slice_left, switch_left, busy_ns;
static long switches, preemptions;
static int trace; /* PACE_SIM_TRACE=1: the GPU's and the turn's changes on stderr */

static void yield(void)
{
    swapcontext(&current->uc, &sched_uc);
}

static void spend(double ns)
{
    current->state = AT_TIME;
    current->ready_at = T + ns;
    yield();
}

/* ------------------------------------------------------------------ I/O */

static struct proc *of(struct gs_pace_io *io) { return (struct proc *)(void *)io; }

static void *ev_take(struct gs_pace_io *io)
{
    struct proc *p = of(io);
    return p->npool ? p->pool[--p->npool] : NULL;
}

static void ev_give(struct gs_pace_io *io, void *e)
{
    struct proc *p = of(io);
    p->pool[p->npool++] = e;
}

static void push(struct proc *p, struct item it)
{
    if (p->qlen == QUEUE_CAP) {
        fprintf(stderr, "pace_sim: queue overflow\n");
        exit(2);
    }
    p->q[(p->qhead + p->qlen++) % QUEUE_CAP] = it;
}

static int ev_record(struct gs_pace_io *io, void *e, void *stream)
{
    (void)stream;
    struct proc *p = of(io);
    struct sim_event *ev = e;
    ev->recorded = 1;
    ev->done = ev->waited = 0;
    push(p, (struct item){EVENT_ITEM, 0, ev, 0});
    spend(RECORD_NS);
    return 0;
}

static int not_capturing(struct gs_pace_io *io, void *stream)
{
    (void)io, (void)stream;
    return 0;
}

static int ev_done(struct gs_pace_io *io, void *e)
{
    (void)io;
    spend(QUERY_NS);
    return ((struct sim_event *)e)->done;
}

static int ev_wait(struct gs_pace_io *io, void *e)
{
    (void)io;
    struct sim_event *ev = e;
    if (!ev->done) {
        current->state = ON_EVENT;
        current->waiting = ev;
        yield();
    }
    ev->waited = 1;
    return 0;
}

/* As long as the query it stands for (QUERY_NS); after a wait for `to`,
 * where the pacer made no query, free as the time alone was. */
static int ev_gap(struct gs_pace_io *io, void *a, void *b, unsigned long long *ns)
{
    struct sim_event *from = a, *to = b;
    *ns = 0;
    if (!(to->waited ? to->done : ev_done(io, b)) || !from->done)
        return 0;
    double d = to->t_done - from->t_done;
    *ns = d > 0 ? (unsigned long long)d : 0;
    return 1;
}

static unsigned long long io_now(struct gs_pace_io *io)
{
    (void)io;
    return (unsigned long long)T;
}

/* A process the pacer kept asleep this long within one launch loses
 * wake_ns of its progress after it. */
#define WAKE_COLD_NS 1e6

static void waited(struct proc *p, double since)
{
    p->slept_ns += T - since;
}

static void io_sleep(struct gs_pace_io *io, unsigned long long ns)
{
    double t0 = T;
    spend((double)ns + LATE_NS);
    waited(of(io), t0);
}

/* A futex: the scheduler wakes the process WAKE_NS after the word changes,
 * or (late, as a sleep) at the timeout. */
static void io_wait_word(struct gs_pace_io *io, unsigned *word, unsigned seen,
                         unsigned long long ns)
{
    if (__atomic_load_n(word, __ATOMIC_RELAXED) != seen)
        return;
    double t0 = T;
    current->state = ON_WORD;
    current->word = word;
    current->seen = seen;
    current->ready_at = T + (double)ns + LATE_NS;
    yield();
    waited(of(io), t0);
}

static void io_wake_word(struct gs_pace_io *io, unsigned *word)
{
    (void)io, (void)word; /* the scheduler looks at every sleeper's word */
}

static void io_pause(struct gs_pace_io *io)
{
    (void)io;
    spend(5e3);
}

static unsigned io_settle(struct gs_pace_io *io, unsigned long long charge,
                          unsigned long long launches, unsigned long long held,
                          unsigned long long *wait)
{
    struct proc *p = of(io);
    struct gpuslice_bucket *b = &buckets[p->container];
    unsigned cap = bucket_cap[p->container];
    unsigned long long cut = cap ? gs_bucket_refill(b, cap, (unsigned long long)T, held) : 0;
    if (T >= NS)
        p->credit_cut += (double)cut;
    gs_bucket_charge(b, charge);
    if (T < NS)
        early_charged[p->container] += charge;
    b->launches += launches;
    *wait = gs_bucket_wait_ns(b, cap);
    return cap;
}

static void io_throttled(struct gs_pace_io *io, unsigned long long ns)
{
    buckets[of(io)->container].throttled_ns += ns;
}

static unsigned io_cap(struct gs_pace_io *io) { return bucket_cap[of(io)->container]; }

/* Gates: a wait item in the process's queue (one stream), opened by its
 * word; the watcher's first look after a poll, as a sleeper wakes. */
static int io_gate_close(struct gs_pace_io *io, void *stream)
{
    (void)stream;
    struct proc *p = of(io);
    if (p->gates == 2)
        return -1;
    push(p, (struct item){GATE_ITEM, 0, NULL, ++p->gate_epoch});
    p->watch_at = T + GS_PACE_POLL_NS + LATE_NS;
    spend(RECORD_NS);
    return 0;
}

static void io_gate_hold(struct gs_pace_io *io, void *stream)
{
    (void)io, (void)stream; /* one stream: it waits since the gate closed */
}

static void io_gate_open(struct gs_pace_io *io)
{
    struct proc *p = of(io);
    p->gate_word = p->gate_epoch;
    p->watch_at = INFINITY;
}

/* ------------------------------------------------------------ processes */

/* The shim's presence thread (presence.c): a capped or prioritised process
 * says it is on the card every GS_PACE_PRESENCE_NS while it lives, launching
 * or not; here at the tick before any launch, which is when it is read. */
static void presence(void)
{
    unsigned long long tick = (unsigned long long)(T / GS_PACE_PRESENCE_NS) * GS_PACE_PRESENCE_NS;
    for (int j = 0; j < nprocs && tick; j++) {
        const struct proc *q = &procs[j];
        if (!q->noshim && (q->cap || q->prio != GPUSLICE_PRIORITY_NORMAL) &&
            __atomic_load_n(&card.managed_ns, __ATOMIC_RELAXED) < tick)
            __atomic_store_n(&card.managed_ns, tick, __ATOMIC_RELAXED);
    }
}

static void launch_one(struct proc *p)
{
    /* A cold host launches at half speed until it has lost wake_ns. */
    double cold = p->wake_due < p->prog->launch_ns ? p->wake_due : p->prog->launch_ns;
    spend(p->prog->launch_ns + cold);
    p->wake_due -= cold;
    while (p->kernels_queued >= QUEUE_DEPTH) {
        p->state = ON_QUEUE;
        yield();
    }
    double t0 = T;
    /* As launch.c: an uncapped normal process is paced only while a capped
     * or prioritised tenant is on the card. */
    presence();
    unsigned long long m = __atomic_load_n(&card.managed_ns, __ATOMIC_RELAXED);
    int paced = !p->noshim && (p->cap || p->prio != GPUSLICE_PRIORITY_NORMAL || m);
    p->slept_ns = 0;
    int ticket = 0;
    if (paced && p->tickets && T < p->tickets_until) {
        unsigned long long w[GS_CARD_QUIET_WORDS];
        gs_card_quiet_words(&card, w);
        ticket = memcmp(w, p->quiet, sizeof w) == 0;
    }
    if (ticket) {
        p->tickets--;
        p->counted++;
        if (T >= NS)
            p->ticketed++;
        paced = 0;
    } else if (paced) {
        p->tickets = 0;
        if (p->counted)
            gs_pace_count(&p->pacer, p->counted, 0);
        p->counted = 0;
        unsigned long long stretch = p->pacer.guest_since_ns;
        gs_pace_launch_begin(&p->pacer, &p->io, NULL);
        if (p->pacer.guest_since_ns && p->pacer.guest_since_ns != stretch && T >= NS)
            p->guests++;
    }
    if (T >= NS && T - t0 > p->max_wait)
        p->max_wait = T - t0;
    if (trace && T - t0 > 4.7e6)
        fprintf(stderr, "%10.3f %s waited %.3f ms\n", T / 1e6, p->name, (T - t0) / 1e6);
    int second = p->prog->long_every ? p->launches % p->prog->long_every != 0 : p->launches & 1;
    double k = p->prog->kernel2_ns > 0 && second ? p->prog->kernel2_ns : p->prog->kernel_ns;
    push(p, (struct item){KERNEL_ITEM, k, NULL, 0});
    p->kernels_queued++;
    p->launches++;
    if (paced) {
        gs_pace_launch_end(&p->pacer, &p->io, NULL, 1);
        /* As launch.c's leave(), with turns: tickets only on a quiet card
         * (without turns launch.c hands them out always; not modelled). */
        p->tickets = turns && p->pacer.quiet ? gs_pace_room(&p->pacer) : 0;
        if (p->tickets) {
            p->tickets_until = (double)gs_pace_room_until(&p->pacer);
            memcpy(p->quiet, p->pacer.quiet_words, sizeof p->quiet);
        }
    }
    if (p->wake_ns > 0 && p->slept_ns >= WAKE_COLD_NS)
        p->wake_due = p->wake_ns;
}

/* A hostile tenant: every FORGE_EVERY_NS it says a process that does not
 * exist holds the card (or has high-priority work queued) for 4 ms. */
static void forge(struct proc *p)
{
    unsigned long long now = (unsigned long long)T;
    __atomic_store_n(&card.managed_ns, now, __ATOMIC_RELAXED);
    if (p->prog->kind == FORGE_GAP && fmod(T, 100e6) >= 95e6) {
        /* Lets go for 5 ms of every 100: no wait it causes outlasts the grace. */
        __atomic_store_n(&card.turn_owner, 0ull, __ATOMIC_RELAXED);
    } else if (p->prog->kind == FORGE_HIGH) {
        __atomic_store_n(&card.high_until_ns, now + 4000000ull, __ATOMIC_RELAXED);
    } else if (p->prog->kind == FORGE_BLOCKED) {
        /* A seat whose process, it says, waits for its own queue: a holder
         * taking the card waits for it, as for any stamp (16 ms at most). */
        int i = gs_card_seat(&card, p->io.token, now);
        if (i >= 0) {
            __atomic_store_n(&card.seats[i].backlog_ns, now, __ATOMIC_RELAXED);
            __atomic_store_n(&card.seats[i].drained_ns, 0ull, __ATOMIC_RELAXED);
            __atomic_store_n(&card.seats[i].flags, (unsigned)GPUSLICE_CARDFILE_BLOCKED,
                             __ATOMIC_RELAXED);
        }
    } else {
        __atomic_store_n(&card.turn_owner, 12345ull, __ATOMIC_RELAXED);
        __atomic_store_n(&card.turn_until_ns, now + 4000000ull, __ATOMIC_RELAXED);
    }
    spend(FORGE_EVERY_NS);
}

/* The host waits until its queue has run dry (a sync), and the shim's wait
 * wrappers (launch.c) tell the pacer when it returned. */
static void sync_queue(struct proc *p)
{
    unsigned long long began = (unsigned long long)T;
    if (p->kernels_queued) {
        p->state = ON_IDLE;
        yield();
    }
    if (!p->noshim && !p->unseen_syncs)
        gs_pace_waited(&p->pacer, began, (unsigned long long)T); /* the scheduler sees the seq's change */
}

static double uniform(struct proc *p)
{
    p->rng = p->rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(p->rng >> 11) / 9007199254740992.0;
}

/* One step of a program: its launches, then (with sync) the wait and the host's work. */
static void step(struct proc *p)
{
    for (int k = 0; k < p->prog->per_step; k++)
        launch_one(p);
    if (p->prog->sync) {
        sync_queue(p);
        if (p->prog->host_ns > 0)
            spend(p->prog->host_ns);
    }
}

static void run_proc(void)
{
    struct proc *p = current;
    double next_request = 5e6;
    while (T < END) {
        if (T >= p->idle_from && T < p->idle_to) {
            spend(p->idle_to - T);
            continue;
        }
        switch (p->prog->kind) {
        case FORGE:
        case FORGE_HIGH:
        case FORGE_GAP:
        case FORGE_BLOCKED:
            forge(p);
            break;
        case REQUEST: {
            if (T < next_request) {
                spend(next_request - T);
                continue;
            }
            /* Latency from the request's arrival: a request that queued
             * behind the one before waited too. */
            double arrived = next_request;
            int span = p->prog->steps_max - p->prog->steps_min + 1;
            int steps = p->prog->steps_min + (int)(uniform(p) * span);
            for (int k = 0; k < steps && k <= p->prog->steps_max; k++)
                step(p);
            sync_queue(p);
            if (arrived >= NS && p->requests < MAX_REQUESTS)
                p->latency[p->requests++] = T - arrived;
            for (double lo = arrived; lo < T;) { /* spread [arrived, T] over its windows */
                int w = (int)(lo / NS);
                double hi = T < (w + 1) * NS ? T : (w + 1) * NS;
                if (w >= 0 && w < MAX_WINDOWS)
                    p->open_ns[w] += hi - lo;
                lo = hi;
            }
            /* Periodic: every_ns apart within 10 %, so that the requests meet
             * the neighbours in every phase of their turns; Poisson:
             * exponential gaps of that mean. A fixed generator: runs repeat. */
            double u = uniform(p);
            next_request += p->poisson ? -p->every_ns * log(1.0 - u)
                                       : p->every_ns * (0.9 + 0.2 * u);
            break;
        }
        default:
            step(p);
        }
    }
    p->state = FINISHED;
    yield();
}

static void trampoline(void) { run_proc(); }

/* Work of any kind: an event in a context's queue is done only when the GPU
 * runs that context (what the H200's markers showed: bench/card_handover). */
static int has_work(int i)
{
    const struct proc *p = &procs[i];
    if (!p->qlen)
        return 0;
    const struct item *it = &p->q[p->qhead];
    return it->kind != GATE_ITEM || it->epoch <= p->gate_word;
}

static int other_waiting(int i)
{
    for (int j = 0; j < nprocs; j++)
        if (j != i && has_work(j))
            return 1;
    return 0;
}

/* The next context with a kernel, round robin after `after`; -1 if none. */
static int next_context(int after)
{
    for (int k = 1; k <= nprocs; k++) {
        int j = ((after < 0 ? -1 : after) + k + nprocs) % nprocs;
        if (has_work(j))
            return j;
    }
    return -1;
}

/* Pop what completes at the head: events now, kernels with no work left. */
static void settle_heads(void)
{
    for (int i = 0; i < nprocs; i++) { /* an open gate passes at once, whoever runs */
        struct proc *p = &procs[i];
        while (p->qlen && p->q[p->qhead].kind == GATE_ITEM &&
               p->q[p->qhead].epoch <= p->gate_word) {
            p->qhead = (p->qhead + 1) % QUEUE_CAP;
            p->qlen--;
        }
    }
    if (gpu_on >= 0 && switch_left <= EPS) {
        struct proc *p = &procs[gpu_on];
        while (p->qlen) {
            struct item *it = &p->q[p->qhead];
            if (it->kind == GATE_ITEM) {
                if (it->epoch > p->gate_word)
                    break;
            } else if (it->kind == KERNEL_ITEM) {
                if (it->remaining > EPS)
                    break;
                int w = (int)(T / NS);
                if (w >= 0 && w < MAX_WINDOWS)
                    p->completed[w]++;
                if (T >= NS && T - p->last_done > p->max_gap)
                    p->max_gap = T - p->last_done;
                p->last_done = T;
                p->kernels_queued--;
                if (p->state == ON_QUEUE && p->kernels_queued < QUEUE_DEPTH)
                    p->state = AT_TIME, p->ready_at = T;
                if (p->state == ON_IDLE && p->kernels_queued == 0)
                    p->state = AT_TIME, p->ready_at = T;
            } else {
                it->ev->done = 1;
                it->ev->t_done = T;
                if (p->state == ON_EVENT && p->waiting == it->ev)
                    p->state = AT_TIME, p->ready_at = T;
            }
            p->qhead = (p->qhead + 1) % QUEUE_CAP;
            p->qlen--;
        }
    }
}

static void simulate(double seconds)
{
    T = 0;
    END = seconds * NS;
    memset(&card, 0, sizeof card);
    for (int i = 0; i < nprocs; i++) {
        struct proc *p = &procs[i];
        gs_pace_reset(&p->pacer);
        p->io = (struct gs_pace_io){
            .event_take = ev_take, .event_give = ev_give, .event_record = ev_record,
            .capturing = not_capturing, .event_done = ev_done, .event_wait = ev_wait, .event_gap = ev_gap,
            .now = io_now, .sleep = io_sleep, .settle = io_settle, .throttled = io_throttled,
            .cap = io_cap, .card = &card, .seat = -1, .token = (unsigned long long)i + 1,
            .turns = turns, .side = p->side, .prio = p->prio, .wait_word = io_wait_word,
            .wake_word = io_wake_word, .pause = io_pause,
        };
        if (p->gates) {
            p->io.gate_close = io_gate_close;
            p->io.gate_hold = io_gate_hold;
            p->io.gate_open = io_gate_open;
        }
        p->gate_epoch = p->gate_word = 0;
        p->watch_at = INFINITY;
        p->npool = 0;
        for (int e = 0; e < 64; e++)
            p->pool[p->npool++] = &p->events[e];
        p->qhead = p->qlen = p->kernels_queued = 0;
        p->launches = 0;
        p->last_done = p->max_gap = p->max_wait = 0;
        p->requests = 0;
        p->rng = (unsigned long long)i + 1;
        memset(p->completed, 0, sizeof p->completed);
        memset(p->gpu_ns, 0, sizeof p->gpu_ns);
        memset(p->open_ns, 0, sizeof p->open_ns);
        p->state = AT_TIME;
        p->ready_at = 0;
        getcontext(&p->uc);
        p->uc.uc_stack.ss_sp = p->stack;
        p->uc.uc_stack.ss_size = STACK;
        p->uc.uc_link = &sched_uc;
        makecontext(&p->uc, trampoline, 0);
        bucket_cap[p->container] = p->cap;
    }
    memset(buckets, 0, sizeof buckets);
    memset(early_charged, 0, sizeof early_charged);
    gpu_on = gpu_last = -1;
    slice_left = switch_left = busy_ns = 0;
    switches = preemptions = 0;
    unsigned seq_seen = 0;
    for (;;) {
        /* The gates' watchers whose look is due (they run on threads of their
         * own: no coroutine, nothing of the pacer's but its gate atomics). */
        for (int i = 0; i < nprocs; i++) {
            struct proc *q = &procs[i];
            if (q->watch_at <= T && !gs_pace_gate_watch(&q->pacer, &q->io, (unsigned long long)T))
                q->watch_at = T + GS_PACE_POLL_NS + LATE_NS;
        }
        settle_heads();
        /* Run everyone whose time has come, earliest first. */
        for (;;) {
            struct proc *next = NULL;
            for (int i = 0; i < nprocs; i++) {
                struct proc *q = &procs[i];
                if (q->state == ON_WORD &&
                    __atomic_load_n(q->word, __ATOMIC_RELAXED) != q->seen) {
                    q->state = AT_TIME;
                    if (q->ready_at > T + WAKE_NS)
                        q->ready_at = T + WAKE_NS;
                }
                if ((q->state == AT_TIME || q->state == ON_WORD) && q->ready_at <= T &&
                    (!next || q->ready_at < next->ready_at))
                    next = q;
            }
            if (!next)
                break;
            next->state = RUNNING;
            current = next;
            swapcontext(&sched_uc, &next->uc);
            settle_heads(); /* an event recorded behind a kernel that just ended */
            unsigned seq = __atomic_load_n(&card.seq, __ATOMIC_RELAXED);
            if (seq != seq_seen) { /* watchers asleep on the seq wake late */
                seq_seen = seq;
                for (int i = 0; i < nprocs; i++)
                    if (procs[i].watch_at > T + WAKE_NS && procs[i].watch_at < INFINITY)
                        procs[i].watch_at = T + WAKE_NS;
            }
        }
        int live = 0;
        double t_next = INFINITY;
        for (int i = 0; i < nprocs; i++) {
            if (procs[i].state != FINISHED)
                live = 1;
            if ((procs[i].state == AT_TIME || procs[i].state == ON_WORD) &&
                procs[i].ready_at < t_next)
                t_next = procs[i].ready_at;
            if (procs[i].watch_at < t_next)
                t_next = procs[i].watch_at;
        }
        if (!live)
            return;
        /* The GPU: switching, running a context, or idle. */
        if (switch_left <= EPS && (gpu_on < 0 || !has_work(gpu_on) ||
                                   (slice_left <= EPS && other_waiting(gpu_on)))) {
            int next = next_context(gpu_on);
            if (next >= 0 && next != gpu_on) {
                /* Taking the GPU from a context with work left costs more. */
                if (gpu_on >= 0 && has_work(gpu_on))
                    switch_left = PREEMPT_NS, preemptions++;
                else if (gpu_on >= 0 || next != gpu_last)
                    switch_left = SWITCH_NS, switches++;
                gpu_on = next;
                slice_left = TIMESLICE_NS;
            } else if (next < 0) {
                gpu_on = -1;
            } else {
                slice_left = TIMESLICE_NS; /* nobody else wants it: a new slice */
            }
        }
        /* The slice runs only while someone else waits for the GPU. */
        if (switch_left <= EPS && gpu_on >= 0 && !other_waiting(gpu_on))
            slice_left = TIMESLICE_NS;
        if (switch_left > EPS) {
            if (T + switch_left < t_next)
                t_next = T + switch_left;
        } else if (gpu_on >= 0) {
            double t = T + procs[gpu_on].q[procs[gpu_on].qhead].remaining;
            if (t < t_next)
                t_next = t;
            if (other_waiting(gpu_on) && T + slice_left < t_next)
                t_next = T + slice_left;
        }
        if (t_next == INFINITY) {
            fprintf(stderr, "pace_sim: deadlock at %.0f ns\n", T);
            exit(2);
        }
        if (trace) {
            static int last_on = -2;
            static unsigned long long last_owner;
            if (gpu_on != last_on)
                fprintf(stderr, "%10.3f gpu %s%s\n", T / 1e6, gpu_on < 0 ? "idle" : procs[gpu_on].name,
                        switch_left > EPS ? " (switching)" : "");
            if (card.turn_owner != last_owner)
                fprintf(stderr, "%10.3f turn %llu\n", T / 1e6, card.turn_owner);
            last_on = gpu_on;
            last_owner = card.turn_owner;
        }
        double dt = t_next - T;
        if (switch_left > EPS) {
            switch_left -= dt;
        } else if (gpu_on >= 0) {
            procs[gpu_on].q[procs[gpu_on].qhead].remaining -= dt;
            slice_left -= dt;
            gpu_last = gpu_on;
            busy_ns += dt;
            /* Card time, per window (a step never spans more than one). */
            int w = (int)(T / NS);
            if (w >= 0 && w < MAX_WINDOWS)
                procs[gpu_on].gpu_ns[w] += dt;
        }
        T = t_next;
        settle_heads();
    }
}

/* Programs given by their figures on the command line (shapes the suite
 * does not have: the outside checks), one per process at most. */
static struct program custom[MAX_PROCS];
static int ncustom;

/* "req,KEY=V,..." or "loop,KEY=V,...": k kernel us, k2 every other (or with
 * every=N: all but one in N) kernel us, l launch us, n launches a step, h
 * host us after the step's sync, t=MIN-MAX steps a request, r requests a
 * second. NULL if malformed or out of range. */
static const struct program *program_given(const char *spec)
{
    char buf[128], *save = NULL;
    if (ncustom == MAX_PROCS || strlen(spec) >= sizeof buf)
        return NULL;
    strcpy(buf, spec);
    char *kind = strtok_r(buf, ",", &save);
    struct program g = {"custom", 0, 10e3, LOOP, 0, 1, 0, 0, 1, 1, 0, 0};
    if (!kind) /* nothing but commas */
        return NULL;
    if (strcmp(kind, "req") == 0)
        g.kind = REQUEST, g.sync = 1, g.every_ns = NS / 10;
    else if (strcmp(kind, "loop") != 0)
        return NULL;
    for (char *kv; (kv = strtok_r(NULL, ",", &save));) {
        double v, w;
        char tail;
        if (sscanf(kv, "k=%lf%c", &v, &tail) == 1 && v > 0 && v <= 1e6)
            g.kernel_ns = v * 1e3;
        else if (sscanf(kv, "k2=%lf%c", &v, &tail) == 1 && v > 0 && v <= 1e6)
            g.kernel2_ns = v * 1e3;
        else if (sscanf(kv, "every=%lf%c", &v, &tail) == 1 && v >= 2 && v <= 1000)
            g.long_every = (int)v;
        else if (sscanf(kv, "l=%lf%c", &v, &tail) == 1 && v > 0 && v <= 1e4)
            g.launch_ns = v * 1e3;
        else if (sscanf(kv, "n=%lf%c", &v, &tail) == 1 && v >= 1 && v <= 2000)
            g.per_step = (int)v;
        else if (sscanf(kv, "h=%lf%c", &v, &tail) == 1 && v >= 0 && v <= 1e6)
            g.host_ns = v * 1e3, g.sync = 1;
        else if (sscanf(kv, "t=%lf-%lf%c", &v, &w, &tail) == 2 && v >= 1 && w >= v && w <= 1000)
            g.steps_min = (int)v, g.steps_max = (int)w;
        else if (sscanf(kv, "r=%lf%c", &v, &tail) == 1 && v > 0 && v <= 10000 &&
                 g.kind == REQUEST)
            g.every_ns = NS / v;
        else
            return NULL;
    }
    if (g.kernel_ns <= 0)
        return NULL;
    custom[ncustom] = g;
    return &custom[ncustom++];
}

static const struct program *program_named(const char *name)
{
    if (strchr(name, ','))
        return program_given(name);
    for (size_t i = 0; i < sizeof programs / sizeof programs[0]; i++)
        if (strcmp(programs[i].name, name) == 0)
            return &programs[i];
    return NULL;
}

/* Kernels per second of a program alone and uncapped (0 for one that does
 * not loop: its share is not measured). */
static double baseline(const struct program *prog, double seconds)
{
    if (prog->kind != LOOP)
        return 0;
    struct proc saved = procs[0];
    int saved_n = nprocs;
    nprocs = 1;
    snprintf(procs[0].name, sizeof procs[0].name, "baseline");
    procs[0].prog = prog;
    procs[0].cap = 0;
    procs[0].prio = GPUSLICE_PRIORITY_NORMAL;
    procs[0].noshim = 0;
    procs[0].container = MAX_PROCS;
    procs[0].idle_from = procs[0].idle_to = -1;
    simulate(seconds);
    double sum = 0;
    for (int w = 1; w < (int)seconds; w++)
        sum += (double)procs[0].completed[w];
    double rate = sum / (seconds - 1);
    char *stack = procs[0].stack;
    procs[0] = saved;
    procs[0].stack = stack;
    nprocs = saved_n;
    return rate;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double percentile(double *v, int n, double pct)
{
    int i = (int)(pct / 100.0 * (n - 1) + 0.5);
    return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

/* name:program:cap:container[:option]...; 0, or -1 with a message. */
static int parse_proc(const char *arg, struct proc *p)
{
    char buf[256], *save = NULL;
    if (strlen(arg) >= sizeof buf)
        return -1;
    strcpy(buf, arg);
    char *name = strtok_r(buf, ":", &save), *prog = strtok_r(NULL, ":", &save);
    char *cap = strtok_r(NULL, ":", &save), *container = strtok_r(NULL, ":", &save);
    if (!name || !prog || !cap || !container || strlen(name) >= sizeof p->name)
        return -1;
    char *end;
    long c = strtol(cap, &end, 10), k;
    if (*end || c < 0 || c > 100)
        return -1;
    k = strtol(container, &end, 10);
    if (*end || k < 0 || k >= MAX_PROCS)
        return -1;
    snprintf(p->name, sizeof p->name, "%s", name);
    p->prog = program_named(prog);
    p->cap = (unsigned)c;
    p->container = (int)k;
    p->prio = GPUSLICE_PRIORITY_NORMAL;
    p->noshim = 0;
    p->idle_from = p->idle_to = -1;
    p->poisson = 0;
    p->every_ns = p->prog ? p->prog->every_ns : 0;
    p->wake_ns = p->wake_due = 0;
    p->gates = 0;
    p->side = !side_none;
    for (char *opt; (opt = strtok_r(NULL, ":", &save));) {
        double from, to;
        char tail;
        if (strcmp(opt, "high") == 0)
            p->prio = GPUSLICE_PRIORITY_HIGH;
        else if (strcmp(opt, "low") == 0)
            p->prio = GPUSLICE_PRIORITY_LOW;
        else if (strcmp(opt, "normal") == 0)
            p->prio = GPUSLICE_PRIORITY_NORMAL;
        else if (strcmp(opt, "noshim") == 0)
            p->noshim = 1;
        else if (strcmp(opt, "unseensync") == 0)
            p->unseen_syncs = 1;
        else if (strcmp(opt, "poisson") == 0)
            p->poisson = 1;
        else if (strcmp(opt, "gates") == 0)
            p->gates = 1;
        else if (strcmp(opt, "gatefail") == 0)
            p->gates = 2;
        else if (strcmp(opt, "noside") == 0)
            p->side = 0;
        else if (sscanf(opt, "rate=%lf%c", &from, &tail) == 1 && from > 0 && from <= 10000)
            p->every_ns = NS / from;
        else if (sscanf(opt, "wake=%lf%c", &from, &tail) == 1 && from >= 0 && from <= 100)
            p->wake_ns = from * 1e6;
        else if (sscanf(opt, "idle=%lf-%lf%c", &from, &to, &tail) == 2 && from < to)
            p->idle_from = from * NS, p->idle_to = to * NS;
        else
            return -1;
    }
    return p->prog ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--no-turns") == 0) {
        turns = 0;
        argv++;
        argc--;
    } else if (argc > 1 && strcmp(argv[1], "--no-side") == 0) {
        side_none = 1;
        argv++;
        argc--;
    }
    if (argc < 3) {
        fprintf(stderr, "usage: pace_sim [--no-turns | --no-side] SECONDS name:program:cap:container"
                        "[:option]...\n");
        return 2;
    }
    double seconds = atof(argv[1]);
    if (seconds < 2 || seconds >= MAX_WINDOWS) {
        fprintf(stderr, "pace_sim: SECONDS=%s must be 2..%d\n", argv[1], MAX_WINDOWS - 1);
        return 2;
    }
    for (int a = 2; a < argc; a++) {
        if (nprocs == MAX_PROCS) {
            fprintf(stderr, "pace_sim: at most %d processes\n", MAX_PROCS);
            return 2;
        }
        if (parse_proc(argv[a], &procs[nprocs]) != 0) {
            fprintf(stderr, "pace_sim: bad process \"%s\" (name:program:cap:container"
                    "[:option]..., program matmul|tiny|graph|big|huge|long|train|trainh|trainv|eagerloop|request|eager|"
                    "eagerl|graphreq|decode|cnn|forge|forgehigh|forgegap|forgeblocked|req,...|loop,..., cap 0-100, container 0-%d, "
                    "options high|low|normal|noshim|unseensync|idle=FROM-TO|rate=N|poisson|wake=MS|gates|gatefail|noside)\n",
                    argv[a], MAX_PROCS - 1);
            return 2;
        }
        nprocs++;
    }
    trace = getenv("PACE_SIM_TRACE") != NULL;
    for (int i = 0; i < MAX_PROCS; i++)
        procs[i].stack = malloc(STACK);
    double rates[MAX_PROCS];
    int want_trace = trace;
    trace = 0;
    for (int i = 0; i < nprocs; i++)
        rates[i] = baseline(procs[i].prog, seconds);
    trace = want_trace;
    simulate(seconds);
    for (int i = 0; i < nprocs; i++) {
        struct proc *p = &procs[i];
        printf("share %s", p->name);
        for (int w = 0; w < (int)seconds; w++)
            printf(" %.2f", rates[i] > 0 ? 100.0 * (double)p->completed[w] / rates[i] : 0.0);
        printf("\ncardtime %s", p->name);
        for (int w = 0; w < (int)seconds; w++)
            printf(" %.2f", 100.0 * p->gpu_ns[w] / NS);
        double gpu = 0;
        for (int w = 1; w < (int)seconds; w++)
            gpu += p->gpu_ns[w];
        /* What the limiter charged against what the GPU ran, from 1 s on: 1 is exact. */
        unsigned long long ch = buckets[p->container].charged_ns - early_charged[p->container];
        printf("\ncharged %s %.3f\n", p->name, gpu > 0 ? (double)ch / gpu : 0.0);
        printf("launches %s %llu\n", p->name, p->launches);
        printf("ticketed %s %llu\n", p->name, p->ticketed);
        printf("guests %s %llu\n", p->name, p->guests);
        printf("maxgap %s %.2f\n", p->name, p->max_gap / 1e6);
        printf("maxwait %s %.2f\n", p->name, p->max_wait / 1e6);
        printf("cut %s %.2f\n", p->name, p->credit_cut / 1e6);
        if (p->pacer.epochs) /* side by side (pace_side.c), its whole run: as the shim's exit line */
            printf("side %s %llu %llu %d %llu %llu %llu %llu\n", p->name, p->pacer.epochs_side,
                   p->pacer.epochs, p->pacer.waiting_pm, p->pacer.epochs_learning,
                   p->pacer.epochs_long, p->pacer.epochs_high, p->pacer.epochs_owed);
        if (p->pacer.holds) { /* its holds for running short, as the shim's exit line */
            printf("holds %s %u", p->name, p->pacer.holds);
            for (unsigned k = 0; k < p->pacer.holds && k < GS_PACE_HOLDS_KEPT; k++)
                printf(" %u %d", p->pacer.hold_at_ms[k], p->pacer.hold_owed_pm[k]);
            printf("\n");
        }
        if (p->requests) {
            qsort(p->latency, (size_t)p->requests, sizeof p->latency[0], by_value);
            /* Per window, the time it had a request open: what it claimed of the card. */
            printf("open %s", p->name);
            for (int w = 0; w < (int)seconds; w++)
                printf(" %.2f", 100.0 * p->open_ns[w] / NS);
            printf("\n");
            printf("latency %s %.3f %.3f %.3f\n", p->name,
                   percentile(p->latency, p->requests, 50) / 1e6,
                   percentile(p->latency, p->requests, 99) / 1e6,
                   p->latency[p->requests - 1] / 1e6);
        }
    }
    printf("executing %.2f\n", 100.0 * busy_ns / (seconds * NS));
    printf("switches %.0f %.0f\n", switches / seconds, preemptions / seconds); /* per second */
    for (int i = 0; i < MAX_PROCS; i++)
        free(procs[i].stack);
    return 0;
}
