/*
 * What the compute limiter's parts share among themselves: the pacer
 * (pace.c), the card file (pace_card.c), the turns (pace_turns.c) and side
 * by side (pace_side.c). Not
 * for launch.c nor the simulator, which see pace.h only.
 */
#ifndef GPUSLICE_PACE_PARTS_H
#define GPUSLICE_PACE_PARTS_H

#include "pace.h"

#include <stddef.h>

/* --------------------------------------------- card-file stamps, read raw */

/* A card-file stamp t at most `behind` before now or `ahead` after it (a
 * time after our `now` may be fresh: written by someone who read the clock
 * after us); anything else is stale, or garbage. */
static inline int within(unsigned long long t, unsigned long long now,
                         unsigned long long ahead, unsigned long long behind)
{
    return t >= now ? t - now <= ahead : now - t <= behind;
}

static inline unsigned long long load(unsigned long long *w)
{
    return __atomic_load_n(w, __ATOMIC_RELAXED);
}

static inline void store(unsigned long long *w, unsigned long long v)
{
    __atomic_store_n(w, v, __ATOMIC_RELAXED);
}

/* v, at least lo and at most hi. */
static inline unsigned long long clamp_ns(unsigned long long v, unsigned long long lo,
                                          unsigned long long hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* A stamp that says "until t": still in force, and not garbage. */
static inline int lasts(unsigned long long t, unsigned long long now)
{
    return t >= now && t - now <= GS_PACE_AHEAD_NS;
}

static inline int recent(unsigned long long t, unsigned long long now)
{
    return t && within(t, now, GS_PACE_STALE_NS, GS_PACE_STALE_NS);
}

/* A window a holder left uncapped waiters (their turn): it ends after the
 * holder's queue and uncapped_turn(), no further ahead than a round. */
static inline int window_open(unsigned long long until, unsigned long long now)
{
    return until > now && until - now <= GS_PACE_ROUND_NS + GS_PACE_DRAIN_NS;
}

/* It waits on the host as a process without gates does: it has none, or the
 * driver refused its last close (pace_turns.c, close_gate). */
static inline int ungated(const struct gs_pacer *p, const struct gs_pace_io *io)
{
    return !io->gate_close || p->gate_refused;
}

/* ----------------------------------------------------------------- pace.c */

/* GPU work we have queued: the launches in flight at the learned time each. */
unsigned long long gs_pace_queued_ns(const struct gs_pacer *p);
/* Take what completed off the ring, charging it. */
void gs_pace_poll(struct gs_pacer *p, struct gs_pace_io *io, unsigned long long now);
/* Let our queue run dry, say so in the card, start a new busy period next. */
void gs_pace_drain(struct gs_pacer *p, struct gs_pace_io *io, void *stream);

/* ------------------------------------------------------------ pace_side.c */

/* What a completed interval of ns over `launches` is charged (pace_side.c). */
unsigned long long gs_pace_side_charge(struct gs_pacer *p, unsigned long long ns,
                                       unsigned launches);
/* Whether a capped process learns its own time a launch now (then the
 * caller says, in p->solo_clean, whether anyone else's work is on the card). */
int gs_pace_side_learning(const struct gs_pacer *p, struct gs_pace_io *io);
/* At a fence point: a side-by-side epoch ends now, or not yet. */
void gs_pace_side_epoch(struct gs_pacer *p, struct gs_pace_io *io, unsigned long long now);

/* ------------------------------------------------------------ pace_card.c */

/* How much longer the longest queue of the others lasts (their seats). */
unsigned long long gs_card_others_queued_ns(const struct gpuslice_cardfile *c, int mine,
                                            unsigned long long now,
                                            unsigned long long believed);
/* Whether another seat's mode says `what` (GPUSLICE_CARDFILE_SIDE or
 * _SHORT) and its process stamped it within `fresh`. */
int gs_card_others_say(const struct gpuslice_cardfile *c, int mine, unsigned what,
                       unsigned long long now, unsigned long long fresh);
/* How many other processes have used the card within GS_PACE_STALE_NS, up to `enough`. */
int gs_card_others_seated(const struct gpuslice_cardfile *c, int mine, unsigned long long now,
                          int enough);
/* Say in our seat that we wait for our own queue (on), or no longer. */
void gs_card_blocked(struct gpuslice_cardfile *c, int seat, unsigned long long token, int on);
/* Whether another process may still launch into a turn taken at `since`. */
int gs_card_others_launching(const struct gpuslice_cardfile *c, int mine,
                             unsigned long long since, unsigned long long now);
/* Until when others should stand aside for our work, said in the card. */
void gs_pace_announce(struct gs_pacer *p, struct gs_pace_io *io, unsigned long long now);
/* Until when a process of priority prio should stand aside for what the
 * card's stamps say (high work, a guest; normal work, *rank 1, for a low
 * one), 0: not; pacer state aside (the gate's watcher reads this too). */
unsigned long long gs_card_aside_until(struct gpuslice_cardfile *c, unsigned prio,
                                       unsigned long long now, int *rank);
/* Until when we should stand aside (0: not); *rank: only for normal work. */
unsigned long long gs_pace_aside_until(const struct gs_pacer *p, struct gs_pace_io *io,
                                       unsigned long long now, int *rank);

/* ----------------------------------------------------------- pace_turns.c */

/* Before a launch on a card with turns: returns with our launch allowed. */
void gs_pace_gate(struct gs_pacer *p, struct gs_pace_io *io, void *stream);
/* Give the card up if we hold it (window: to uncapped waiters first), and
 * let our queue run dry. */
void gs_pace_give_turn(struct gs_pacer *p, struct gs_pace_io *io, void *stream, int window);
/* Our lease of the turn renewed: our queue, and a little. */
void gs_pace_renew(struct gs_pacer *p, struct gs_pace_io *io, unsigned long long now);

#endif
