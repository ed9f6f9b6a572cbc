/*
 * pace_sim: the compute limiter (native/shim/src/pace.c, the very code the
 * shim runs) driven by a simulated GPU under a simulated clock.
 *
 * Each simulated process is a coroutine (ucontext) that runs a launch loop
 * through gs_pace_launch_begin/end with an I/O table backed by the model
 * below; whenever it would spend time (CPU work, a blocking event wait, a
 * sleep) it yields to the scheduler, which advances the clock to the next
 * thing that happens. Nothing here reads the real clock: a run is exact and
 * repeatable, whatever the machine's load.
 *
 * The GPU: one FIFO queue per process (its context). It runs one context at
 * a time: the one it runs keeps it until its queue has no kernel left or,
 * while another context has one waiting, for TIMESLICE_NS; each change of
 * context leaves it idle for SWITCH_NS. Two busy matmul loops on an H200
 * switched about 290 times a second with the GPU executing kernels 91-92 %
 * of the time, which these two numbers reproduce. An event at the head
 * completes at once. A queue holds at most QUEUE_DEPTH kernels; a launch
 * into a full queue blocks, as the driver's does.
 *
 * Usage: pace_sim [--no-turns] SECONDS PROC...
 *   PROC = name:program:cap:container[:idle_from:idle_to]
 *   --no-turns: tenants share the card side by side (GPUSLICE_COMPUTE_TURNS=0)
 *   program: matmul (230 us kernels, 10 us launches), tiny (2 us kernels,
 *   10 us launches: CPU-bound), graph (570 us replays, 15 us launches),
 *   big (8 ms kernels), long (40 ms kernels, 20 us launches both); cap 0 =
 *   uncapped; processes with
 *   the same container share one bucket (one cap).
 * Prints per process: "share <name> <w0> <w1> ..." percent per 1 s window of
 * the kernels it completed, against the same program alone and uncapped
 * (simulated first, in the same run), "launches <name> <n>" and "maxgap
 * <name> <ms>", the longest it went without a kernel done after the first
 * second; then "executing <percent>", the time the GPU executed kernels.
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
#define TIMESLICE_NS 3e6
#define SWITCH_NS 0.3e6
#define STACK (256 * 1024)
/* What the driver calls cost the CPU (H200 order of magnitude). */
#define RECORD_NS 1500.0
#define QUERY_NS 400.0
#define NS 1e9

struct program {
    const char *name;
    double kernel_ns, launch_ns;
};
static const struct program programs[] = {
    {"matmul", 230e3, 10e3},
    {"tiny", 2e3, 10e3},
    {"graph", 570e3, 15e3},
    {"long", 40e6, 20e3},
    {"big", 8e6, 20e3},
};

struct sim_event {
    int recorded, done;
    double t_done;
};

struct item {
    int is_kernel;
    double remaining;
    struct sim_event *ev;
};

enum { RUNNING, AT_TIME, ON_EVENT, ON_QUEUE, FINISHED };

struct proc {
    struct gs_pace_io io; /* first: the callbacks find the process from it */
    char name[32];
    const struct program *prog;
    unsigned cap;
    int container;
    double idle_from, idle_to;
    struct gs_pacer pacer;
    ucontext_t uc;
    char *stack;
    int state;
    double ready_at;
    struct sim_event *waiting;
    struct item q[QUEUE_CAP];
    int qhead, qlen, kernels_queued;
    struct sim_event events[64];
    struct sim_event *pool[64];
    int npool;
    long long completed[MAX_WINDOWS];
    unsigned long long launches;
    double last_done, max_gap; /* longest time without a kernel done, after 1 s */
};

static double T;  /* the simulated clock, ns */
static double END;
static struct proc procs[MAX_PROCS];
static int nprocs;
static ucontext_t sched_uc;
static struct proc *current;
static struct gpuslice_bucket buckets[MAX_PROCS + 1];
static unsigned bucket_cap[MAX_PROCS + 1];
static struct gpuslice_card card;
static int turns = 1;
/* The GPU's state: the context it runs (-1: none), the one it ran last, how
 * much of the slice and of a context switch is left, the time it executed. */
static int gpu_on, gpu_last;
static double slice_left, switch_left, busy_ns;

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
    ev->done = 0;
    push(p, (struct item){0, 0, ev});
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
    return 0;
}

static unsigned long long ev_gap(struct gs_pace_io *io, void *a, void *b)
{
    (void)io;
    double d = ((struct sim_event *)b)->t_done - ((struct sim_event *)a)->t_done;
    return d > 0 ? (unsigned long long)d : 0;
}

static unsigned long long io_now(struct gs_pace_io *io)
{
    (void)io;
    return (unsigned long long)T;
}

static void io_sleep(struct gs_pace_io *io, unsigned long long ns)
{
    (void)io;
    /* clock_nanosleep wakes late; 60 us is what an idle host does. */
    spend((double)ns + 60e3);
}

static unsigned io_settle(struct gs_pace_io *io, unsigned long long charge,
                          unsigned long long launches, unsigned long long *wait)
{
    struct proc *p = of(io);
    struct gpuslice_bucket *b = &buckets[p->container];
    unsigned cap = bucket_cap[p->container];
    if (cap)
        gs_bucket_refill(b, cap, (unsigned long long)T);
    gs_bucket_charge(b, charge);
    b->launches += launches;
    *wait = gs_bucket_wait_ns(b, cap);
    return cap;
}

static void io_throttled(struct gs_pace_io *io, unsigned long long ns)
{
    buckets[of(io)->container].throttled_ns += ns;
}

static unsigned io_cap(struct gs_pace_io *io) { return bucket_cap[of(io)->container]; }

/* ------------------------------------------------------------ processes */

static void run_proc(void)
{
    struct proc *p = current;
    while (T < END) {
        if (T >= p->idle_from && T < p->idle_to) {
            spend(p->idle_to - T);
            continue;
        }
        spend(p->prog->launch_ns);
        while (p->kernels_queued >= QUEUE_DEPTH) {
            p->state = ON_QUEUE;
            yield();
        }
        gs_pace_launch_begin(&p->pacer, &p->io, NULL);
        push(p, (struct item){1, p->prog->kernel_ns, NULL});
        p->kernels_queued++;
        p->launches++;
        gs_pace_launch_end(&p->pacer, &p->io, NULL, 1);
    }
    p->state = FINISHED;
    yield();
}

static void trampoline(void) { run_proc(); }

static int has_kernel(int i)
{
    return procs[i].qlen && procs[i].q[procs[i].qhead].is_kernel;
}

static int other_waiting(int i)
{
    for (int j = 0; j < nprocs; j++)
        if (j != i && has_kernel(j))
            return 1;
    return 0;
}

/* The next context with a kernel, round robin after `after`; -1 if none. */
static int next_context(int after)
{
    for (int k = 1; k <= nprocs; k++) {
        int j = ((after < 0 ? -1 : after) + k + nprocs) % nprocs;
        if (has_kernel(j))
            return j;
    }
    return -1;
}

/* Pop what completes at the head: events now, kernels with no work left. */
static void settle_heads(void)
{
    for (int i = 0; i < nprocs; i++) {
        struct proc *p = &procs[i];
        while (p->qlen) {
            struct item *it = &p->q[p->qhead];
            if (it->is_kernel) {
                if (it->remaining > 1e-6)
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
            .capturing = not_capturing, .event_done = ev_done, .event_wait = ev_wait, .event_gap_ns = ev_gap,
            .now = io_now, .sleep = io_sleep, .settle = io_settle, .throttled = io_throttled,
            .cap = io_cap, .card = &card, .slot = -1, .token = (unsigned long long)i + 1,
            .turns = turns,
        };
        p->npool = 0;
        for (int e = 0; e < 64; e++)
            p->pool[p->npool++] = &p->events[e];
        p->qhead = p->qlen = p->kernels_queued = 0;
        p->launches = 0;
        p->last_done = p->max_gap = 0;
        memset(p->completed, 0, sizeof p->completed);
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
    gpu_on = gpu_last = -1;
    slice_left = switch_left = busy_ns = 0;
    for (;;) {
        /* Run everyone whose time has come, earliest first. */
        for (;;) {
            struct proc *next = NULL;
            for (int i = 0; i < nprocs; i++)
                if (procs[i].state == AT_TIME && procs[i].ready_at <= T &&
                    (!next || procs[i].ready_at < next->ready_at))
                    next = &procs[i];
            if (!next)
                break;
            next->state = RUNNING;
            current = next;
            swapcontext(&sched_uc, &next->uc);
            settle_heads(); /* an event recorded into an idle queue is done at once */
        }
        int live = 0;
        double t_next = INFINITY;
        for (int i = 0; i < nprocs; i++) {
            if (procs[i].state != FINISHED)
                live = 1;
            if (procs[i].state == AT_TIME && procs[i].ready_at < t_next)
                t_next = procs[i].ready_at;
        }
        if (!live)
            return;
        /* The GPU: switching, running a context, or idle. */
        if (switch_left <= 0 && (gpu_on < 0 || !has_kernel(gpu_on) ||
                                 (slice_left <= 0 && other_waiting(gpu_on)))) {
            int next = next_context(gpu_on);
            if (next >= 0 && next != gpu_on) {
                if (gpu_on >= 0 || next != gpu_last)
                    switch_left = SWITCH_NS;
                gpu_on = next;
                slice_left = TIMESLICE_NS;
            } else if (next < 0) {
                gpu_on = -1;
            } else {
                slice_left = TIMESLICE_NS; /* nobody else wants it: a new slice */
            }
        }
        /* The slice runs only while someone else waits for the GPU. */
        if (switch_left <= 0 && gpu_on >= 0 && !other_waiting(gpu_on))
            slice_left = TIMESLICE_NS;
        if (switch_left > 0) {
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
        double dt = t_next - T;
        if (switch_left > 0) {
            switch_left -= dt;
        } else if (gpu_on >= 0) {
            procs[gpu_on].q[procs[gpu_on].qhead].remaining -= dt;
            slice_left -= dt;
            gpu_last = gpu_on;
            busy_ns += dt;
        }
        T = t_next;
        settle_heads();
    }
}

static const struct program *program_named(const char *name)
{
    for (size_t i = 0; i < sizeof programs / sizeof programs[0]; i++)
        if (strcmp(programs[i].name, name) == 0)
            return &programs[i];
    return NULL;
}

/* Kernels per second of a program alone and uncapped. */
static double baseline(const struct program *prog, double seconds)
{
    struct proc saved = procs[0];
    int saved_n = nprocs;
    nprocs = 1;
    snprintf(procs[0].name, sizeof procs[0].name, "baseline");
    procs[0].prog = prog;
    procs[0].cap = 0;
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

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--no-turns") == 0) {
        turns = 0;
        argv++;
        argc--;
    }
    if (argc < 3) {
        fprintf(stderr, "usage: pace_sim [--no-turns] SECONDS name:program:cap:container[:idle_from:idle_to]...\n");
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
        struct proc *p = &procs[nprocs];
        char prog[32];
        double from = -1, to = -1;
        int cap, container;
        int n = sscanf(argv[a], "%31[^:]:%31[^:]:%d:%d:%lf:%lf", p->name, prog, &cap,
                       &container, &from, &to);
        p->prog = program_named(prog);
        if ((n != 4 && n != 6) || !p->prog || cap < 0 || cap > 100 || container < 0 ||
            container >= MAX_PROCS) {
            fprintf(stderr, "pace_sim: bad process \"%s\" (name:program:cap:container"
                    "[:idle_from:idle_to], program matmul|tiny|graph|long, cap 0-100, "
                    "container 0-%d)\n", argv[a], MAX_PROCS - 1);
            return 2;
        }
        p->cap = (unsigned)cap;
        p->container = container;
        p->idle_from = from * NS;
        p->idle_to = to * NS;
        nprocs++;
    }
    for (int i = 0; i < MAX_PROCS; i++)
        procs[i].stack = malloc(STACK);
    double rates[MAX_PROCS];
    for (int i = 0; i < nprocs; i++)
        rates[i] = baseline(procs[i].prog, seconds);
    simulate(seconds);
    for (int i = 0; i < nprocs; i++) {
        printf("share %s", procs[i].name);
        for (int w = 0; w < (int)seconds; w++)
            printf(" %.2f", 100.0 * (double)procs[i].completed[w] / rates[i]);
        printf("\nlaunches %s %llu\n", procs[i].name, procs[i].launches);
        printf("maxgap %s %.2f\n", procs[i].name, procs[i].max_gap / 1e6);
    }
    printf("executing %.2f\n", 100.0 * busy_ns / (seconds * NS));
    for (int i = 0; i < MAX_PROCS; i++)
        free(procs[i].stack);
    return 0;
}
