/*
 * The compute limiter's decisions (see pace.h): pure functions of the pacer,
 * the bucket and the card, so that a simulated clock can drive them.
 */
#include "pace.h"

#include <stddef.h>
#include <string.h>

/* Debt beyond this is forgiven: a pathological kernel (minutes long) must
 * not put the container to sleep for an hour. */
#define MAX_DEBT_NS (60ll * 1000000000ll)

void gs_pace_reset(struct gs_pacer *p)
{
    memset(p, 0, sizeof *p);
    p->per_fence = 1; /* until a launch has been timed, fence every one */
    p->need_mark = 1;
}

int gs_pace_before(struct gs_pacer *p, unsigned long long now)
{
    if (p->need_mark)
        return GS_PACE_MARK;
    if (now - p->last_launch_ns > GS_PACE_GAP_NS)
        return GS_PACE_GAP;
    return 0;
}

int gs_pace_gap(struct gs_pacer *p)
{
    if (p->count != 0)
        return 0; /* the GPU is still busy with our work: the period goes on */
    /* Launches after the newest fence ran before the gap, unfenced: charge
     * them at the estimate rather than the gap at its length. */
    p->charge_ns += (unsigned long long)p->since_fence * p->per_launch_ns;
    p->since_fence = 0;
    p->need_mark = 1;
    return GS_PACE_MARK;
}

int gs_pace_after(struct gs_pacer *p, unsigned long long now)
{
    p->last_launch_ns = now;
    p->launches++;
    p->since_fence++;
    if (p->since_fence >= p->per_fence || now - p->last_fence_ns >= GS_PACE_FENCE_NS)
        return GS_PACE_FENCE;
    return 0;
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
        p->charge_ns += elapsed_ns / (f.behind ? 1ull + competitors : 1ull);
        learn(p, elapsed_ns, f.launches);
    }
    void *old = p->ref;
    p->ref = f.ev;
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

void gs_bucket_refill(struct gpuslice_bucket *b, unsigned cap, unsigned long long now)
{
    if (b->stamp_ns == 0 || now < b->stamp_ns) {
        /* A new bucket (or a clock we cannot trust): start with a small
         * credit, so a fresh container starts at once but cannot burst. */
        b->credit_ns = (long long)GS_PACE_RESUME_NS;
        b->stamp_ns = now;
        return;
    }
    unsigned long long dt = now - b->stamp_ns;
    if (dt > 10ull * 1000000000ull)
        dt = 10ull * 1000000000ull;
    long long c = b->credit_ns + (long long)(dt * cap / 100);
    b->credit_ns = c > (long long)GS_PACE_BURST_NS ? (long long)GS_PACE_BURST_NS : c;
    b->stamp_ns = now;
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

/* -------------------------------------------------------------------- card */

/* A card-file stamp t at most `behind` before now or `ahead` after it (a
 * time after our `now` may be fresh: written by someone who read the clock
 * after us); anything else is stale, or garbage. */
static int within(unsigned long long t, unsigned long long now, unsigned long long ahead,
                  unsigned long long behind)
{
    return t >= now ? t - now <= ahead : now - t <= behind;
}

/* Queued work it has not yet let run dry: a backlog that lasts until now or
 * ended at most GS_PACE_BACKLOG_NS ago, announced no further ahead than
 * GS_PACE_AHEAD_NS. */
static int slot_competes(const struct gpuslice_card_slot *s, unsigned long long now)
{
    unsigned long long owner = __atomic_load_n(&s->owner, __ATOMIC_RELAXED);
    unsigned long long t = __atomic_load_n(&s->backlog_ns, __ATOMIC_RELAXED);
    unsigned long long d = __atomic_load_n(&s->drained_ns, __ATOMIC_RELAXED);
    return owner && d < t && within(t, now, GS_PACE_AHEAD_NS, GS_PACE_BACKLOG_NS);
}

unsigned gs_card_competitors(const struct gpuslice_card *c, int mine, unsigned long long now)
{
    unsigned n = 0;
    for (int i = 0; i < GPUSLICE_CARD_SLOTS; i++)
        if (i != mine && slot_competes(&c->slots[i], now))
            n++;
    return n;
}

int gs_card_claim(struct gpuslice_card *c, unsigned long long token, unsigned long long now)
{
    for (int i = 0; i < GPUSLICE_CARD_SLOTS; i++)
        if (__atomic_load_n(&c->slots[i].owner, __ATOMIC_RELAXED) == token)
            return i;
    for (int i = 0; i < GPUSLICE_CARD_SLOTS; i++) {
        struct gpuslice_card_slot *s = &c->slots[i];
        unsigned long long owner = __atomic_load_n(&s->owner, __ATOMIC_RELAXED);
        unsigned long long t = __atomic_load_n(&s->backlog_ns, __ATOMIC_RELAXED);
        /* Free, or its owner has not competed for a second (dead or idle:
         * an idle owner takes another slot when it competes again). */
        if (owner == 0 || !within(t, now, GS_PACE_AHEAD_NS, GS_PACE_STALE_NS)) {
            if (__atomic_compare_exchange_n(&s->owner, &owner, token, 0, __ATOMIC_RELAXED,
                                            __ATOMIC_RELAXED)) {
                __atomic_store_n(&s->backlog_ns, 0, __ATOMIC_RELAXED);
                __atomic_store_n(&s->drained_ns, 0, __ATOMIC_RELAXED);
                return i;
            }
        }
    }
    return -1;
}

int gs_card_stamp(struct gpuslice_card *c, int slot, unsigned long long token, int what,
                  unsigned long long until, unsigned long long now)
{
    /* Someone took the slot while we were idle: take another. */
    if (slot < 0 || slot >= GPUSLICE_CARD_SLOTS ||
        __atomic_load_n(&c->slots[slot].owner, __ATOMIC_RELAXED) != token)
        slot = gs_card_claim(c, token, now);
    if (slot >= 0) {
        struct gpuslice_card_slot *s = &c->slots[slot];
        if (what == GS_CARD_DRAINED) {
            /* The backlog ends here: announced further, it would outlive the drain. */
            __atomic_store_n(&s->backlog_ns, now, __ATOMIC_RELAXED);
            __atomic_store_n(&s->drained_ns, now, __ATOMIC_RELAXED);
        } else {
            __atomic_store_n(&s->backlog_ns, until < now ? now : until, __ATOMIC_RELAXED);
        }
    }
    return slot;
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

static unsigned competitors(struct gs_pace_io *io, unsigned long long now)
{
    return io->card ? gs_card_competitors(io->card, io->slot, now) : 0;
}

static void complete_oldest(struct gs_pacer *p, struct gs_pace_io *io, unsigned others)
{
    const struct gs_fence *f = gs_pace_oldest(p);
    unsigned long long ns = 0;
    if (!f->marker && p->ref)
        ns = io->event_gap_ns(io, p->ref, f->ev);
    void *old = gs_pace_done(p, ns, others);
    if (old)
        io->event_give(io, old);
}

static void poll_ring(struct gs_pacer *p, struct gs_pace_io *io, unsigned long long now)
{
    unsigned others = competitors(io, now);
    const struct gs_fence *f;
    while ((f = gs_pace_oldest(p)) && io->event_done(io, f->ev))
        complete_oldest(p, io, others);
}

/* GPU work we have queued: the launches in flight at the learned time each. */
static unsigned long long queued_ns(const struct gs_pacer *p)
{
    unsigned long long n = p->since_fence;
    for (unsigned i = 0; i < p->count; i++)
        n += p->ring[(p->head + i) % GS_PACE_RING].launches;
    unsigned long long ns = n * p->per_launch_ns;
    return ns > GS_PACE_AHEAD_NS ? GS_PACE_AHEAD_NS : ns;
}

static void stamp(struct gs_pacer *p, struct gs_pace_io *io, int what, unsigned long long now)
{
    if (io->card)
        io->slot = gs_card_stamp(io->card, io->slot, io->token, what, now + queued_ns(p), now);
}

/* Block until the oldest entry completes; the process competes meanwhile. */
static void wait_oldest(struct gs_pacer *p, struct gs_pace_io *io)
{
    const struct gs_fence *f = gs_pace_oldest(p);
    stamp(p, io, GS_CARD_BACKLOG, io->now(io));
    if (io->event_wait(io, f->ev) != 0) {
        /* The context is broken: forget the ring, its events are lost. */
        gs_pace_reset(p);
        return;
    }
    complete_oldest(p, io, competitors(io, io->now(io)));
}

/* Let our queue run dry (what was launched before the newest fence; the
 * caller fences first if it must), say so in the card, and start a new
 * busy period at the next launch. */
static void drain(struct gs_pacer *p, struct gs_pace_io *io)
{
    while (gs_pace_oldest(p))
        wait_oldest(p, io);
    stamp(p, io, GS_CARD_DRAINED, io->now(io));
    void *ref = gs_pace_idle(p);
    if (ref)
        io->event_give(io, ref);
}

static unsigned settle(struct gs_pacer *p, struct gs_pace_io *io, unsigned long long *wait)
{
    unsigned cap = io->settle(io, p->charge_ns, p->launches, wait);
    p->charge_ns = 0;
    p->launches = 0;
    return cap;
}

/* ------------------------------------------------------------------ turns */

/* Whose turn it is, if it is someone else's and still running. */
static int turn_elsewhere(struct gs_pace_io *io, unsigned long long now)
{
    struct gpuslice_card *c = io->card;
    unsigned long long owner = __atomic_load_n(&c->turn_owner, __ATOMIC_RELAXED);
    unsigned long long until = __atomic_load_n(&c->turn_until_ns, __ATOMIC_RELAXED);
    /* A lease further ahead than one lease is garbage: ignore it. */
    return owner && owner != io->token && now < until && until <= now + GS_PACE_LEASE_NS;
}

static void renew(struct gs_pace_io *io, unsigned long long now)
{
    __atomic_store_n(&io->card->turn_until_ns, now + GS_PACE_LEASE_NS, __ATOMIC_RELAXED);
}

/* Waiting for others' turns spends patience, which comes back at
 * GS_PACE_PATIENCE_PCT of wall time: whatever a card file says (anyone can
 * write it), a process gets the card at least the rest of the time. */
static int patient(struct gs_pacer *p, unsigned long long now)
{
    if (p->patience_stamp_ns == 0 || now < p->patience_stamp_ns) {
        p->patience_ns = (long long)GS_PACE_PATIENCE_NS;
    } else {
        unsigned long long dt = now - p->patience_stamp_ns;
        if (dt > GS_PACE_PATIENCE_NS)
            dt = GS_PACE_PATIENCE_NS;
        long long v = p->patience_ns + (long long)(dt * GS_PACE_PATIENCE_PCT / 100);
        p->patience_ns = v > (long long)GS_PACE_PATIENCE_NS ? (long long)GS_PACE_PATIENCE_NS : v;
    }
    p->patience_stamp_ns = now;
    return p->patience_ns > 0;
}

static void wait_a_poll(struct gs_pacer *p, struct gs_pace_io *io)
{
    unsigned long long t0 = io->now(io);
    io->sleep(io, GS_PACE_TURN_POLL_NS);
    p->patience_ns -= (long long)(io->now(io) - t0);
}

/* Another's turn: empty our queue, then wait while it lasts. */
static void stand_aside(struct gs_pacer *p, struct gs_pace_io *io, void *stream)
{
    if (p->since_fence)
        record(p, io, stream, 0, io->now(io)); /* so the drain covers every launch */
    drain(p, io);
    unsigned long long now;
    while (turn_elsewhere(io, now = io->now(io)) && patient(p, now))
        wait_a_poll(p, io);
}

/* A capped process: take the card, then give the others' queues (up to
 * GS_PACE_DRAIN_NS: two kernels of 8 ms) to run dry, so that what we are
 * charged from here on is our own work. */
static void take_turn(struct gs_pacer *p, struct gs_pace_io *io, void *stream)
{
    struct gpuslice_card *c = io->card;
    /* Just gave the card up while it still had work (GS_PACE_TURN_MAX_NS):
     * leave it free for a poll, so that whoever waits sees it free. */
    unsigned long long given = io->now(io) - p->turn_given_ns;
    if (p->turn_given_ns && given <= GS_PACE_TURN_POLL_NS)
        io->sleep(io, GS_PACE_TURN_POLL_NS + GS_PACE_TURN_POLL_NS / 4 - given);
    p->turn_given_ns = 0;
    for (;;) {
        unsigned long long now = io->now(io);
        if (turn_elsewhere(io, now)) {
            if (!patient(p, now)) {
                p->turn = 0; /* out of patience: run beside the holder */
                return;
            }
            stand_aside(p, io, stream);
            continue;
        }
        unsigned long long owner = __atomic_load_n(&c->turn_owner, __ATOMIC_RELAXED);
        if (owner == io->token ||
            __atomic_compare_exchange_n(&c->turn_owner, &owner, io->token, 0, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED))
            break;
    }
    p->turn = 1;
    unsigned long long t0 = io->now(io), now = t0;
    p->turn_since_ns = t0;
    renew(io, now);
    while (now - t0 < GS_PACE_DRAIN_NS && gs_card_competitors(c, io->slot, now)) {
        io->sleep(io, GS_PACE_TURN_POLL_NS);
        renew(io, now = io->now(io));
    }
}

/* Give the card back if we hold it (p->turn is only ever set with a card). */
static void give_turn(struct gs_pacer *p, struct gs_pace_io *io)
{
    unsigned long long mine = io->token;
    if (p->turn)
        __atomic_compare_exchange_n(&io->card->turn_owner, &mine, 0, 0, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED);
    p->turn = 0;
}

/* Before a launch, with turns on: a capped process holds the card while it
 * runs (what it is charged is then its own), an uncapped one stands aside
 * while a capped one does, unless it is light (its queue keeps running dry:
 * it barely slows the holder, and waiting would cost it dearly). */
static void turn_gate(struct gs_pacer *p, struct gs_pace_io *io, void *stream,
                      unsigned long long now)
{
    int cap = io->cap(io) != 0;
    if (!cap && p->light >= GS_PACE_LIGHT_FENCES)
        return;
    if (cap ? p->turn && !turn_elsewhere(io, now) : !turn_elsewhere(io, now))
        return;
    if (io->capturing(io, stream))
        return; /* a launch into a graph runs later, when the graph does */
    if (cap)
        take_turn(p, io, stream);
    else if (__atomic_load_n(&io->card->capped_ns, __ATOMIC_RELAXED) && patient(p, now))
        stand_aside(p, io, stream);
}

/* In debt: let our queue run dry, then sleep until the credit is back. */
static void throttle(struct gs_pacer *p, struct gs_pace_io *io)
{
    drain(p, io);
    give_turn(p, io);
    unsigned long long wait;
    while (settle(p, io, &wait) && wait) {
        unsigned long long t0 = io->now(io);
        io->sleep(io, wait);
        io->throttled(io, io->now(io) - t0);
    }
}

static void fence_point(struct gs_pacer *p, struct gs_pace_io *io, void *stream,
                        unsigned long long now)
{
    record(p, io, stream, 0, now);
    poll_ring(p, io, now);
    unsigned cap = io->cap(io);
    struct gpuslice_card *c = io->card;
    /* Two entries in flight: the GPU is behind us. */
    int behind = p->count >= 2;
    p->light = behind ? 0 : p->light < GS_PACE_LIGHT_FENCES ? p->light + 1 : p->light;
    if (c) {
        if (behind) {
            stamp(p, io, GS_CARD_BACKLOG, now); /* we compete for the card */
            gs_pace_mark_behind(p);
        }
        if (cap) {
            __atomic_store_n(&c->capped_ns, now, __ATOMIC_RELAXED);
        } else {
            unsigned long long t = __atomic_load_n(&c->capped_ns, __ATOMIC_RELAXED);
            /* The capped neighbour is gone: back to the free path. */
            if (t && !within(t, now, GS_PACE_STALE_NS, GS_PACE_STALE_NS))
                __atomic_compare_exchange_n(&c->capped_ns, &t, 0, 0, __ATOMIC_RELAXED,
                                            __ATOMIC_RELAXED);
        }
    }
    unsigned long long wait = 0;
    int taking_turns = io->turns && c;
    if (taking_turns && p->turn) {
        renew(io, now);
        /* A long turn (a high cap) would keep the others waiting: give the
         * card up, empty, and take it back after a poll. */
        if (now - p->turn_since_ns > GS_PACE_TURN_MAX_NS) {
            drain(p, io);
            give_turn(p, io);
            p->turn_given_ns = io->now(io);
        }
    }
    /* Taking turns, nobody's queue may run far into the next one's turn:
     * a few fences, and an uncapped process no more than a few fences'
     * worth of time either (one kernel at least), so it drains in time. */
    while ((cap || taking_turns) &&
           (p->count > GS_PACE_MAX_QUEUED ||
            (!cap && p->count > 1 && queued_ns(p) > GS_PACE_MAX_QUEUED * GS_PACE_FENCE_NS)))
        wait_oldest(p, io);
    if (!cap) {
        settle(p, io, &wait); /* usage for `gpuslice status`; never waits */
        return;
    }
    if (settle(p, io, &wait) && wait)
        throttle(p, io);
}

void gs_pace_launch_begin(struct gs_pacer *p, struct gs_pace_io *io, void *stream)
{
    unsigned long long now = io->now(io);
    if (io->turns && io->card) {
        turn_gate(p, io, stream, now);
        now = io->now(io);
    }
    p->launch_ns = now;
    int a = gs_pace_before(p, now);
    if (!a || io->capturing(io, stream))
        return;
    if (a & GS_PACE_GAP) {
        poll_ring(p, io, now);
        a = gs_pace_gap(p);
    }
    if (a & GS_PACE_MARK)
        record(p, io, stream, 1, now);
}

void gs_pace_launch_end(struct gs_pacer *p, struct gs_pace_io *io, void *stream, int ok)
{
    /* The clock as the launch began: one read per launch is enough. */
    unsigned long long now = p->launch_ns;
    if (ok && (gs_pace_after(p, now) & GS_PACE_FENCE) && !io->capturing(io, stream))
        fence_point(p, io, stream, now);
}

void gs_pace_leave(struct gs_pacer *p, struct gs_pace_io *io)
{
    give_turn(p, io);
}
