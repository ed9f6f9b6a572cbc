/*
 * Turns on a card with capped or prioritised tenants: a capped process
 * holds the card while it runs and passes it on when others wait, an
 * uncapped one waits while another holds it, everyone stands aside for a
 * guest and higher priorities; patience and courtesy (allowances) bound
 * what any wait costs, whatever the card file says. Reasoning:
 * docs/compute-limit.md.
 */
#include "pace_parts.h"

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
void gs_pace_renew(struct gs_pacer *p, struct gs_pace_io *io, unsigned long long now)
{
    unsigned long long slack = 2 * p->blocked_ns > GS_PACE_LEASE_NS ? 2 * p->blocked_ns
                                                                    : GS_PACE_LEASE_NS;
    if (slack > GS_PACE_DRAIN_NS)
        slack = GS_PACE_DRAIN_NS;
    store(&io->card->turn_until_ns, now + gs_pace_queued_ns(p) + slack);
}

static void changed_hands(struct gs_pace_io *io)
{
    __atomic_add_fetch(&io->card->seq, 1, __ATOMIC_RELAXED);
    io->wake_word(io, &io->card->seq);
}

/* A waiter says it still wants the card, in its seat and card-wide (a holder
 * that sees no want renewed within GS_PACE_WANT_NS forgets it). */
static void renew_want(struct gpuslice_cardfile *c, struct gpuslice_cardfile_seat *s,
                       unsigned long long now)
{
    store(&s->want_ns, now);
    store(&c->want_ns, now);
}

/* The uncapped tenants' turn, when a capped holder leaves them the card: their
 * part of a round of GS_PACE_ROUND_NS, (100 - cap) % of it (the holder's turn,
 * should_yield, is the rest), shared with the other capped processes that
 * wait (`capped`): their caps are not ours to know, and a window of
 * (100 - cap) % after each of three 30s left each of them 22-28 (simulated);
 * their buckets, not the windows, stop them at their caps, and the card is
 * the uncapped ones' while they sleep. At least GS_PACE_TURN_MIN_NS. */
static unsigned long long uncapped_turn(struct gs_pace_io *io, unsigned capped)
{
    unsigned cap = io->cap(io);
    unsigned long long t = cap >= 100 ? 0 : GS_PACE_ROUND_NS * (100 - cap) / 100 / (1 + capped);
    return t < GS_PACE_TURN_MIN_NS ? GS_PACE_TURN_MIN_NS : t;
}

/* The window for gated waiters: their share of the turn we just held, no
 * more than uncapped_turn. Their work queued behind their gates runs at
 * once, densely, and each ends its window as the GPU catches up with it
 * (caught_up): rounds as short as the work allows, the card passing at
 * about the pace of time slicing's own, with no one's work beside ours. */
static unsigned long long gated_turn(struct gs_pacer *p, struct gs_pace_io *io,
                                     unsigned long long now, unsigned long long t)
{
    unsigned cap = io->cap(io);
    if (!cap || cap >= 100)
        return t;
    unsigned long long g = (now - p->turn_since_ns) * (100 - cap) / cap;
    if (g < GS_PACE_TURN_MIN_NS)
        g = GS_PACE_TURN_MIN_NS;
    return g < t ? g : t;
}

/* Give the card up, if we hold it, and let our queue run dry: to the capped
 * process that has waited longest, or to nobody; with `window`, a capped
 * process (us too) leaves it to uncapped waiters for their turn
 * (uncapped_turn, after our queue) before taking it again. We pass it as we
 * stop launching, before our queue is dry: the next one's launches wait in
 * its own queue while ours runs out,
 * then the GPU turns to it at once (what it is charged starts there). */
void gs_pace_give_turn(struct gs_pacer *p, struct gs_pace_io *io, void *stream, int window)
{
    struct gpuslice_cardfile *c = io->card;
    if (p->turn) {
        unsigned long long now = io->now(io), mine = io->token, ours = gs_pace_queued_ns(p);
        p->turn = 0;
        p->gated_window = 0;
        p->lost_ns = window ? now : 0; /* away from here on (not while it sleeps) */
        struct gs_waiters w;
        gs_card_waiters(c, io->seat, now, &w);
        unsigned long long token = w.next >= 0 ? load(&c->seats[w.next].owner) : 0;
        if (load(&c->turn_owner) == mine) { /* else taken from us (our lease lapsed) */
            if (token) {
                store(&c->turn_until_ns, now + ours + GS_PACE_PASS_NS);
                store(&c->turn_owner, token);
            } else {
                __atomic_compare_exchange_n(&c->turn_owner, &mine, 0, 0, __ATOMIC_RELAXED,
                                            __ATOMIC_RELAXED);
                p->gated_window = window && w.uncapped && w.gated;
                if (window && w.uncapped) {
                    unsigned long long t = uncapped_turn(io, w.parties - 1);
                    if (p->gated_window)
                        t = gated_turn(p, io, now, t);
                    store(&c->free_until_ns, now + ours + t);
                }
            }
            changed_hands(io);
        }
    }
    gs_pace_drain(p, io, stream);
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
    gs_card_waiters(c, io->seat, now, &w);
    unsigned long long q = gs_pace_queued_ns(p);
    if (!w.any)
        return 0;
    int share_done = p->turn_card_ns + q >= p->turn_len_ns;
    if (w.next < 0)
        return share_done;
    unsigned long long turn = GS_PACE_CAPPED_TURN_NS;
    int due = held + q >= turn / w.parties || now - w.oldest_ns + q >= turn;
    /* With uncapped waiters too, a holder first keeps its share of the
     * round: passed on after its part of the 12 ms, the first capped
     * process of a round got less than its cap while the uncapped window
     * stayed (100 - cap) % of a round (simulated: two 30s beside a busy
     * tenant, 21.6 and 30). */
    return due && (!w.uncapped || share_done);
}

/* Our turn begins. How long we hold it while uncapped processes wait: a
 * quarter more than cap / (100 - cap) times as long as we were away from the
 * card since we last gave it up (should_yield), at least GS_PACE_TURN_MIN_NS,
 * at most GS_PACE_LONG_TURN_NS or, after a long time away,
 * GS_PACE_LONG_TURN_AWAY times it (up to twice the longest turn); `drained_ns`,
 * our wait for the others' queues, counts as away too (a neighbour whose
 * single kernel runs for milliseconds cannot be drained sooner). A window
 * holds at least one of the waiter's launches: beside 13.7 ms kernels a 90
 * whose turns stopped at 100 ms held 87.3-88.7 % (simulated), and a waiter
 * whose launches are that long waits so long within its grace (grace_ns). */
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
    unsigned long long most = clamp_ns(away * GS_PACE_LONG_TURN_AWAY, GS_PACE_LONG_TURN_NS,
                                       2 * GS_PACE_LONG_TURN_NS);
    p->turn_len_ns = clamp_ns(t, GS_PACE_TURN_MIN_NS, most);
    p->lost_ns = 0;
    p->turn_card_ns = 0;
    p->wants_since_ns = 0;
    p->turn = 1;
    p->turn_since_ns = now;
    store(&io->card->turn_since_ns, now);
    gs_pace_renew(p, io, now);
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

/* How long an honest holder may keep the card from us: its longest turn
 * (got_turn) after a window of ours, which holds one of our launches at
 * least. A forged holder that lets go for a moment within each grace keeps
 * us to one launch a grace, as an honest 90 leaves a tenth (Trust). */
static unsigned long long grace_ns(const struct gs_pacer *p)
{
    return clamp_ns(p->per_launch_ns * GS_PACE_GRACE_LAUNCHES, GS_PACE_GRACE_NS,
                    2 * GS_PACE_GRACE_NS);
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
    gs_pace_drain(p, io, stream);
    if (io->seat < 0)
        return; /* no seat to say so in: nobody would pass us the card */
    struct gpuslice_cardfile_seat *s = &c->seats[io->seat];
    unsigned long long now = io->now(io), since = now;
    unsigned long long grace_until = p->doubt ? now : now + grace_ns(p);
    /* Beside a gated process, since we found a window open, if we did: a
     * capped process that slept through a window would otherwise have waited
     * less than the gated one that closed it as it ended (its batch done),
     * and the holder would leave it another window, and another (simulated:
     * two 30s beside a gated eager loop got 20-24). */
    unsigned long long first = now;
    if (capped && p->wants_since_ns && p->wants_since_ns <= now) {
        struct gs_waiters w;
        gs_card_waiters(c, io->seat, now, &w);
        if (w.gated)
            first = p->wants_since_ns;
    }
    p->wants_since_ns = 0;
    store(&s->want_since_ns, first);
    __atomic_store_n(&s->flags, capped ? GPUSLICE_CARDFILE_WAITS_CAPPED : 0u, __ATOMIC_RELAXED);
    for (;;) {
        renew_want(c, s, now);
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
        if (!p->wants_since_ns)
            p->wants_since_ns = now;
        /* Woken early when the uncapped ones close it (window_too_short,
         * caught_up). Awake through a window left to gated processes (a CPU
         * spinning while it lasts): they close it as soon as their batch has
         * run, and a sleeper would let the card idle for its wake-up at
         * every one of these short rounds (simulated, the eager loop beside
         * a 50: 43 of its passes alone awake the last 1 ms, 50 awake). */
        unsigned seen = __atomic_load_n(&c->seq, __ATOMIC_RELAXED);
        if (load(&c->free_until_ns) != free_until)
            return 0;
        if (p->gated_window) {
            io->pause(io);
            unsigned long long took = io->now(io) - now;
            p->patience.left_ns -= (long long)took;
            p->held_ns += took;
        } else {
            p->held_ns += wait_spending(io, &p->patience, &c->seq, seen, free_until - now);
        }
        return 0;
    }
    unsigned long long owner = load(&c->turn_owner);
    if (!__atomic_compare_exchange_n(&c->turn_owner, &owner, io->token, 0, __ATOMIC_RELAXED,
                                     __ATOMIC_RELAXED))
        return 0;
    p->turn = 1;
    gs_pace_renew(p, io, now);
    changed_hands(io); /* an uncapped process that used its window waits for this */
    /* Our first work may queue behind the last few hundred microseconds of
     * theirs: our marker completes when the GPU gets to us, so the charge
     * stays ours, and the GPU need not idle while we hand over. */
    unsigned long long t0 = now;
    while (now - t0 < GS_PACE_DRAIN_NS &&
           (gs_card_others_queued_ns(c, io->seat, now, GS_PACE_AHEAD_NS) > GS_PACE_QUEUE_NS ||
            gs_card_others_launching(c, io->seat, t0, now))) {
        io->sleep(io, GS_PACE_POLL_NS / 5);
        gs_pace_renew(p, io, now = io->now(io));
    }
    p->held_ns += now - t0;
    got_turn(p, io, now, now - t0); /* the turn's length counts from our own work */
    return 1;
}

/* Drain before standing aside, charged for our own work only. A host-bound
 * process's queue runs dry between its launches, and there the GPU goes to
 * the guest's context: the guest's work runs ahead of what we launched
 * before we saw its stamp, inside the intervals the drain times. What the
 * drain took beyond what we had queued (counted at our learned time a
 * launch, which holds our host's gaps: more than our kernels run) was
 * others' work. Charged for it, a host-bound loop capped at 50 did 46-48 %
 * of its uncapped steps beside graph replays, an eager loop 46-49; not
 * charged, 48.3-50.5 (simulated). On an H100 the suite's training loop at
 * 50 beside requests did the same either way (43.5 and 44.0 % by its
 * steps, charged its cap): its shortfall there has another cause
 * (docs/compute-limit.md, What is left). Not a GPU-bound process: its
 * context keeps the GPU while it has work queued (the time slice is 2 ms),
 * so the guest runs after its drain, and what its drain took beyond its
 * estimate is its own longer kernels. */
static void drain_own(struct gs_pacer *p, struct gs_pace_io *io, void *stream)
{
    unsigned long long queued = gs_pace_queued_ns(p), before = p->charge_ns;
    unsigned long long t0 = io->now(io);
    gs_pace_drain(p, io, stream);
    unsigned long long took = io->now(io) - t0;
    if (!gs_pace_host_bound(p) || took <= queued || p->charge_ns <= before)
        return; /* (a broken context resets the pacer: nothing charged) */
    unsigned long long others = took - queued, got = p->charge_ns - before;
    others = others < got ? others : got;
    p->charge_ns -= others;
    /* Nor is it card time of its turn (should_yield's share). */
    p->turn_card_ns -= others < p->turn_card_ns ? others : p->turn_card_ns;
    p->aside_others_ns += others;
    /* Its intervals' parts (charged_first_ns, charged_later_ns) keep what
     * they were timed at: the debug line says what was taken off. */
}

/* Stand aside (our queue empty) while a guest or higher-priority work runs,
 * as far as our courtesy (or, for a low process beside normal work, our
 * patience) goes. */
static void stand_aside(struct gs_pacer *p, struct gs_pace_io *io, void *stream)
{
    p->asides++;
    drain_own(p, io, stream);
    for (;;) {
        /* On the card's seq: a stamp let go at a wait's return (gs_pace_waited) bumps it. */
        unsigned seen = __atomic_load_n(&io->card->seq, __ATOMIC_RELAXED);
        unsigned long long now = io->now(io);
        int rank;
        unsigned long long until = gs_pace_aside_until(p, io, now, &rank);
        struct gs_allowance *a = rank ? &p->patience : &p->courtesy;
        if (!until || !(rank ? patient(p, now) : courteous(p, now)))
            return;
        p->held_ns += wait_spending(io, a, &io->card->seq, seen, until - now < GS_PACE_POLL_NS
                                                        ? until - now + 1
                                                        : GS_PACE_POLL_NS);
        if (p->turn)
            gs_pace_renew(p, io, io->now(io));
    }
}

/* An uncapped process ends the window it was left (seen as `until`) now,
 * unless the holder changed it meanwhile, and wakes the holder. */
static void end_window(struct gs_pace_io *io, unsigned long long until, unsigned long long now)
{
    if (__atomic_compare_exchange_n(&io->card->free_until_ns, &until, now, 0, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED))
        changed_hands(io);
}

/* ------------------------------------------------------------------ gates */

/* Instead of waiting for another's turn on the host, an uncapped process
 * closes its gate and goes on launching: its work waits on the GPU, and its
 * launching overlaps the holder's turn, as it does under plain time slicing
 * (on the host it could launch only in its own windows: an eager model's
 * passes beside a 50 got half their rate alone, time slicing 0.64). What
 * ran before the gate runs out first, so the holder's charges stay its own
 * work; we say we want the card (the watcher renews it while we are
 * blocked behind the gate, in a sync or at the ring's end). */
static int close_gate(struct gs_pacer *p, struct gs_pace_io *io, void *stream)
{
    struct gpuslice_cardfile *c = io->card;
    gs_pace_drain(p, io, stream);
    unsigned long long now = io->now(io);
    struct gpuslice_cardfile_seat *s = &c->seats[io->seat];
    unsigned long long since = load(&s->want_since_ns);
    store(&s->want_since_ns, now);
    __atomic_store_n(&s->flags, GPUSLICE_CARDFILE_GATED, __ATOMIC_RELAXED);
    renew_want(c, s, now);
    p->gate_refused = io->gate_close(io, stream) != 0;
    if (p->gate_refused) {
        /* The driver would not: we wait on the host, seated as we were. */
        __atomic_store_n(&s->flags, 0u, __ATOMIC_RELAXED);
        store(&s->want_since_ns, since);
        return -1;
    }
    /* An honest holder hands the card on within the grace; a doubting
     * process keeps its gate closed while its patience lasts, which
     * refills meanwhile (as wait_for_turn spends it: a tenth of the time
     * closed, net). */
    long long left = p->patience.left_ns > 0 ? p->patience.left_ns : 0;
    store(&p->gate_limit_ns,
          p->doubt ? (unsigned long long)left * 100 / (100 - GS_PACE_PATIENCE_PCT)
                   : grace_ns(p));
    store(&p->gate_queued_ns, 0);
    p->gate_closed_ns = now;
    p->gated = 1;
    __atomic_store_n(&p->gate_since_ns, now, __ATOMIC_RELEASE); /* the watcher starts here */
    return 0;
}

/* The watcher opened our gate: our turn (or window) came, or our grace or
 * patience ran out (a holder that never lets go), as wait_for_turn decides.
 * A doubting process doubts until the card comes to it within the grace:
 * beside three capped 30s an honest wait outlasted the grace now and then,
 * and a doubt kept for good let the gated batch out beside every holder
 * whose turn outlasted its patience (simulated: the three got 17-24). */
static void gate_opened(struct gs_pacer *p, struct gs_pace_io *io)
{
    p->gated = 0;
    unsigned long long opened = __atomic_load_n(&p->gate_opened_ns, __ATOMIC_RELAXED);
    unsigned long long waited = opened > p->gate_closed_ns ? opened - p->gate_closed_ns : 0;
    p->held_ns += waited;
    if (p->doubt)
        p->patience.left_ns -= (long long)waited;
    if (waited >= grace_ns(p))
        p->doubt = 1;
    else if (!__atomic_load_n(&p->gate_forced, __ATOMIC_RELAXED))
        p->doubt = 0;
    if (io->seat >= 0)
        store(&io->card->seats[io->seat].want_ns, 0);
}

int gs_pace_gate_watch(struct gs_pacer *p, struct gs_pace_io *io, unsigned long long now)
{
    unsigned long long since = __atomic_load_n(&p->gate_since_ns, __ATOMIC_ACQUIRE);
    if (!since)
        return 0;
    struct gpuslice_cardfile *c = io->card;
    int seat = __atomic_load_n(&io->seat, __ATOMIC_RELAXED);
    struct gpuslice_cardfile_seat *s =
        seat >= 0 && seat < GPUSLICE_CARDFILE_SEATS &&
                __atomic_load_n(&c->seats[seat].owner, __ATOMIC_RELAXED) == io->token
            ? &c->seats[seat]
            : NULL;
    /* A free turn just after we closed our window (caught_up): the holder
     * takes it back within a wake-up, and our gate stays closed meanwhile. */
    unsigned long long free_until = load(&c->free_until_ns);
    int held = turn_elsewhere(io, now) ||
               (load(&c->turn_owner) == 0 && !window_open(free_until, now) &&
                free_until <= since && since - free_until < GS_PACE_SPIN_NS &&
                now - since < GS_PACE_SPIN_NS);
    /* A request (a guest) or high work runs first: a batch let out now would
     * run before it (simulated: a decode loop's token syncs beside a gated
     * training step waited longer than with no shim). */
    int rank;
    held = held || gs_card_aside_until(c, io->prio, now, &rank);
    if (held && now - since < load(&p->gate_limit_ns)) {
        if (s)
            renew_want(c, s, now);
        return 0;
    }
    /* Our queued work now competes: a holder taking the card back waits for it. */
    if (s) {
        __atomic_store_n(&s->flags, 0u, __ATOMIC_RELAXED);
        store(&s->backlog_ns, now + load(&p->gate_queued_ns));
    }
    __atomic_store_n(&p->gate_forced, held, __ATOMIC_RELAXED);
    store(&p->gate_opened_ns, now);
    io->gate_open(io);
    __atomic_store_n(&p->gate_since_ns, 0, __ATOMIC_RELEASE);
    return 1;
}

/* With gates, an uncapped process's window ends once the GPU has caught up
 * with it (all it launched has run while it went on launching), after
 * GS_PACE_GATE_BATCH_NS from its gate's opening: the holder takes the card
 * back, and our launches wait behind our gate meanwhile, as under time
 * slicing the card turns back to a busy neighbour once our queue runs dry.
 * Our work then runs in dense batches, not spread over a window in which
 * the card idles between our launches. Not while the driver refuses our
 * gate: ended early, the window would be followed by a wait on the host
 * (simulated, a process whose every close failed got 36 % of its steps
 * beside a 50, 45 % with no gates). */
static int caught_up(struct gs_pacer *p, struct gs_pace_io *io, unsigned long long now)
{
    if (ungated(p, io) || !p->count || io->seat < 0 ||
        now - load(&p->gate_opened_ns) < GS_PACE_GATE_BATCH_NS ||
        !window_open(load(&io->card->free_until_ns), now))
        return 0;
    gs_pace_poll(p, io, now);
    return p->count == 0;
}

/* An uncapped process in the window a holder left it: a launch that would
 * still run well after the window ends (more than the GS_PACE_QUEUE_NS the
 * holder waits for anyway) waits for the next one, but the first of its
 * window goes, however long; or the holder would wait for it, or share its
 * turn with it (a neighbour whose kernels run for ten milliseconds). The
 * first of the window, not the first that finds our queue empty: a loop of
 * 13.7 ms kernels whose first ran out just before the window's end launched
 * the next as it closed, and the next holder's turn began that much late
 * (simulated, two 30s beside it dipped to 26.2-27.0 in some windows). */
static int window_too_short(struct gs_pacer *p, struct gs_pace_io *io, unsigned long long now)
{
    unsigned long long w = load(&io->card->free_until_ns);
    return window_open(w, now) && (p->count || p->window_ns == w) &&
           now + gs_pace_queued_ns(p) + p->per_launch_ns > w + GS_PACE_QUEUE_NS;
}

/* Before a launch on a card with a turn: a capped process holds the card
 * while it runs and passes it on after GS_PACE_TURN_NS when others wait; an
 * uncapped one waits while another holds it; all stand aside for guests and
 * higher priorities. Returns with our launch allowed. */
void gs_pace_gate(struct gs_pacer *p, struct gs_pace_io *io, void *stream)
{
    struct gpuslice_cardfile *c = io->card;
    int capped = io->cap(io) != 0;
    unsigned long long now = io->now(io);
    p->quiet = 0;
    /* Before anything below reads the card; only a process that may turn
     * out quiet needs them (normal). */
    if (io->prio == GPUSLICE_PRIORITY_NORMAL)
        gs_card_quiet_words(c, p->quiet_words);
    gs_pace_announce(p, io, now);
    if (io->prio == GPUSLICE_PRIORITY_HIGH)
        return; /* it never waits: others stand aside for it */
    if (p->guest_since_ns) {
        /* A guest waits for nobody's turn, but is normal work: it stands
         * aside for high work as others do. */
        int rank;
        if (gs_pace_aside_until(p, io, now, &rank) && courteous(p, now) &&
            !io->capturing(io, stream))
            stand_aside(p, io, stream);
        return;
    }
    if (p->gated) {
        if (__atomic_load_n(&p->gate_since_ns, __ATOMIC_ACQUIRE)) {
            /* Still closed: this launch waits behind it too (not one into a
             * graph being captured, which runs when the graph does). */
            if (!io->capturing(io, stream))
                io->gate_hold(io, stream);
            return;
        }
        gate_opened(p, io);
    }
    int checked = 0;
    for (;;) {
        now = io->now(io);
        int rank;
        unsigned long long until = gs_pace_aside_until(p, io, now, &rank);
        int wait_aside = until && (rank ? patient(p, now) : courteous(p, now));
        if (!p->turn && load(&c->turn_owner) == io->token)
            got_turn(p, io, now, 0); /* passed to us */
        int elsewhere = turn_elsewhere(io, now);
        if (elsewhere)
            p->turn = 0;
        int yield = p->turn && should_yield(p, io, now);
        /* Side by side (pace_side.c): it launches through the holder's turn. */
        int wait_turn = elsewhere && (!p->doubt || patient(p, now)) && (capped || !p->side);
        int late = !capped && !elsewhere && window_too_short(p, io, now);
        int done = !capped && !elsewhere && !late && !wait_aside && caught_up(p, io, now);
        if (!wait_aside && !yield && !wait_turn && !late && !done && (!capped || p->turn || elsewhere)) {
            if (!capped && !elsewhere)
                p->window_ns = load(&c->free_until_ns); /* window_too_short */
            /* Quiet: nothing to do at the next launches while the card's
             * words stay. Uncapped with no turn held anywhere; or capped,
             * holding the turn, with no waiter that would make it yield
             * (should_yield: a want renewed within GS_PACE_WANT_NS; a new
             * one changes the word). The holder's lease outlasts its tickets
             * (renewed at fence points, GS_PACE_LEASE_NS ahead at least).
             * Uncapped side by side, whoever holds the turn (pace_side.c).
             * Without them a capped process on a card with turns took the
             * mutex and looked at the card at every launch: alone, a
             * host-bound eager loop at 100 did 0.92 of native passes on an
             * H100, 0.96 without card files. */
            const unsigned long long *w = p->quiet_words;
            int mine = capped ? p->turn && w[GS_QUIET_OWNER] == io->token &&
                                    !within(w[GS_QUIET_WANT], now, GS_PACE_WANT_NS, GS_PACE_WANT_NS)
                              : !p->turn && (w[GS_QUIET_OWNER] == 0 || p->side);
            p->quiet = !checked && mine && !p->gated && !until &&
                       io->prio == GPUSLICE_PRIORITY_NORMAL &&
                       !window_open(w[GS_QUIET_WINDOW], now) && !recent(w[GS_QUIET_LOW], now);
            return;
        }
        if (!checked) {
            /* A launch into a graph being captured runs later, when the graph does. */
            if (io->capturing(io, stream))
                return;
            checked = 1;
        }
        if (wait_aside) {
            stand_aside(p, io, stream);
        } else if (yield) {
            gs_pace_give_turn(p, io, stream, 1);
        } else if (wait_turn) {
            if (!capped && io->gate_close && io->seat >= 0 &&
                p->per_launch_ns < GS_PACE_GATE_BATCH_NS && close_gate(p, io, stream) == 0)
                return;
            wait_for_turn(p, io, stream, capped);
        } else if (done) {
            /* The window closes now (the holder waits for it, awake). */
            end_window(io, load(&c->free_until_ns), now);
            if (close_gate(p, io, stream) == 0)
                return; /* else the next look finds the turn elsewhere, and waits */
        } else if (late) {
            /* The window closes now (the holder waits for it on seq), and we
             * wait until the holder takes the card back (or a little after
             * the window, if it does not come): then its turn, and ours after. */
            unsigned long long w = load(&c->free_until_ns);
            if (!patient(p, now))
                return;
            end_window(io, w, now);
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
