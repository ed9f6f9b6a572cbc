/*
 * The card file as the pacer reads and writes it: a process's seat (taken
 * by its token, given up to another when stale), the backlog stamps by
 * which tenants see each other compete, who waits for the turn, and whose
 * work others stand aside for. Anyone can write the file: nothing read here
 * is trusted beyond the bounds each reader checks.
 */
#include "pace_parts.h"

/* Queued work it has not yet let run dry: a backlog that lasts until now or
 * ended at most GS_PACE_BACKLOG_NS ago, announced no further ahead than
 * GS_PACE_AHEAD_NS. */
static int seat_competes(const struct gpuslice_cardfile_seat *s, unsigned long long now)
{
    unsigned long long owner = __atomic_load_n(&s->owner, __ATOMIC_RELAXED);
    unsigned long long t = __atomic_load_n(&s->backlog_ns, __ATOMIC_RELAXED);
    unsigned long long d = __atomic_load_n(&s->drained_ns, __ATOMIC_RELAXED);
    return owner && d < t && within(t, now, GS_PACE_AHEAD_NS, GS_PACE_BACKLOG_NS);
}

/* A seat in use: owned, and its owner competed within a second (else it
 * is dead or idle, and its seat may be taken). */
static int seat_held(unsigned long long owner, unsigned long long backlog_ns,
                     unsigned long long now)
{
    return owner && within(backlog_ns, now, GS_PACE_AHEAD_NS, GS_PACE_STALE_NS);
}

unsigned gs_card_competitors(const struct gpuslice_cardfile *c, int mine, unsigned long long now)
{
    unsigned n = 0;
    for (int i = 0; i < GPUSLICE_CARDFILE_SEATS; i++)
        if (i != mine && seat_competes(&c->seats[i], now))
            n++;
    return n;
}

int gs_card_seat(struct gpuslice_cardfile *c, unsigned long long token, unsigned long long now)
{
    for (int i = 0; i < GPUSLICE_CARDFILE_SEATS; i++)
        if (__atomic_load_n(&c->seats[i].owner, __ATOMIC_RELAXED) == token)
            return i;
    for (int i = 0; i < GPUSLICE_CARDFILE_SEATS; i++) {
        struct gpuslice_cardfile_seat *s = &c->seats[i];
        unsigned long long owner = __atomic_load_n(&s->owner, __ATOMIC_RELAXED);
        unsigned long long t = __atomic_load_n(&s->backlog_ns, __ATOMIC_RELAXED);
        /* Free, or stale (an idle owner takes another seat when it
         * competes again). */
        if (!seat_held(owner, t, now)) {
            if (__atomic_compare_exchange_n(&s->owner, &owner, token, 0, __ATOMIC_RELAXED,
                                            __ATOMIC_RELAXED)) {
                __atomic_store_n(&s->backlog_ns, 0, __ATOMIC_RELAXED);
                __atomic_store_n(&s->drained_ns, 0, __ATOMIC_RELAXED);
                __atomic_store_n(&s->want_ns, 0, __ATOMIC_RELAXED);
                __atomic_store_n(&s->mode, 0u, __ATOMIC_RELAXED);
                return i;
            }
        }
    }
    return -1;
}

int gs_card_stamp(struct gpuslice_cardfile *c, int seat, unsigned long long token, int what,
                  unsigned long long until, unsigned long long now)
{
    /* Someone took the seat while we were idle: take another. */
    if (seat < 0 || seat >= GPUSLICE_CARDFILE_SEATS ||
        __atomic_load_n(&c->seats[seat].owner, __ATOMIC_RELAXED) != token)
        seat = gs_card_seat(c, token, now);
    if (seat >= 0) {
        struct gpuslice_cardfile_seat *s = &c->seats[seat];
        if (what == GS_CARD_DRAINED) {
            /* The backlog ends here: announced further, it would outlive the drain. */
            __atomic_store_n(&s->backlog_ns, now, __ATOMIC_RELAXED);
            __atomic_store_n(&s->drained_ns, now, __ATOMIC_RELAXED);
        } else {
            __atomic_store_n(&s->backlog_ns, until < now ? now : until, __ATOMIC_RELAXED);
        }
    }
    return seat;
}

void gs_card_blocked(struct gpuslice_cardfile *c, int seat, unsigned long long token, int on)
{
    if (!c || seat < 0 || seat >= GPUSLICE_CARDFILE_SEATS ||
        __atomic_load_n(&c->seats[seat].owner, __ATOMIC_RELAXED) != token)
        return;
    unsigned *f = &c->seats[seat].flags;
    if (on)
        __atomic_or_fetch(f, (unsigned)GPUSLICE_CARDFILE_BLOCKED, __ATOMIC_RELAXED);
    else
        __atomic_and_fetch(f, ~(unsigned)GPUSLICE_CARDFILE_BLOCKED, __ATOMIC_RELAXED);
}

void gs_card_waiters(const struct gpuslice_cardfile *c, int mine, unsigned long long now,
                     struct gs_waiters *w)
{
    unsigned long long capped_since = 0, uncapped_since = 0;
    w->next = -1;
    w->uncapped = 0;
    w->gated = 0;
    w->parties = 0;
    w->oldest_ns = 0;
    for (int i = 0; i < GPUSLICE_CARDFILE_SEATS; i++) {
        const struct gpuslice_cardfile_seat *s = &c->seats[i];
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
        } else {
            if (__atomic_load_n(&s->flags, __ATOMIC_RELAXED) & GPUSLICE_CARDFILE_GATED)
                w->gated = 1;
            if (!w->uncapped || t < uncapped_since) {
                w->uncapped = 1;
                uncapped_since = t;
            }
        }
    }
    /* Whoever has waited longest goes first: the uncapped ones, together. */
    if (w->next >= 0 && w->uncapped && uncapped_since < capped_since)
        w->next = -1;
    w->parties += w->uncapped;
    w->any = w->parties != 0;
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

/* How much longer the longest queue of the others lasts, as their seats say
 * (a queue that has run dry since does not; one announced further ahead
 * than `believed` is not believed). */
unsigned long long gs_card_others_queued_ns(const struct gpuslice_cardfile *c, int mine,
                                            unsigned long long now, unsigned long long believed)
{
    unsigned long long most = 0;
    for (int i = 0; i < GPUSLICE_CARDFILE_SEATS; i++) {
        const struct gpuslice_cardfile_seat *s = &c->seats[i];
        unsigned long long b = __atomic_load_n(&s->backlog_ns, __ATOMIC_RELAXED);
        if (i != mine && b > now && b - now <= believed && b - now > most &&
            __atomic_load_n(&s->owner, __ATOMIC_RELAXED) &&
            __atomic_load_n(&s->drained_ns, __ATOMIC_RELAXED) < b)
            most = b - now;
    }
    return most;
}

int gs_card_others_say(const struct gpuslice_cardfile *c, int mine, unsigned what,
                       unsigned long long now, unsigned long long fresh)
{
    for (int i = 0; i < GPUSLICE_CARDFILE_SEATS; i++) {
        const struct gpuslice_cardfile_seat *s = &c->seats[i];
        if (i != mine && (__atomic_load_n(&s->mode, __ATOMIC_RELAXED) & what) &&
            within(__atomic_load_n(&s->backlog_ns, __ATOMIC_RELAXED), now, GS_PACE_AHEAD_NS, fresh))
            return 1;
    }
    return 0;
}

/* How many other processes have used the card within GS_PACE_STALE_NS
 * (their seats say so, drained or not), counted up to `enough` (a fence
 * point asks whether there is one: it stops at the first). */
int gs_card_others_seated(const struct gpuslice_cardfile *c, int mine, unsigned long long now,
                          int enough)
{
    int n = 0;
    for (int i = 0; i < GPUSLICE_CARDFILE_SEATS && n < enough; i++) {
        const struct gpuslice_cardfile_seat *s = &c->seats[i];
        if (i != mine && seat_held(__atomic_load_n(&s->owner, __ATOMIC_RELAXED),
                                   __atomic_load_n(&s->backlog_ns, __ATOMIC_RELAXED), now))
            n++;
    }
    return n;
}

/* Whether another process may still launch into a turn taken at `since`:
 * it said it had work queued within the last GS_PACE_GAP_NS (one busy
 * period) and has not let its queue run dry since. A host-bound one runs
 * dry between its launches, the GPU turns to us, and a launch it made
 * before it saw our turn would cut into our turn at the next time slice.
 * Not one behind its closed gate (drained before it closed it). One that
 * waits for its own queue may be waiting for a long kernel its stamp (at
 * the learned time a launch) does not show: it counts until the wait
 * returns, or a loop with a 5 ms kernel in ten ran into every turn of a
 * 30, which was charged its time slices and got 18-19 (simulated). Its
 * stamp GS_PACE_DRAIN_NS old at most, the holder's wait's bound for any
 * stamp: anyone can say it waits, and waiting up to 100 ms for such a seat
 * let a forged one hold a 30 among three tenants to 2.6-3.8 % (simulated). */
int gs_card_others_launching(const struct gpuslice_cardfile *c, int mine,
                             unsigned long long since, unsigned long long now)
{
    for (int i = 0; i < GPUSLICE_CARDFILE_SEATS; i++) {
        const struct gpuslice_cardfile_seat *s = &c->seats[i];
        unsigned long long b = __atomic_load_n(&s->backlog_ns, __ATOMIC_RELAXED);
        unsigned f = __atomic_load_n(&s->flags, __ATOMIC_RELAXED);
        unsigned long long past =
            f & GPUSLICE_CARDFILE_BLOCKED ? GS_PACE_DRAIN_NS : GS_PACE_GAP_NS;
        if (i != mine && __atomic_load_n(&s->owner, __ATOMIC_RELAXED) &&
            !(f & GPUSLICE_CARDFILE_GATED) &&
            __atomic_load_n(&s->drained_ns, __ATOMIC_RELAXED) < since &&
            within(b, now, GS_PACE_AHEAD_NS, past))
            return 1;
    }
    return 0;
}

/* What others should know before we launch (a guest, high-priority work,
 * normal work a low tenant yields to): until when they should stand aside.
 * Our work runs after what they have queued now: the stamp lasts past that,
 * or a neighbour with long launches (graph replays) would take the card
 * back before our work has run and the GPU would have to cut in. */
void gs_pace_announce(struct gs_pacer *p, struct gs_pace_io *io, unsigned long long now)
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
            gs_card_others_queued_ns(c, io->seat, now, GS_PACE_TURN_NS) + GS_PACE_ASIDE_NS / 5;
        ahead = theirs > ahead ? theirs : ahead;
    }
    unsigned long long until = now + gs_pace_queued_ns(p) + ahead;
    raise_to(w, until, now);
    /* For gs_pace_waited: the stamp as we raised it, the furthest of ours
     * still in force (a later launch may ask less). */
    unsigned long long ours = __atomic_load_n(&p->aside_until_ns, __ATOMIC_RELAXED);
    if (w != __atomic_load_n(&p->aside_stamp, __ATOMIC_RELAXED) || ours < until || !lasts(ours, now))
        ours = until;
    __atomic_store_n(&p->aside_card, c, __ATOMIC_RELAXED);
    __atomic_store_n(&p->aside_stamp, w, __ATOMIC_RELAXED);
    __atomic_store_n(&p->aside_until_ns, ours, __ATOMIC_RELAXED);
    /* Release: a wait that sees it sees the stamp above. */
    __atomic_store_n(&p->aside_lets_go, p->waits_resumed[p->wait_place] < (int)GS_PACE_FOLLOWED / 2,
                     __ATOMIC_RELEASE);
}

void gs_card_quiet_words(const struct gpuslice_cardfile *c,
                         unsigned long long w[GS_CARD_QUIET_WORDS])
{
    w[GS_QUIET_OWNER] = __atomic_load_n(&c->turn_owner, __ATOMIC_RELAXED);
    w[GS_QUIET_WINDOW] = __atomic_load_n(&c->free_until_ns, __ATOMIC_RELAXED);
    w[GS_QUIET_HIGH] = __atomic_load_n(&c->high_until_ns, __ATOMIC_RELAXED);
    w[GS_QUIET_GUEST] = __atomic_load_n(&c->guest_until_ns, __ATOMIC_RELAXED);
    w[GS_QUIET_LOW] = __atomic_load_n(&c->low_ns, __ATOMIC_RELAXED);
    w[GS_QUIET_WANT] = __atomic_load_n(&c->want_ns, __ATOMIC_RELAXED);
}

unsigned long long gs_card_aside_until(struct gpuslice_cardfile *c, unsigned prio,
                                       unsigned long long now, int *rank)
{
    unsigned long long t = 0, v;
    *rank = 0;
    if (lasts(v = load(&c->high_until_ns), now) && v > t)
        t = v;
    if (lasts(v = load(&c->guest_until_ns), now) && v > t)
        t = v;
    if (prio == GPUSLICE_PRIORITY_LOW && !t && lasts(v = load(&c->normal_until_ns), now)) {
        t = v;
        *rank = 1;
    }
    return t;
}

/* Until when we should stand aside for someone else's work (0: we need not),
 * and in *rank whether only for normal work (we are low). A high process
 * never stands aside; a guest only for high work (it is normal work). */
unsigned long long gs_pace_aside_until(const struct gs_pacer *p, struct gs_pace_io *io,
                                       unsigned long long now, int *rank)
{
    *rank = 0;
    if (io->prio == GPUSLICE_PRIORITY_HIGH)
        return 0;
    if (p->guest_since_ns) {
        unsigned long long v = load(&io->card->high_until_ns);
        return lasts(v, now) ? v : 0;
    }
    return gs_card_aside_until(io->card, io->prio, now, rank);
}
