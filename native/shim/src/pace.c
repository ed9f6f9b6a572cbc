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
        p->charge_ns += ns;
        p->turn_card_ns += ns;
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

void gs_bucket_refill(struct gpuslice_bucket *b, unsigned cap, unsigned long long now,
                      unsigned long long held_ns)
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
    unsigned long long keep_ns = held_ns * cap / 100; /* what it earned while held back */
    long long most = (long long)GS_PACE_BURST_NS +
                     (long long)(keep_ns < GS_PACE_BURST_NS ? keep_ns : GS_PACE_BURST_NS);
    if (c > most)
        c = b->credit_ns > most ? b->credit_ns : most;
    b->credit_ns = c;
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
static int slot_competes(const struct gpuslice_cardfile_slot *s, unsigned long long now)
{
    unsigned long long owner = __atomic_load_n(&s->owner, __ATOMIC_RELAXED);
    unsigned long long t = __atomic_load_n(&s->backlog_ns, __ATOMIC_RELAXED);
    unsigned long long d = __atomic_load_n(&s->drained_ns, __ATOMIC_RELAXED);
    return owner && d < t && within(t, now, GS_PACE_AHEAD_NS, GS_PACE_BACKLOG_NS);
}

unsigned gs_card_competitors(const struct gpuslice_cardfile *c, int mine, unsigned long long now)
{
    unsigned n = 0;
    for (int i = 0; i < GPUSLICE_CARDFILE_SLOTS; i++)
        if (i != mine && slot_competes(&c->slots[i], now))
            n++;
    return n;
}

int gs_card_claim(struct gpuslice_cardfile *c, unsigned long long token, unsigned long long now)
{
    for (int i = 0; i < GPUSLICE_CARDFILE_SLOTS; i++)
        if (__atomic_load_n(&c->slots[i].owner, __ATOMIC_RELAXED) == token)
            return i;
    for (int i = 0; i < GPUSLICE_CARDFILE_SLOTS; i++) {
        struct gpuslice_cardfile_slot *s = &c->slots[i];
        unsigned long long owner = __atomic_load_n(&s->owner, __ATOMIC_RELAXED);
        unsigned long long t = __atomic_load_n(&s->backlog_ns, __ATOMIC_RELAXED);
        /* Free, or its owner has not competed for a second (dead or idle:
         * an idle owner takes another slot when it competes again). */
        if (owner == 0 || !within(t, now, GS_PACE_AHEAD_NS, GS_PACE_STALE_NS)) {
            if (__atomic_compare_exchange_n(&s->owner, &owner, token, 0, __ATOMIC_RELAXED,
                                            __ATOMIC_RELAXED)) {
                __atomic_store_n(&s->backlog_ns, 0, __ATOMIC_RELAXED);
                __atomic_store_n(&s->drained_ns, 0, __ATOMIC_RELAXED);
                __atomic_store_n(&s->want_ns, 0, __ATOMIC_RELAXED);
                return i;
            }
        }
    }
    return -1;
}

int gs_card_stamp(struct gpuslice_cardfile *c, int slot, unsigned long long token, int what,
                  unsigned long long until, unsigned long long now)
{
    /* Someone took the slot while we were idle: take another. */
    if (slot < 0 || slot >= GPUSLICE_CARDFILE_SLOTS ||
        __atomic_load_n(&c->slots[slot].owner, __ATOMIC_RELAXED) != token)
        slot = gs_card_claim(c, token, now);
    if (slot >= 0) {
        struct gpuslice_cardfile_slot *s = &c->slots[slot];
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

void gs_card_waiters(const struct gpuslice_cardfile *c, int mine, unsigned long long now,
                     struct gs_waiters *w)
{
    unsigned long long capped_since = 0, uncapped_since = 0;
    w->next = -1;
    w->uncapped = 0;
    w->parties = 0;
    w->oldest_ns = 0;
    for (int i = 0; i < GPUSLICE_CARDFILE_SLOTS; i++) {
        const struct gpuslice_cardfile_slot *s = &c->slots[i];
        if (i == mine || !__atomic_load_n(&s->owner, __ATOMIC_RELAXED))
            continue;
        /* A waiter renews its want every poll: an older one is gone. */
        if (!within(__atomic_load_n(&s->want_ns, __ATOMIC_RELAXED), now, GS_PACE_WANT_NS,
                    GS_PACE_WANT_NS))
            continue;
        unsigned long long t = __atomic_load_n(&s->want_since_ns, __ATOMIC_RELAXED);
        if (!within(t, now, GS_PACE_WANT_NS, GS_PACE_STALE_NS))
            t = now; /* since when, it cannot say: from now on */
        if (!w->oldest_ns || t < w->oldest_ns)
            w->oldest_ns = t;
        if (__atomic_load_n(&s->flags, __ATOMIC_RELAXED) & GPUSLICE_CARDFILE_WAITS_CAPPED) {
            w->parties++;
            if (w->next < 0 || t < capped_since) {
                w->next = i;
                capped_since = t;
            }
        } else if (!w->uncapped || t < uncapped_since) {
            w->uncapped = 1;
            uncapped_since = t;
        }
    }
    /* Whoever has waited longest goes first: the uncapped ones, together. */
    if (w->next >= 0 && w->uncapped && uncapped_since < capped_since)
        w->next = -1;
    w->parties += w->uncapped;
    w->any = w->parties != 0;
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
    return io->card && !io->turns ? gs_card_competitors(io->card, io->slot, now) : 0;
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
    unsigned long long t0 = io->now(io);
    stamp(p, io, GS_CARD_BACKLOG, t0);
    if (io->event_wait(io, f->ev) != 0) {
        /* The context is broken: forget the ring, its events are lost. */
        gs_pace_reset(p);
        return;
    }
    unsigned long long now = io->now(io), took = now - t0;
    unsigned long long decayed = p->blocked_ns - p->blocked_ns / 8;
    p->blocked_ns = took > decayed ? took : decayed;
    complete_oldest(p, io, competitors(io, now));
}

/* Let our queue run dry (fencing our last launches first), say so in the
 * card, and start a new busy period at the next launch: what we are charged
 * after a wait is then never the time others held the card meanwhile. */
static void drain(struct gs_pacer *p, struct gs_pace_io *io, void *stream)
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

/* ------------------------------------------------------- card stamps */

static unsigned long long load(unsigned long long *w)
{
    return __atomic_load_n(w, __ATOMIC_RELAXED);
}

static void store(unsigned long long *w, unsigned long long v)
{
    __atomic_store_n(w, v, __ATOMIC_RELAXED);
}

/* *w = max(*w, v), unless *w is garbage (beyond GS_PACE_AHEAD_NS): then v. */
static void raise_to(unsigned long long *w, unsigned long long v, unsigned long long now)
{
    unsigned long long old = load(w);
    for (int tries = 0; tries < 8; tries++) {
        if (old >= v && old - now <= GS_PACE_AHEAD_NS)
            return;
        if (__atomic_compare_exchange_n(w, &old, v, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            return;
    }
}

/* A stamp that says "until t": still in force, and not garbage. */
static int lasts(unsigned long long t, unsigned long long now)
{
    return t >= now && t - now <= GS_PACE_AHEAD_NS;
}

static int recent(unsigned long long t, unsigned long long now)
{
    return t && within(t, now, GS_PACE_STALE_NS, GS_PACE_STALE_NS);
}

/* How much longer the longest queue of the others lasts, as their slots say
 * (a queue that has run dry since does not; one announced further ahead
 * than `believed` is not believed). */
static unsigned long long others_queued_ns(const struct gpuslice_cardfile *c, int mine,
                                           unsigned long long now, unsigned long long believed)
{
    unsigned long long most = 0;
    for (int i = 0; i < GPUSLICE_CARDFILE_SLOTS; i++) {
        const struct gpuslice_cardfile_slot *s = &c->slots[i];
        unsigned long long b = __atomic_load_n(&s->backlog_ns, __ATOMIC_RELAXED);
        if (i != mine && b > now && b - now <= believed && b - now > most &&
            __atomic_load_n(&s->owner, __ATOMIC_RELAXED) &&
            __atomic_load_n(&s->drained_ns, __ATOMIC_RELAXED) < b)
            most = b - now;
    }
    return most;
}

/* What others should know before we launch (a guest, high-priority work,
 * normal work a low tenant yields to): until when they should stand aside.
 * Our work runs after what they have queued now: the stamp lasts past that,
 * or a neighbour with long launches (graph replays) would take the card
 * back before our work has run and the GPU would have to cut in. */
static void announce(struct gs_pacer *p, struct gs_pace_io *io, unsigned long long now)
{
    struct gpuslice_cardfile *c = io->card;
    unsigned long long *w = io->prio == GPUSLICE_PRIORITY_HIGH ? &c->high_until_ns
                            : p->guest_since_ns      ? &c->guest_until_ns
                            : io->prio == GPUSLICE_PRIORITY_NORMAL && recent(load(&c->low_ns), now)
                                ? &c->normal_until_ns
                                : NULL;
    if (!w)
        return;
    unsigned long long ahead = GS_PACE_ASIDE_NS;
    if (w != &c->normal_until_ns) {
        unsigned long long theirs =
            others_queued_ns(c, io->slot, now, GS_PACE_TURN_NS) + GS_PACE_ASIDE_NS / 5;
        ahead = theirs > ahead ? theirs : ahead;
    }
    raise_to(w, now + queued_ns(p) + ahead, now);
}

/* Until when we should stand aside for someone else's work (0: we need not),
 * and in *rank whether only for normal work (we are low). A high process
 * and a guest never stand aside. */
static unsigned long long aside_until(const struct gs_pacer *p, struct gs_pace_io *io,
                                      unsigned long long now, int *rank)
{
    struct gpuslice_cardfile *c = io->card;
    unsigned long long t = 0, v;
    *rank = 0;
    if (io->prio == GPUSLICE_PRIORITY_HIGH || p->guest_since_ns)
        return 0;
    if (lasts(v = load(&c->high_until_ns), now) && v > t)
        t = v;
    if (lasts(v = load(&c->guest_until_ns), now) && v > t)
        t = v;
    if (io->prio == GPUSLICE_PRIORITY_LOW && !t && lasts(v = load(&c->normal_until_ns), now)) {
        t = v;
        *rank = 1;
    }
    return t;
}

/* ------------------------------------------------------------ allowances */

/* Refill a to `pct` of the wall time since it was last looked at (at most
 * `max` saved): whatever the card file says (anyone can write it), a process
 * waits at most that share of its time. Once spent, nothing is allowed
 * until a quarter of `max` is back: the process then runs for a while, not
 * for one launch between two waits. 1 if waiting is allowed. */
static int allowed(struct gs_allowance *a, unsigned long long pct, unsigned long long max,
                   unsigned long long now)
{
    if (a->stamp_ns == 0 || now < a->stamp_ns) {
        a->left_ns = (long long)max;
    } else {
        unsigned long long dt = now - a->stamp_ns;
        if (dt > max)
            dt = max;
        long long v = a->left_ns + (long long)(dt * pct / 100);
        a->left_ns = v > (long long)max ? (long long)max : v;
    }
    a->stamp_ns = now;
    if (a->left_ns <= 0)
        a->spent = 1;
    else if (a->spent && a->left_ns >= (long long)(max / 4))
        a->spent = 0;
    return !a->spent;
}

static int patient(struct gs_pacer *p, unsigned long long now)
{
    return allowed(&p->patience, GS_PACE_PATIENCE_PCT, GS_PACE_PATIENCE_NS, now);
}

static int courteous(struct gs_pacer *p, unsigned long long now)
{
    return allowed(&p->courtesy, GS_PACE_COURTESY_PCT, GS_PACE_COURTESY_NS, now);
}

/* Sleep for ns (or on the card's seq, when seq is given), charging the time
 * to a; how long it slept. */
static unsigned long long wait_spending(struct gs_pace_io *io, struct gs_allowance *a,
                                        unsigned *seq, unsigned seen, unsigned long long ns)
{
    unsigned long long t0 = io->now(io);
    if (seq)
        io->wait_word(io, seq, seen, ns);
    else
        io->sleep(io, ns);
    unsigned long long took = io->now(io) - t0;
    a->left_ns -= (long long)took;
    return took;
}

/* ------------------------------------------------------------------ turns */

/* A window a holder left uncapped waiters (their turn): it ends after the
 * holder's queue and uncapped_turn(), no further ahead than a round. */
static int window_open(unsigned long long until, unsigned long long now)
{
    return until > now && until - now <= GS_PACE_ROUND_NS + GS_PACE_DRAIN_NS;
}

/* Whose turn it is, if it is someone else's and still running. */
static int turn_elsewhere(struct gs_pace_io *io, unsigned long long now)
{
    struct gpuslice_cardfile *c = io->card;
    unsigned long long owner = load(&c->turn_owner), until = load(&c->turn_until_ns);
    return owner && owner != io->token && until > now && lasts(until, now);
}

/* Our lease lasts as long as our queue, and a little: a holder that stops
 * launching frees the card within GS_PACE_LEASE_NS of its last work. The
 * little is twice what our waits for the queue took lately, if more: a
 * holder whose kernels are slowed (by a neighbour that ran beside it) must
 * not lose the card while it waits for them, or the neighbour runs beside
 * it again. */
static void renew(struct gs_pacer *p, struct gs_pace_io *io, unsigned long long now)
{
    unsigned long long slack = 2 * p->blocked_ns > GS_PACE_LEASE_NS ? 2 * p->blocked_ns
                                                                    : GS_PACE_LEASE_NS;
    if (slack > GS_PACE_DRAIN_NS)
        slack = GS_PACE_DRAIN_NS;
    store(&io->card->turn_until_ns, now + queued_ns(p) + slack);
}

static void changed_hands(struct gs_pace_io *io)
{
    __atomic_add_fetch(&io->card->seq, 1, __ATOMIC_RELAXED);
    io->wake_word(io, &io->card->seq);
}

/* The uncapped tenants' turn, when a capped holder leaves them the card: their
 * part of a round of GS_PACE_ROUND_NS, (100 - cap) % of it (the holder's turn,
 * should_yield, is the rest); at least GS_PACE_TURN_MIN_NS. */
static unsigned long long uncapped_turn(struct gs_pace_io *io)
{
    unsigned cap = io->cap(io);
    unsigned long long t = cap >= 100 ? 0 : GS_PACE_ROUND_NS * (100 - cap) / 100;
    return t < GS_PACE_TURN_MIN_NS ? GS_PACE_TURN_MIN_NS : t;
}

/* Give the card up, if we hold it, and let our queue run dry: to the capped
 * process that has waited longest, or to nobody; with `window`, a capped
 * process (us too) leaves it to uncapped waiters for their turn
 * (uncapped_turn, after our queue) before taking it again. We pass it as we
 * stop launching, before our queue is dry: the next one's launches wait in
 * its own queue while ours runs out,
 * then the GPU turns to it at once (what it is charged starts there). */
static void give_turn(struct gs_pacer *p, struct gs_pace_io *io, void *stream, int window)
{
    struct gpuslice_cardfile *c = io->card;
    if (p->turn) {
        p->turn = 0;
        p->lost_ns = window ? io->now(io) : 0; /* away from here on (not while it sleeps) */
        unsigned long long now = io->now(io), mine = io->token, ours = queued_ns(p);
        struct gs_waiters w;
        gs_card_waiters(c, io->slot, now, &w);
        unsigned long long token = w.next >= 0 ? load(&c->slots[w.next].owner) : 0;
        if (load(&c->turn_owner) == mine) { /* else taken from us (our lease lapsed) */
            if (token) {
                store(&c->turn_until_ns, now + ours + GS_PACE_PASS_NS);
                store(&c->turn_owner, token);
            } else {
                __atomic_compare_exchange_n(&c->turn_owner, &mine, 0, 0, __ATOMIC_RELAXED,
                                            __ATOMIC_RELAXED);
                if (window && w.uncapped)
                    store(&c->free_until_ns, now + ours + uncapped_turn(io));
            }
            changed_hands(io);
        }
    }
    drain(p, io, stream);
}

/* A holder passes the card on when others wait. To uncapped waiters (they
 * take their turn together, uncapped_turn, then the holder takes the card back): once
 * the card time it was charged in this turn, with what it still has queued,
 * is a quarter more than cap / (100 - cap) times as long as it was away
 * from the card last time (their turn, the hand-overs, a neighbour's long
 * kernel that had to run out; got_turn), so that its share of the rounds is
 * at least its cap whatever the hand-overs cost, and its bucket decides. To
 * capped waiters: after GS_PACE_CAPPED_TURN_NS shared among the parties
 * waiting, or once one has waited that long; each pass costs the card a
 * context switch (0.2 ms on an H200), and their buckets, not the turns,
 * divide the card between them. Both count what the holder still has
 * queued (its last work runs before theirs). */
static int should_yield(struct gs_pacer *p, struct gs_pace_io *io, unsigned long long now)
{
    struct gpuslice_cardfile *c = io->card;
    unsigned long long held = now - p->turn_since_ns;
    if (held < GS_PACE_TURN_MIN_NS ||
        !within(load(&c->want_ns), now, GS_PACE_WANT_NS, GS_PACE_WANT_NS))
        return 0;
    struct gs_waiters w;
    gs_card_waiters(c, io->slot, now, &w);
    unsigned long long q = queued_ns(p);
    if (!w.any)
        return 0;
    if (w.next < 0)
        return p->turn_card_ns + q >= p->turn_len_ns;
    unsigned long long turn = GS_PACE_CAPPED_TURN_NS;
    return held + q >= turn / w.parties || now - w.oldest_ns + q >= turn;
}

/* Our turn begins. How long we hold it while uncapped processes wait: a
 * quarter more than cap / (100 - cap) times as long as we were away from the
 * card since we last gave it up (should_yield), at least GS_PACE_TURN_MIN_NS,
 * at most GS_PACE_LONG_TURN_NS; `drained_ns`, our wait for the others'
 * queues, counts as away too (a neighbour whose single kernel runs for
 * milliseconds cannot be drained sooner). */
static void got_turn(struct gs_pacer *p, struct gs_pace_io *io, unsigned long long now,
                     unsigned long long drained_ns)
{
    unsigned cap = io->cap(io);
    unsigned long long away = p->lost_ns && now > p->lost_ns ? now - p->lost_ns : drained_ns;
    /* A quarter more than its share: the turns must never be what holds a
     * capped process below its cap (a hand-over may cost more than the round
     * shows); its bucket, which is exact, stops it at its cap, and the card
     * is the uncapped ones' while it sleeps. */
    unsigned long long t = !cap || cap >= 100 ? GS_PACE_LONG_TURN_NS
                                              : away * cap * 5 / ((100 - cap) * 4);
    p->turn_len_ns = t < GS_PACE_TURN_MIN_NS    ? GS_PACE_TURN_MIN_NS
                     : t > GS_PACE_LONG_TURN_NS ? GS_PACE_LONG_TURN_NS
                                                : t;
    p->lost_ns = 0;
    p->turn_card_ns = 0;
    p->turn = 1;
    p->turn_since_ns = now;
    store(&io->card->turn_since_ns, now);
    renew(p, io, now);
}

/* When the holder's turn should end, as a waiter that has waited since
 * `since` can tell: GS_PACE_TURN_NS after it began, or GS_PACE_WAIT_NS
 * after we began to wait, whichever comes first. */
static unsigned long long turn_due(struct gs_pace_io *io, unsigned long long since,
                                   unsigned long long now)
{
    unsigned long long began = load(&io->card->turn_since_ns);
    unsigned long long due = since + GS_PACE_WAIT_NS;
    if (within(began, now, 0, GS_PACE_STALE_NS) && began + GS_PACE_TURN_NS < due)
        due = began + GS_PACE_TURN_NS;
    return due;
}

/* Another's turn: say we wait, and wait (our queue empty) until it is over,
 * it is passed to us, or our patience runs out. Asleep until shortly before
 * the turn should end, then awake: a sleeper on a virtual machine wakes a
 * few hundred microseconds after it is woken, and the card would idle
 * meanwhile. An honest holder passes the card within a round of turns: a
 * wait shorter than GS_PACE_GRACE_NS costs no patience. One that outlasts
 * it (a holder that never lets go: anyone can write the card file) makes us
 * doubt, and until a wait ends within the grace again every wait spends
 * patience from its start. */
static void wait_for_turn(struct gs_pacer *p, struct gs_pace_io *io, void *stream, int capped)
{
    struct gpuslice_cardfile *c = io->card;
    drain(p, io, stream);
    if (io->slot < 0)
        return; /* no slot to say so in: nobody would pass us the card */
    struct gpuslice_cardfile_slot *s = &c->slots[io->slot];
    unsigned long long now = io->now(io), since = now;
    unsigned long long grace_until = p->doubt ? now : now + GS_PACE_GRACE_NS;
    store(&s->want_since_ns, now);
    __atomic_store_n(&s->flags, capped ? GPUSLICE_CARDFILE_WAITS_CAPPED : 0u, __ATOMIC_RELAXED);
    for (;;) {
        store(&s->want_ns, now);
        store(&c->want_ns, now);
        unsigned seen = __atomic_load_n(&c->seq, __ATOMIC_RELAXED);
        if (!turn_elsewhere(io, now)) {
            if (now < grace_until)
                p->doubt = 0;
            break;
        }
        if (now >= grace_until) {
            p->doubt = 1;
            if (!patient(p, now))
                break;
        }
        unsigned long long t0 = now, due = turn_due(io, since, now);
        if (due <= now + GS_PACE_SPIN_NS && now <= due + GS_PACE_SPIN_NS) {
            io->pause(io);
        } else {
            unsigned long long ns = load(&c->turn_until_ns) - now + 1;
            if (due > now + GS_PACE_SPIN_NS && due - now - GS_PACE_SPIN_NS < ns)
                ns = due - now - GS_PACE_SPIN_NS;
            io->wait_word(io, &c->seq, seen, ns < GS_PACE_POLL_NS ? ns : GS_PACE_POLL_NS);
        }
        now = io->now(io);
        unsigned long long from = t0 > grace_until ? t0 : grace_until;
        if (now > from)
            p->patience.left_ns -= (long long)(now - from);
    }
    p->held_ns += now - since;
    store(&s->want_ns, 0);
}

/* Whether another process may still launch into a turn taken at `since`:
 * it said it had work queued within the last GS_PACE_GAP_NS (one busy
 * period) and has not let its queue run dry since. A host-bound one runs
 * dry between its launches, the GPU turns to us, and a launch it made
 * before it saw our turn would cut into our turn at the next time slice. */
static int others_launching(const struct gpuslice_cardfile *c, int mine,
                            unsigned long long since, unsigned long long now)
{
    for (int i = 0; i < GPUSLICE_CARDFILE_SLOTS; i++) {
        const struct gpuslice_cardfile_slot *s = &c->slots[i];
        unsigned long long b = __atomic_load_n(&s->backlog_ns, __ATOMIC_RELAXED);
        if (i != mine && __atomic_load_n(&s->owner, __ATOMIC_RELAXED) &&
            __atomic_load_n(&s->drained_ns, __ATOMIC_RELAXED) < since &&
            within(b, now, GS_PACE_AHEAD_NS, GS_PACE_GAP_NS))
            return 1;
    }
    return 0;
}

/* A capped process takes the free card, then gives the others' queues (up
 * to GS_PACE_DRAIN_NS) to run out to their last GS_PACE_QUEUE_NS, so that
 * what it is charged from here on is its own work. 0: not now (a window
 * left to uncapped waiters, or another took it first). */
static int take_turn(struct gs_pacer *p, struct gs_pace_io *io)
{
    struct gpuslice_cardfile *c = io->card;
    unsigned long long now = io->now(io);
    unsigned long long free_until = load(&c->free_until_ns);
    if (window_open(free_until, now) && patient(p, now)) {
        /* Woken early when the uncapped ones close it (window_too_short). */
        unsigned seen = __atomic_load_n(&c->seq, __ATOMIC_RELAXED);
        if (load(&c->free_until_ns) == free_until)
            p->held_ns += wait_spending(io, &p->patience, &c->seq, seen, free_until - now);
        return 0;
    }
    unsigned long long owner = load(&c->turn_owner);
    if (!__atomic_compare_exchange_n(&c->turn_owner, &owner, io->token, 0, __ATOMIC_RELAXED,
                                     __ATOMIC_RELAXED))
        return 0;
    p->turn = 1;
    renew(p, io, now);
    changed_hands(io); /* an uncapped process that used its window waits for this */
    /* Our first work may queue behind the last few hundred microseconds of
     * theirs: our marker completes when the GPU gets to us, so the charge
     * stays ours, and the GPU need not idle while we hand over. */
    unsigned long long t0 = now;
    while (now - t0 < GS_PACE_DRAIN_NS &&
           (others_queued_ns(c, io->slot, now, GS_PACE_AHEAD_NS) > GS_PACE_QUEUE_NS ||
            others_launching(c, io->slot, t0, now))) {
        io->sleep(io, GS_PACE_POLL_NS / 5);
        renew(p, io, now = io->now(io));
    }
    p->held_ns += now - t0;
    got_turn(p, io, now, now - t0); /* the turn's length counts from our own work */
    return 1;
}

/* Stand aside (our queue empty) while a guest or higher-priority work runs,
 * as far as our courtesy (or, for a low process beside normal work, our
 * patience) goes. */
static void stand_aside(struct gs_pacer *p, struct gs_pace_io *io, void *stream)
{
    drain(p, io, stream);
    for (;;) {
        unsigned long long now = io->now(io);
        int rank;
        unsigned long long until = aside_until(p, io, now, &rank);
        struct gs_allowance *a = rank ? &p->patience : &p->courtesy;
        if (!until || !(rank ? patient(p, now) : courteous(p, now)))
            return;
        p->held_ns += wait_spending(io, a, NULL, 0, until - now < GS_PACE_POLL_NS
                                                        ? until - now + 1
                                                        : GS_PACE_POLL_NS);
        if (p->turn)
            renew(p, io, io->now(io));
    }
}

/* An uncapped process in the window a holder left it: a launch that would
 * still run well after the window ends (more than the GS_PACE_QUEUE_NS the
 * holder waits for anyway) waits for the next one, but the first of its
 * window goes, however long; or the holder would wait for it, or share its
 * turn with it (a neighbour whose kernels run for ten milliseconds). */
static int window_too_short(struct gs_pacer *p, struct gs_pace_io *io, unsigned long long now)
{
    unsigned long long w = load(&io->card->free_until_ns);
    return window_open(w, now) && p->count &&
           now + queued_ns(p) + p->per_launch_ns > w + GS_PACE_QUEUE_NS;
}

/* Before a launch on a card with a turn: a capped process holds the card
 * while it runs and passes it on after GS_PACE_TURN_NS when others wait; an
 * uncapped one waits while another holds it; all stand aside for guests and
 * higher priorities. Returns with our launch allowed. */
static void gate(struct gs_pacer *p, struct gs_pace_io *io, void *stream)
{
    struct gpuslice_cardfile *c = io->card;
    int capped = io->cap(io) != 0;
    unsigned long long now = io->now(io);
    announce(p, io, now);
    if (io->prio == GPUSLICE_PRIORITY_HIGH || p->guest_since_ns)
        return; /* they never wait: others stand aside for them */
    int checked = 0;
    for (;;) {
        now = io->now(io);
        int rank;
        unsigned long long until = aside_until(p, io, now, &rank);
        int wait_aside = until && (rank ? patient(p, now) : courteous(p, now));
        if (!p->turn && load(&c->turn_owner) == io->token)
            got_turn(p, io, now, 0); /* passed to us */
        int elsewhere = turn_elsewhere(io, now);
        if (elsewhere)
            p->turn = 0;
        int yield = p->turn && should_yield(p, io, now);
        int wait_turn = elsewhere && (!p->doubt || patient(p, now));
        int late = !capped && !elsewhere && window_too_short(p, io, now);
        if (!wait_aside && !yield && !wait_turn && !late && (!capped || p->turn || elsewhere))
            return;
        if (!checked) {
            /* A launch into a graph being captured runs later, when the graph does. */
            if (io->capturing(io, stream))
                return;
            checked = 1;
        }
        if (wait_aside) {
            stand_aside(p, io, stream);
        } else if (yield) {
            give_turn(p, io, stream, 1);
        } else if (wait_turn) {
            wait_for_turn(p, io, stream, capped);
        } else if (late) {
            /* The window closes now (the holder waits for it on seq), and we
             * wait until the holder takes the card back (or a little after
             * the window, if it does not come): then its turn, and ours after. */
            unsigned long long w = load(&c->free_until_ns);
            if (!patient(p, now))
                return;
            if (__atomic_compare_exchange_n(&c->free_until_ns, &w, now, 0, __ATOMIC_RELAXED,
                                            __ATOMIC_RELAXED))
                changed_hands(io);
            unsigned seen = __atomic_load_n(&c->seq, __ATOMIC_RELAXED);
            p->held_ns += wait_spending(io, &p->patience, &c->seq, seen,
                                        w - now + GS_PACE_SPIN_NS);
            if (__atomic_load_n(&c->seq, __ATOMIC_RELAXED) == seen &&
                !turn_elsewhere(io, io->now(io)))
                return;
        } else if (take_turn(p, io)) {
            return;
        }
    }
}

/* In debt: let our queue run dry, give the card up, sleep until the credit is back. */
static void throttle(struct gs_pacer *p, struct gs_pace_io *io, void *stream)
{
    give_turn(p, io, stream, 0);
    p->slept = 1;
    p->guest_since_ns = 0;
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
    struct gpuslice_cardfile *c = io->card;
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
            renew(p, io, now);
        announce(p, io, now);
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
     * left (work queued past that would run as it stops being first). */
    if (taking_turns && (io->prio == GPUSLICE_PRIORITY_HIGH || (p->guest_since_ns && p->per_launch_ns)) &&
        others_queued_ns(c, io->slot, now, GS_PACE_AHEAD_NS) > GS_PACE_QUEUE_NS) {
        while (p->count >= GS_PACE_RING - 1 ||
               (p->count > 1 && io->prio != GPUSLICE_PRIORITY_HIGH &&
                (long long)queued_ns(p) > p->guest_credit_ns))
            wait_oldest(p, io);
    } else {
        while ((cap || taking_turns) && p->count > 1 &&
               (queued_ns(p) > GS_PACE_QUEUE_NS ||
                (p->per_launch_ns == 0 && p->count > GS_PACE_MAX_QUEUED)))
            wait_oldest(p, io);
    }
    unsigned long long wait = 0;
    if (settle(p, io, &wait) && wait)
        throttle(p, io, stream); /* settle also keeps an uncapped process's usage */
}

/* First service is earned by idling. A process that comes back from idle
 * (it launched nothing for GS_PACE_GAP_NS and its queue ran dry, not because
 * we made it wait or sleep for its cap) has earned as much first service as
 * it idled, up to GS_PACE_GUEST_MAX_NS, and is a guest while it has some
 * left: it launches at once and the others stand aside (a request of an
 * inference server, however many kernels it launches and syncs it makes).
 * Holding the card as a guest spends it, nanosecond for nanosecond. So a
 * tenant that holds the card at most half the time is always served first,
 * and a busy one (it never idles; waiting for turns is not idling) never is.
 * Not a low one's (low yields to normal work, requests too); a high one is
 * always served first and needs no credit. */
static void guest(struct gs_pacer *p, struct gs_pace_io *io, int fresh, unsigned long long now)
{
    if (io->prio != GPUSLICE_PRIORITY_NORMAL) {
        p->guest_since_ns = 0;
        return;
    }
    unsigned long long idle = now - p->returned_ns;
    if (fresh && (!p->returned_ns || idle > GS_PACE_GAP_NS)) {
        long long c = p->guest_credit_ns;
        if (p->returned_ns)
            c += (long long)(idle < GS_PACE_GUEST_MAX_NS ? idle : GS_PACE_GUEST_MAX_NS);
        p->guest_credit_ns = c > (long long)GS_PACE_GUEST_MAX_NS ? (long long)GS_PACE_GUEST_MAX_NS
                                                                 : c;
        p->guest_since_ns = p->guest_credit_ns > 0 ? now : 0;
    } else if (p->guest_since_ns) {
        p->guest_credit_ns -= (long long)(now - p->guest_seen_ns);
        if (p->guest_credit_ns <= 0)
            p->guest_since_ns = 0;
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
        poll_ring(p, io, now);
        a = gs_pace_gap(p);
    }
    if (io->turns && io->card) {
        guest(p, io, (a & GS_PACE_MARK) && !p->slept, now);
        p->slept = 0;
        gate(p, io, stream);
        now = io->now(io);
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
        fence_point(p, io, stream, now);
        p->returned_ns = io->now(io); /* it may have waited for its queue */
    }
}

void gs_pace_leave(struct gs_pacer *p, struct gs_pace_io *io)
{
    if (!io->card || !p->turn)
        return;
    unsigned long long mine = io->token;
    p->turn = 0;
    if (__atomic_compare_exchange_n(&io->card->turn_owner, &mine, 0, 0, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED))
        changed_hands(io);
}

/* ------------------------------------ launches past the pacer (launch.c)
 * Added for issue 25 (launches from many threads): small pure functions on
 * the pacer's fields, no policy. launch.c lets a launch that is no fence
 * point go to the driver without taking the pacer's lock, counts it with
 * atomics, and hands the count over at the next launch that comes through
 * gs_pace_launch_begin/end. */

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

void gs_pace_count(struct gs_pacer *p, unsigned long long n, unsigned long long unseen)
{
    p->launches += n;
    p->since_fence += (unsigned)n;
    /* Launches that reached the GPU while the pacer held the process back
     * (throttled, standing aside, waiting for a turn) ran outside every
     * interval it measures: charged at the learned estimate, as a gap
     * charges its unfenced launches. */
    p->charge_ns += unseen * p->per_launch_ns;
}
