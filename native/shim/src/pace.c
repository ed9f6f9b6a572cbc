/*
 * The compute limiter's pacer (see pace.h): fences and busy periods, what
 * is queued and what completed, the bucket, and the launch hooks
 * (gs_pace_launch_begin/end) that drive the card file (pace_card.c) and the
 * turns (pace_turns.c). Pure functions of the pacer, the bucket and the
 * card, so that a simulated clock can drive them.
 */
#include "pace_parts.h"

#include <stddef.h>
#include <string.h>

/* Debt beyond this is forgiven: a pathological kernel (minutes long) must
 * not put the container to sleep for an hour. */
#define MAX_DEBT_NS (60ll * 1000000000ll)

void gs_pace_reset(struct gs_pacer *p)
{
    /* The gate's fields last, stored atomically: its watcher may be reading
     * them (a context broken while the gate was closed). */
    memset(p, 0, offsetof(struct gs_pacer, gate_since_ns));
    __atomic_store_n(&p->gate_since_ns, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&p->gate_limit_ns, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&p->gate_queued_ns, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&p->gate_opened_ns, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&p->gate_forced, 0, __ATOMIC_RELAXED);
    p->gate_closed_ns = 0;
    p->gated = 0;
    __atomic_store_n(&p->synced_ns, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&p->app_wait_ns, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&p->aside_lets_go, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&p->aside_card, NULL, __ATOMIC_RELAXED);
    __atomic_store_n(&p->aside_stamp, NULL, __ATOMIC_RELAXED);
    __atomic_store_n(&p->aside_until_ns, 0, __ATOMIC_RELAXED);
    /* Until its waits show otherwise, each is taken for one followed at once
     * (its stamp held over it, as before waits were seen): a server's first
     * few requests hold their neighbours a little longer, and a decode
     * loop's first tokens cost none of them a hand-over. */
    for (int i = 0; i < GS_PACE_WAIT_PLACES; i++)
        p->waits_resumed[i] = GS_PACE_FOLLOWED;
    p->fences_behind = GS_PACE_BEHIND; /* taken for GPU-bound (a short queue) until shown otherwise */
    p->per_fence = 1; /* until a launch has been timed, fence every one */
    p->need_mark = 1;
    /* A new process is taken for light until it shows otherwise: a request
     * server's first requests are served first, and a busy process spends
     * this within half a second and takes turns from then on. */
    p->guest_credit_ns = (long long)GS_PACE_GUEST_MAX_NS;
}

int gs_pace_before(struct gs_pacer *p, unsigned long long now)
{
    if (p->need_mark)
        return GS_PACE_MARK;
    if (now - p->last_launch_ns > GS_PACE_GAP_NS)
        return GS_PACE_GAP;
    return 0;
}

/* Launches charged at the learned estimate, not at a measured interval. */
static void charge_estimate(struct gs_pacer *p, unsigned long long launches)
{
    p->charge_ns += launches * p->per_launch_ns;
    p->charged_estimated_ns += launches * p->per_launch_ns;
}

int gs_pace_gap(struct gs_pacer *p)
{
    if (p->count != 0)
        return 0; /* the GPU is still busy with our work: the period goes on */
    /* Launches after the newest fence ran before the gap, unfenced: charge
     * them at the estimate rather than the gap at its length. */
    charge_estimate(p, p->since_fence);
    p->since_fence = 0;
    p->need_mark = 1;
    return GS_PACE_MARK;
}

/* A fence is due at a launch that makes `launches` since the last one (by
 * count), or that began at `now` (by time). */
static int fence_due(const struct gs_pacer *p, unsigned launches, unsigned long long now)
{
    return launches >= p->per_fence || now - p->last_fence_ns >= GS_PACE_FENCE_NS;
}

int gs_pace_after(struct gs_pacer *p, unsigned long long now)
{
    p->last_launch_ns = now;
    p->launches++;
    p->spent_launches++;
    p->since_fence++;
    return fence_due(p, p->since_fence, now) ? GS_PACE_FENCE : 0;
}

int gs_pace_push(struct gs_pacer *p, void *ev, int marker, unsigned long long now)
{
    if (p->count == GS_PACE_RING)
        return -1;
    struct gs_fence *f = &p->ring[(p->head + p->count) % GS_PACE_RING];
    f->ev = ev;
    f->marker = marker;
    f->launches = marker ? 0 : p->since_fence;
    f->behind = 0;
    p->count++;
    if (marker) {
        p->need_mark = 0;
        p->last_launch_ns = now; /* the gap is over */
    } else {
        p->since_fence = 0;
        p->last_fence_ns = now;
        p->fences++;
    }
    return 0;
}

void gs_pace_mark_behind(struct gs_pacer *p)
{
    if (p->count)
        p->ring[(p->head + p->count - 1) % GS_PACE_RING].behind = 1;
}

const struct gs_fence *gs_pace_oldest(const struct gs_pacer *p)
{
    return p->count ? &p->ring[p->head] : NULL;
}

static void learn(struct gs_pacer *p, unsigned long long elapsed_ns, unsigned launches)
{
    if (!launches)
        return;
    unsigned long long sample = elapsed_ns / launches;
    /* Smoothed over ~4 fences: a mix of kernels settles, a change shows
     * within a few milliseconds. */
    p->per_launch_ns = p->per_launch_ns ? (3 * p->per_launch_ns + sample) / 4 : sample;
    unsigned long long n = p->per_launch_ns ? GS_PACE_FENCE_NS / p->per_launch_ns : 1;
    p->per_fence = n < 1 ? 1 : n > GS_PACE_MAX_PER_FENCE ? GS_PACE_MAX_PER_FENCE : (unsigned)n;
}

void *gs_pace_done(struct gs_pacer *p, unsigned long long elapsed_ns, unsigned competitors)
{
    if (!p->count)
        return NULL;
    struct gs_fence f = p->ring[p->head];
    p->head = (p->head + 1) % GS_PACE_RING;
    p->count--;
    if (!f.marker && p->ref) {
        unsigned long long ns = elapsed_ns / (f.behind ? 1ull + competitors : 1ull);
        ns = gs_pace_side_charge(p, ns, f.launches);
        p->charge_ns += ns;
        p->turn_card_ns += ns;
        if (p->ref_marker) {
            p->charged_firsts++;
            p->charged_first_ns += ns;
            p->charged_first_launches += f.launches;
        } else {
            p->charged_later_ns += ns;
            p->charged_later_launches += f.launches;
        }
        learn(p, elapsed_ns, f.launches);
    }
    void *old = p->ref;
    p->ref = f.ev;
    p->ref_marker = f.marker;
    return old;
}

void *gs_pace_idle(struct gs_pacer *p)
{
    void *old = p->ref;
    p->ref = NULL;
    p->need_mark = 1;
    return old;
}

/* ------------------------------------------------------------------ bucket */

unsigned long long gs_bucket_refill(struct gpuslice_bucket *b, unsigned cap,
                                    unsigned long long now, unsigned long long held_ns)
{
    if (b->stamp_ns == 0 || now < b->stamp_ns) {
        /* A new bucket (or a clock we cannot trust): start with a small
         * credit, so a fresh container starts at once but cannot burst. */
        b->credit_ns = (long long)GS_PACE_RESUME_NS;
        b->stamp_ns = now;
        return 0;
    }
    unsigned long long dt = now - b->stamp_ns;
    if (dt > 10ull * 1000000000ull)
        dt = 10ull * 1000000000ull;
    long long c = b->credit_ns + (long long)(dt * cap / 100);
    unsigned long long keep_ns = held_ns * cap / 100; /* what it earned while held back */
    long long most = (long long)GS_PACE_BURST_NS +
                     (long long)(keep_ns < GS_PACE_BURST_NS ? keep_ns : GS_PACE_BURST_NS);
    long long kept = c;
    if (c > most)
        kept = b->credit_ns > most ? b->credit_ns : most;
    b->credit_ns = kept;
    b->stamp_ns = now;
    return dt < GS_PACE_STALE_NS ? (unsigned long long)(c - kept) : 0;
}

void gs_bucket_charge(struct gpuslice_bucket *b, unsigned long long ns)
{
    if (ns > (unsigned long long)MAX_DEBT_NS)
        ns = (unsigned long long)MAX_DEBT_NS;
    long long c = b->credit_ns - (long long)ns;
    b->credit_ns = c < -MAX_DEBT_NS ? -MAX_DEBT_NS : c;
    b->charged_ns += ns;
}

unsigned long long gs_bucket_wait_ns(const struct gpuslice_bucket *b, unsigned cap)
{
    if (b->credit_ns >= 0 || cap == 0)
        return 0;
    unsigned long long need = (unsigned long long)((long long)GS_PACE_RESUME_NS - b->credit_ns);
    return need * 100 / cap;
}

/* ----------------------------------------------------------- orchestration */

static void record(struct gs_pacer *p, struct gs_pace_io *io, void *stream, int marker,
                   unsigned long long now)
{
    void *e = io->event_take(io);
    if (!e)
        return;
    if (io->event_record(io, e, stream) != 0 || gs_pace_push(p, e, marker, now) != 0) {
        /* Not recorded, or the ring is full (an uncapped process far ahead
         * of the GPU): the launches count toward the next fence. */
        io->event_give(io, e);
    }
}

/* Processes that ran beside us, for the discount of an interval in which our
 * work queued behind theirs. Only side by side (turns off): with turns, the
 * card is ours while we are charged, and a neighbour's stamp that lingers
 * after its work (a guest's, say) would make us pay less than we used. */
static unsigned competitors(struct gs_pace_io *io, unsigned long long now)
{
    return io->card && !io->turns ? gs_card_competitors(io->card, io->seat, now) : 0;
}

/* The oldest entry, if it is complete (`waited`: known to be, a wait for it
 * returned): 1, and the GPU's time since the last one completed in *ns (a
 * marker, or the first entry after one, has none: what is before a marker
 * is no work of ours). */
static int oldest_done(struct gs_pacer *p, struct gs_pace_io *io, int waited,
                       unsigned long long *ns)
{
    const struct gs_fence *f = gs_pace_oldest(p);
    *ns = 0;
    if (!f->marker && p->ref)
        return io->event_gap(io, p->ref, f->ev, ns) || waited;
    return waited || io->event_done(io, f->ev);
}

static void complete_oldest(struct gs_pacer *p, struct gs_pace_io *io, unsigned long long ns,
                            unsigned others, unsigned long long now)
{
    /* Side by side: only while it learns, for the look costs a pass over the seats. */
    p->solo_clean = gs_pace_side_learning(p, io) && !gs_card_competitors(io->card, io->seat, now);
    void *old = gs_pace_done(p, ns, others);
    if (old)
        io->event_give(io, old);
}

void gs_pace_poll(struct gs_pacer *p, struct gs_pace_io *io, unsigned long long now)
{
    unsigned others = competitors(io, now);
    unsigned long long ns;
    while (gs_pace_oldest(p) && oldest_done(p, io, 0, &ns))
        complete_oldest(p, io, ns, others, now);
}

/* GPU work we have queued: the launches in flight at the learned time each. */
unsigned long long gs_pace_queued_ns(const struct gs_pacer *p)
{
    unsigned long long n = p->since_fence;
    for (unsigned i = 0; i < p->count; i++)
        n += p->ring[(p->head + i) % GS_PACE_RING].launches;
    unsigned long long ns = n * p->per_launch_ns;
    return ns > GS_PACE_AHEAD_NS ? GS_PACE_AHEAD_NS : ns;
}

static void stamp(struct gs_pacer *p, struct gs_pace_io *io, int what, unsigned long long now)
{
    /* Behind a closed gate our work does not compete: the holder need not
     * wait for it (the watcher says what is queued as it opens the gate). */
    if (io->card && !__atomic_load_n(&p->gate_since_ns, __ATOMIC_ACQUIRE))
        /* Atomic: the gate's watcher reads it from a thread of its own. */
        __atomic_store_n(&io->seat,
                         gs_card_stamp(io->card, io->seat, io->token, what,
                                       now + gs_pace_queued_ns(p), now),
                         __ATOMIC_RELAXED);
}

/* Block until the oldest entry completes; the process competes meanwhile. */
static void wait_oldest(struct gs_pacer *p, struct gs_pace_io *io)
{
    const struct gs_fence *f = gs_pace_oldest(p);
    unsigned long long t0 = io->now(io);
    stamp(p, io, GS_CARD_BACKLOG, t0);
    gs_card_blocked(io->card, io->seat, io->token, 1);
    int broken = io->event_wait(io, f->ev) != 0;
    gs_card_blocked(io->card, io->seat, io->token, 0);
    if (broken) {
        /* The context is broken: forget the ring, its events are lost. */
        gs_pace_reset(p);
        return;
    }
    unsigned long long now = io->now(io), took = now - t0;
    unsigned long long decayed = p->blocked_ns - p->blocked_ns / 8;
    p->blocked_ns = took > decayed ? took : decayed;
    p->spent_queue_ns += took;
    p->spent_queue_waits++;
    unsigned long long ns;
    oldest_done(p, io, 1, &ns); /* for its time */
    complete_oldest(p, io, ns, competitors(io, now), now);
}

/* Let our queue run dry (fencing our last launches first), say so in the
 * card, and start a new busy period at the next launch: what we are charged
 * after a wait is then never the time others held the card meanwhile. */
void gs_pace_drain(struct gs_pacer *p, struct gs_pace_io *io, void *stream)
{
    if (p->since_fence)
        record(p, io, stream, 0, io->now(io));
    while (gs_pace_oldest(p))
        wait_oldest(p, io);
    stamp(p, io, GS_CARD_DRAINED, io->now(io));
    void *ref = gs_pace_idle(p);
    if (ref)
        io->event_give(io, ref);
}

/* What others held us back (for their turns, guests, higher priorities) is
 * credit the bucket keeps beyond the burst (gs_bucket_refill): a capped
 * process that stood aside for a request of 40 ms catches up after it,
 * within its window, instead of losing what its bucket could not hold. */
static unsigned settle(struct gs_pacer *p, struct gs_pace_io *io, unsigned long long *wait)
{
    unsigned cap = io->settle(io, p->charge_ns, p->launches, p->held_ns, wait);
    p->charge_ns = 0;
    p->launches = 0;
    p->held_ns = 0;
    return cap;
}

/* ------------------------------------------------------- at a launch */

/* In debt: let our queue run dry, give the card up, sleep until the credit is back. */
static void throttle(struct gs_pacer *p, struct gs_pace_io *io, void *stream)
{
    gs_pace_give_turn(p, io, stream, 0);
    p->slept = 1;
    /* Over its cap it is no light tenant: what credit it had left (a new
     * process starts with half a second) must be earned again by idling. */
    p->guest_since_ns = p->guest_idled = 0;
    if (p->guest_credit_ns > 0)
        p->guest_credit_ns = 0;
    unsigned long long wait;
    while (settle(p, io, &wait) && wait) {
        unsigned long long t0 = io->now(io);
        io->sleep(io, wait);
        unsigned long long slept = io->now(io) - t0;
        p->spent_sleep_ns += slept;
        io->throttled(io, slept);
    }
}

/* What a paced process may have in flight at a fence point: `bound`, or,
 * while what waited behind its gate still runs, as much as that batch has
 * left and `bound` more. The batch runs whatever we do, so we launch on
 * meanwhile (held to the short queue, a host-bound training step beside a
 * 50 waited for its batch at every window and lost a third of its steps,
 * simulated), but no deeper than the batch was: a GPU-bound one would
 * otherwise queue on into the holder's turn. */
static unsigned long long queue_bound(const struct gs_pacer *p, unsigned long long now,
                                      unsigned long long bound)
{
    unsigned long long opened = __atomic_load_n(&p->gate_opened_ns, __ATOMIC_RELAXED);
    unsigned long long batch = __atomic_load_n(&p->gate_queued_ns, __ATOMIC_RELAXED);
    return opened && now - opened < batch ? opened + batch - now + bound : bound;
}

/* An uncapped process in a window a holder left, beside another uncapped
 * one with work queued in it: as much as half the window left, up to a GPU
 * time slice (GS_PACE_GATE_BATCH_NS), or `bound`. Each held to the short
 * queue, their queues ran dry at every kernel and the GPU moved between the
 * two contexts every 0.27 ms, each move an idle switch: the host-bound step
 * and the eager loop beside a 50 did 11 and 15 % of their steps alone (46
 * each alone beside it, plain time slicing 72 and 36), 30 and 24 so, the
 * 50 as before (simulated). Not beside no other: a loop whose learned time
 * hides one 5 ms kernel in ten ran it into the holder's turn (a 50 got
 * 47.3). */
static unsigned long long window_queue(struct gpuslice_cardfile *c, int seat,
                                       unsigned long long now, unsigned long long bound)
{
    unsigned long long w = load(&c->free_until_ns);
    if (!window_open(w, now) || !gs_card_others_queued_ns(c, seat, now, GS_PACE_AHEAD_NS))
        return bound;
    unsigned long long most = (w - now) / 2;
    most = most < GS_PACE_GATE_BATCH_NS ? most : GS_PACE_GATE_BATCH_NS;
    return most > bound ? most : bound;
}

/* Host-bound: our launches' learned time holds the host's gaps between
 * them (a fence's interval runs on while the GPU waits for the next
 * launch), and what we have in flight, counted at it, is mostly done: the
 * queue a hand-over waits for is a kernel or two, however deep our
 * estimate. Held to the short queue by that estimate, a host-bound training
 * step (a 0.6 ms GEMM among 6 us kernels, 73 us launches) waited for each
 * GEMM where it would have launched on, capped at 50 beside any tenant: 40
 * % of its uncapped steps; 46-49 with the queue it keeps alone, the
 * requests beside it as fast (simulated). The H100's training loop at 50
 * got 37-52 beside requests with either queue (docs/compute-limit.md). */
int gs_pace_host_bound(const struct gs_pacer *p)
{
    return p->fences_behind < GS_PACE_BEHIND / 2;
}

static int behind_others(const struct gs_pacer *p)
{
    /* A wait for our oldest fence that outlasts what a short queue of our
     * own holds (GS_PACE_QUEUE_NS and a launch), twice: the GPU ran
     * someone else's work first. */
    return p->blocked_ns > 2 * GS_PACE_QUEUE_NS + p->per_launch_ns;
}

static void fence_point(struct gs_pacer *p, struct gs_pace_io *io, void *stream,
                        unsigned long long now)
{
    record(p, io, stream, 0, now);
    gs_pace_poll(p, io, now);
    gs_pace_side_epoch(p, io, now);
    unsigned cap = io->cap(io);
    struct gpuslice_cardfile *c = io->card;
    /* Over about the last eight fence points (gs_pace_host_bound). */
    p->fences_behind += ((p->count >= 2 ? GS_PACE_BEHIND : 0) - p->fences_behind) / 8;
    /* Two entries in flight: the GPU is behind us. */
    if (c) {
        if (p->count >= 2) {
            stamp(p, io, GS_CARD_BACKLOG, now); /* we compete for the card */
            gs_pace_mark_behind(p);
        } else if (io->turns) {
            /* A host-bound process seldom has two entries in flight, yet a
             * holder taking the card must see that it still launches. */
            stamp(p, io, GS_CARD_BACKLOG, now);
        }
        if (cap || io->prio != GPUSLICE_PRIORITY_NORMAL) {
            store(&c->managed_ns, now);
            if (io->prio == GPUSLICE_PRIORITY_LOW)
                store(&c->low_ns, now);
        } else {
            unsigned long long t = load(&c->managed_ns);
            /* The managed neighbours are gone: back to the free path. */
            if (t && !recent(t, now))
                __atomic_compare_exchange_n(&c->managed_ns, &t, 0, 0, __ATOMIC_RELAXED,
                                            __ATOMIC_RELAXED);
        }
    }
    int taking_turns = io->turns && c;
    if (taking_turns) {
        if (p->turn)
            gs_pace_renew(p, io, now);
        gs_pace_announce(p, io, now);
    }
    /* Keep the queue short (capped, or on a card with turns): a capped
     * process's windows must not swing, and whoever holds the card must be
     * able to pass it on, or stand aside for a guest, within a few hundred
     * microseconds. Not an uncapped guest or high process: others stand
     * aside for it, and it must queue its request while a neighbour's long
     * kernel runs out, as under plain time slicing (held to a short queue,
     * each of its launches waited for a time slice of that kernel: an eager
     * request beside 13.7 ms kernels took 41 ms at p99, simulated, 7.7 ms
     * with no shim). Only while another's work is in flight (else a short
     * queue costs it nothing), and still bounded: by the ring (every launch
     * fenced, so what it has queued is known) and by its first service
     * left (work queued past that would run as it stops being first).
     * Another's work is in flight when its seat says so, or, for an
     * uncapped high process or a guest back from a real idle, when its own
     * fences lately took longer than its own queue explains: a neighbour's
     * seat counts its launches at their average, and one long kernel in ten
     * (3 ms among 40 us ones) hides behind that average (a host-bound
     * request of 400 launches beside it took 13.3 ms at p99 as high
     * priority, 7.6 with no shim; now 6.2, 3.65 alone; 9.3-9.5 as a normal
     * guest, now 5.7-6.2, simulated). Not a guest on a new process's start
     * credit: a busy loop is one for its first half second, and queued deep
     * into capped turns (a loop of 13.7 ms kernels beside two 30s; before
     * the shim saw syncs, a busy loop whose sync waited was a guest too,
     * and two 40s beside an eager loop dipped to 37). Once behind others it
     * stays deep until its own waits are short again (the ring still
     * bounds it). */
    if (p->gated && __atomic_load_n(&p->gate_since_ns, __ATOMIC_ACQUIRE)) {
        /* Behind a closed gate: as much as the ring holds, the rest of the
         * ring waits for the watcher to open it (wait_oldest blocks). */
        while (p->count >= GS_PACE_RING - 1)
            wait_oldest(p, io);
        __atomic_store_n(&p->gate_queued_ns, gs_pace_queued_ns(p), __ATOMIC_RELAXED);
    } else if (taking_turns &&
               (io->prio == GPUSLICE_PRIORITY_HIGH || (p->guest_since_ns && p->per_launch_ns)) &&
               (gs_card_others_queued_ns(c, io->seat, now, GS_PACE_AHEAD_NS) > GS_PACE_QUEUE_NS ||
                (!cap && behind_others(p) &&
                 (io->prio == GPUSLICE_PRIORITY_HIGH || p->guest_idled)))) {
        while (p->count >= GS_PACE_RING - 1 ||
               (p->count > 1 && io->prio != GPUSLICE_PRIORITY_HIGH &&
                (long long)gs_pace_queued_ns(p) > p->guest_credit_ns))
            wait_oldest(p, io);
    } else if ((cap || taking_turns) && p->count > 1 && !p->side) {
        /* With no one else on the card there is nobody to hand it to, and
         * a short queue costs a host-bound loop whose kernels are uneven:
         * at a fence behind a long kernel it waited for it, where it would
         * have launched the next ones meanwhile (simulated: a training step
         * with a 0.6 ms GEMM every 20 launches did 82 % of its uncapped
         * steps capped at 100, and 0.82 of its cap at 30 and 70; 99 % and
         * its cap with 1 ms). The bucket's charges come late by what is
         * queued: at 2-4 ms a GPU-bound loop's 1 s windows swung by more
         * than 2 points (a 40 of matmuls, 38.8-41.1, simulated). Beside
         * others the queue is short, for the hand-over, unless the process
         * is host-bound (gs_pace_host_bound): then what it has in flight is short
         * whatever its estimate says. Not with gates: a gated batch already
         * runs past the bound (queue_bound), and deeper it ran into the
         * holder's turn (three 30s beside a gated host-bound step, one
         * window of 27.7, simulated). Not side by side (pace_side.c): it
         * queues as under plain time slicing; held to the short queue, a
         * host-bound step waited at its fences for a capped neighbour's
         * time slices, and its waits then took it for GPU-bound. */
        int short_queue = c && gs_card_others_seated(c, io->seat, now, 1) &&
                          (!gs_pace_host_bound(p) || io->gate_close);
        unsigned long long bound =
            queue_bound(p, now, short_queue ? GS_PACE_QUEUE_NS : GS_PACE_ALONE_QUEUE_NS);
        if (!cap && c && ungated(p, io))
            bound = window_queue(c, io->seat, now, bound);
        while (p->count > 1 && (gs_pace_queued_ns(p) > bound ||
                                (p->per_launch_ns == 0 && p->count > GS_PACE_MAX_QUEUED)))
            wait_oldest(p, io);
    }
    unsigned long long wait = 0;
    if (settle(p, io, &wait) && wait)
        throttle(p, io, stream); /* settle also keeps an uncapped process's usage */
}

/* The first launch after a wait of the application: whether it came within
 * GS_PACE_ASIDE_NS of the wait's return, the time others stand aside past
 * our last launch (gs_pace_waited), noted for the wait's place in its
 * stretch. By place, for a request may wait more than once: a model that
 * reads a value back halfway through, then its answer (a wait followed at
 * once, then one that ends it). Taken together, such waits were followed
 * half the time, and the first one let go in the middle of the request
 * while the last one held on (simulated: two waits a request, 100 a
 * second, beside a 90: 76.5 % for the 90, plain time slicing 80.5; by
 * place 82.6, the requests' p99 the same). */
static void note_resume(struct gs_pacer *p, unsigned long long now)
{
    unsigned long long w = __atomic_load_n(&p->synced_ns, __ATOMIC_RELAXED);
    if (w <= p->returned_ns || w > now)
        return; /* no wait since our last launch */
    int *r = &p->waits_resumed[p->wait_place];
    *r += ((now - w <= GS_PACE_ASIDE_NS ? (int)GS_PACE_FOLLOWED : 0) - *r) / 4;
    /* Back from idle: the next wait is a new stretch's first. */
    p->wait_place = now - w > GS_PACE_GAP_NS       ? 0
                    : p->wait_place + 1 < GS_PACE_WAIT_PLACES ? p->wait_place + 1
                                                                : p->wait_place;
}

/* First service is earned by idling. A process that comes back from idle
 * (it launched nothing for GS_PACE_GAP_NS and its queue ran dry, not because
 * we made it wait or sleep for its cap, nor while it waited for the GPU)
 * has earned as much first service as it idled, up to GS_PACE_GUEST_MAX_NS,
 * and is a guest while it has some left: it launches at once and the
 * others stand aside (a request of an inference server, however many
 * kernels it launches and syncs it makes).
 * Holding the card as a guest spends it, nanosecond for nanosecond. So a
 * tenant that holds the card at most half the time is always served first,
 * and a busy one (it never idles; waiting for turns is not idling) never is.
 * Not a low one's (low yields to normal work, requests too); a high one is
 * always served first and needs no credit. */
static void guest(struct gs_pacer *p, struct gs_pace_io *io, int fresh, unsigned long long now)
{
    note_resume(p, now);
    if (io->prio != GPUSLICE_PRIORITY_NORMAL) {
        p->guest_since_ns = p->guest_idled = 0;
        return;
    }
    if (fresh && (!p->returned_ns || now - p->returned_ns > GS_PACE_GAP_NS)) {
        /* What a sync waited for was our own work, queued behind others'
         * or not: idling counts from its return (launch.c sees the
         * application's syncs, blocking copies and polls). And a stretch
         * begins only after a real idle: a busy loop whose sync waited more than GS_PACE_GAP_NS
         * behind a request looked as if back from idle, a guest, and
         * queued into the next request; a capped one on the credit it
         * kept while it slept for its cap. The test of a new busy period
         * stays the launches' gap: a server of 400 requests a second
         * idles just under GS_PACE_GAP_NS from its syncs, and is a guest
         * from one request to the next. */
        unsigned long long since = p->returned_ns;
        unsigned long long synced = __atomic_load_n(&p->synced_ns, __ATOMIC_RELAXED);
        if (synced > since && synced <= now)
            since = synced;
        unsigned long long idle = now - since;
        long long c = p->guest_credit_ns;
        if (p->returned_ns)
            c += (long long)(idle < GS_PACE_GUEST_MAX_NS ? idle : GS_PACE_GUEST_MAX_NS);
        p->guest_credit_ns = c > (long long)GS_PACE_GUEST_MAX_NS ? (long long)GS_PACE_GUEST_MAX_NS
                                                                 : c;
        int again = p->guest_since_ns || !p->returned_ns || idle > GS_PACE_GAP_NS;
        p->guest_since_ns = p->guest_credit_ns > 0 && again ? now : 0;
        if (!p->guest_since_ns)
            p->guest_idled = 0;
        else if (p->returned_ns && idle > GS_PACE_GAP_NS)
            p->guest_idled = 1;
    } else if (p->guest_since_ns) {
        p->guest_credit_ns -= (long long)(now - p->guest_seen_ns);
        if (p->guest_credit_ns <= 0)
            p->guest_since_ns = p->guest_idled = 0;
    }
    p->guest_seen_ns = now;
}

void gs_pace_launch_begin(struct gs_pacer *p, struct gs_pace_io *io, void *stream)
{
    unsigned long long now = io->now(io);
    int a = gs_pace_before(p, now);
    if (a && io->capturing(io, stream))
        a = 0;
    if (a & GS_PACE_GAP) {
        gs_pace_poll(p, io, now);
        a = gs_pace_gap(p);
    }
    if (io->turns && io->card) {
        /* Behind our own gate is no idling (the watcher opened it, our work ran). */
        guest(p, io, (a & GS_PACE_MARK) && !p->slept && !p->gated, now);
        p->slept = 0;
        /* An uncapped process never has more in flight than a new holder
         * waits for (GS_PACE_DRAIN_NS): 13.7 ms kernels queued two deep
         * while a capped holder slept outlasted the holder's wait when it
         * came back, and shared its turn, charged to it (simulated: a 30 of
         * graph replays got 22). What a long kernel costs for waiting: the
         * card idles for one launch between two of them. Not a guest's or
         * high work: others stand aside for it, and it queues its request
         * while a neighbour's long kernel runs out (its launches' learned
         * time then holds that kernel's). */
        int drained = 0;
        while (p->count && io->prio != GPUSLICE_PRIORITY_HIGH && !p->guest_since_ns &&
               gs_pace_queued_ns(p) + p->per_launch_ns > GS_PACE_DRAIN_NS && !io->cap(io)) {
            wait_oldest(p, io);
            drained = 1;
        }
        unsigned long long before = drained ? io->now(io) : now;
        gs_pace_gate(p, io, stream);
        now = io->now(io);
        p->spent_card_ns += now - before;
    }
    p->launch_ns = now;
    if (p->need_mark && (a || !io->capturing(io, stream)))
        record(p, io, stream, 1, now);
}

void gs_pace_launch_end(struct gs_pacer *p, struct gs_pace_io *io, void *stream, int ok)
{
    /* The clock as the launch began: one read per launch is enough. */
    unsigned long long now = p->launch_ns;
    p->returned_ns = now;
    if (ok && (gs_pace_after(p, now) & GS_PACE_FENCE) && !io->capturing(io, stream)) {
        /* Its own time: what it waited for its queue or slept is counted apart. */
        unsigned long long at = io->now(io), apart = p->spent_queue_ns + p->spent_sleep_ns;
        fence_point(p, io, stream, now);
        p->returned_ns = io->now(io); /* it may have waited for its queue */
        apart = p->spent_queue_ns + p->spent_sleep_ns - apart;
        p->spent_fence_ns += p->returned_ns - at - apart;
    }
}

/* ------------------------------------ launches past the pacer (launch.c)
 * Added for issue 25 (launches from many threads): small pure functions on
 * the pacer's fields that decide nothing. launch.c lets a launch that is no
 * fence point go to the driver without taking the pacer's lock, counts it
 * with atomics, and hands the count over at the next launch that comes
 * through gs_pace_launch_begin/end. */

unsigned gs_pace_room(const struct gs_pacer *p)
{
    /* The launch that reaches per_fence must come through the pacer (its
     * end records the fence), and so must the first of a busy period. */
    if (p->need_mark || p->since_fence + 1 >= p->per_fence)
        return 0;
    return p->per_fence - p->since_fence - 1;
}

unsigned long long gs_pace_room_until(const struct gs_pacer *p)
{
    /* gs_pace_after fences by time from here on, gs_pace_before checks for
     * a gap from the second one: whichever comes first. */
    unsigned long long fence = p->last_fence_ns + GS_PACE_FENCE_NS;
    unsigned long long gap = p->last_launch_ns + GS_PACE_GAP_NS;
    return fence < gap ? fence : gap;
}

unsigned gs_pace_room_ahead(const struct gs_pacer *p, unsigned long long *until)
{
    /* Where the launch now going to the driver fences at its end (by count
     * or by time, on the clock it began at), or another's end through the
     * pacer does first: what other threads launch meanwhile is counted
     * into the interval that fence closes, as a launch on a ticket taken
     * just before it is. Without these, every other launching thread came
     * through the pacer around each fence point, twice, one at a time. */
    if (p->need_mark || p->per_fence < 2 || !fence_due(p, p->since_fence + 1, p->launch_ns))
        return 0;
    *until = p->launch_ns + GS_PACE_FENCE_NS;
    return p->per_fence - 1;
}

void gs_pace_count(struct gs_pacer *p, unsigned long long n, unsigned long long unseen)
{
    p->launches += n;
    p->spent_launches += n;
    p->spent_ticketed += n;
    p->since_fence += (unsigned)n;
    /* Launches that reached the GPU while the pacer held the process back
     * (throttled, standing aside, waiting for a turn) ran outside every
     * interval it measures: charged at the learned estimate, as a gap
     * charges its unfenced launches. */
    charge_estimate(p, unseen);
}

/* A stand-aside stamp (gs_pace_announce) lasts GS_PACE_ASIDE_NS past our
 * last launch, to bridge the host's gaps between a request's launches; at
 * a wait's return our work is done, and where our waits lately ended our
 * launching (a request answered, not a decode loop's token) the rest of it
 * only idles the card: beside tiny requests at 300 a second a 90 got 75-79
 * % of the card, where plain time slicing left an uncapped loop 86-88; 84-85
 * once let go (simulated). A wait followed by a launch after all costs
 * that launch what a request's first one costs (the neighbour's short
 * queue and a switch), at most what the stamp held would have cost the
 * neighbour: so we let go while most waits lately at the same place in
 * a stretch (note_resume) ended our launching. Only our own stamp, as we
 * raised it: one raised further by another stays. */
struct gpuslice_cardfile *gs_pace_waited(struct gs_pacer *p, unsigned long long began,
                                         unsigned long long now)
{
    __atomic_store_n(&p->synced_ns, now, __ATOMIC_RELAXED);
    if (began && began <= now)
        __atomic_add_fetch(&p->app_wait_ns, now - began, __ATOMIC_RELAXED); /* side by side */
    if (!__atomic_load_n(&p->aside_lets_go, __ATOMIC_ACQUIRE))
        return NULL;
    struct gpuslice_cardfile *c = __atomic_load_n(&p->aside_card, __ATOMIC_RELAXED);
    unsigned long long *w = __atomic_load_n(&p->aside_stamp, __ATOMIC_RELAXED);
    unsigned long long until = __atomic_load_n(&p->aside_until_ns, __ATOMIC_RELAXED);
    if (!c || !w || until <= now)
        return NULL;
    if (!__atomic_compare_exchange_n(w, &until, now, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        return NULL;
    __atomic_add_fetch(&c->seq, 1, __ATOMIC_RELAXED);
    return c;
}
