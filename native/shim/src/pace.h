/*
 * The compute limiter's decisions, with no CUDA and no clock of their own:
 * launch.c feeds them times and fence results from the real driver, and
 * tests/shim/pace_sim.c feeds them a simulated GPU under a simulated clock.
 * Design and reasoning: docs/compute-limit.md.
 *
 * Per process and device a pacer follows the launches: every GS_PACE_FENCE_NS
 * of GPU work (estimated) it asks for a fence, an event recorded after a
 * launch. The GPU time between two completed fences is the time the process
 * held the card (its card time); it is charged to the container's bucket. A
 * bucket in debt makes the next fence point drain the process's queue and
 * sleep until the credit is back.
 *
 * On a card shared with capped or prioritised tenants (a card file says so),
 * every process keeps at most about half a millisecond of work queued, and:
 * capped processes take turns holding the card, leaving uncapped waiters
 * their share of a round (GS_PACE_ROUND_NS) and other capped ones turns of
 * GS_PACE_CAPPED_TURN_NS; everyone stands aside for a guest (a process that
 * earned first service by idling: a request, served at once) and for
 * higher-priority work; what a holder is charged is then its own work.
 */
#ifndef GPUSLICE_PACE_H
#define GPUSLICE_PACE_H

#include "gpuslice/cardfile.h"
#include "gpuslice/limits.h"
#include "gpuslice/region.h"

#define GS_PACE_FENCE_NS 250000ull      /* GPU work between two fences */
#define GS_PACE_QUEUE_NS 250000ull      /* work in flight a paced process waits down to at a fence */
#define GS_PACE_ALONE_QUEUE_NS 1000000ull /* ... when no one else has used the card for a second */
#define GS_PACE_MAX_QUEUED 2            /* fences in flight, while the time of a launch is unknown */
#define GS_PACE_GAP_NS 2000000ull       /* no launch for this long: maybe a new busy period */
#define GS_PACE_RESUME_NS 12000000ull   /* credit a throttled container sleeps for */
#define GS_PACE_BURST_NS 20000000ull    /* most credit an idle container keeps */
#define GS_PACE_BACKLOG_NS 5000000ull   /* a seat's backlog counts this long past its end */
#define GS_PACE_AHEAD_NS 100000000ull   /* furthest ahead a stamp may be; beyond is garbage */
#define GS_PACE_STALE_NS 1000000000ull  /* no managed tenant seen for this long: none left */
#define GS_PACE_PRESENCE_NS 250000000ull /* a capped or prioritised process says it is here this often */
#define GS_PACE_LEASE_NS 500000ull      /* a turn lapses this long after its holder's queue */
#define GS_PACE_PASS_NS 1000000ull      /* lease of a turn passed to a waiter, until it renews it */
#define GS_PACE_ROUND_NS 20000000ull    /* a round of turns beside uncapped tenants: its two hand-overs cost 2 % */
#define GS_PACE_TURN_NS 4000000ull      /* capped ones pass on after this */
#define GS_PACE_TURN_MIN_NS 500000ull   /* ... and hold it at least this long */
#define GS_PACE_WAIT_NS 4000000ull      /* ... or once another capped one has waited this long */
#define GS_PACE_CAPPED_TURN_NS 12000000ull /* both, when only capped processes wait */
#define GS_PACE_LONG_TURN_NS 100000000ull /* most a turn grows after a long drain ... */
#define GS_PACE_LONG_TURN_AWAY 10       /* ... or this many times the time away, 2x at most */
#define GS_PACE_GRACE_NS 100000000ull   /* a wait for turns spends patience only after this: the longest turn */
#define GS_PACE_GRACE_LAUNCHES 14       /* ... or this many of our launches, 2x at most */
#define GS_PACE_DRAIN_NS 16000000ull    /* most a holder drains others; most an uncapped one queues */
#define GS_PACE_WANT_NS 1000000ull      /* a waiter renews its want this often: older is gone */
#define GS_PACE_POLL_NS 250000ull       /* longest sleep of a waiter between two looks */
#define GS_PACE_SPIN_NS 1000000ull      /* a waiter stays awake from this long before a turn ends */
#define GS_PACE_GUEST_MAX_NS 500000000ull /* most first service idling earns: half a window */
#define GS_PACE_ASIDE_NS 500000ull      /* others stand aside this long past a guest's last launch, or to its wait */
#define GS_PACE_PATIENCE_PCT 90ull      /* most of its time a process waits past its grace */
#define GS_PACE_PATIENCE_NS 20000000ull /* saved-up patience: a wait lasts 200 ms at most */
#define GS_PACE_COURTESY_PCT 50ull      /* most of its time a process stands aside for guests and high */
#define GS_PACE_COURTESY_NS 100000000ull /* saved-up courtesy: a long request served first */
#define GS_PACE_MAX_PER_FENCE 4096u
#define GS_PACE_GATE_BATCH_NS 2000000ull /* a gated window lasts this long at least; longer kernels are not gated */
#define GS_PACE_SIDE_EPOCH_NS 20000000ull /* side by side: how often a process looks at its own waits */
#define GS_PACE_SIDE_ON_PM 400    /* ... goes side by side once below this per mille of its time waiting for its work */
#define GS_PACE_SIDE_OFF_PM 600   /* ... and back to turns above this */
#define GS_PACE_SHORT_PM 25       /* a capped one beside it short of its cap by more than this per mille */
#define GS_PACE_SIDE_MOST_CAP 50u /* ... and one capped above this says so always: time slicing gives a busy context half */
#define GS_PACE_SHORT_MEAN_PM 10  /* ... says so long enough that its side-by-side stretch and the hold are this short on the whole */
#define GS_PACE_SHORT_HOLD_MIN_NS 100000000ull /* ... and at least this long */
#define GS_PACE_SHORT_HOLD_MAX_NS 4000000000ull /* ... and at most this long */
#define GS_PACE_SHORT_SETTLE_NS 1000000000ull /* ... not in its first second */
#define GS_PACE_HOLDS_KEPT 8      /* ... the first this many of those holds told at exit */
#define GS_PACE_SOLO_KNOWN_NS 50000000ull /* ... nor while it has timed less than this of its launches with no such neighbour */
#define GS_PACE_SOLO_STALE_NS 4000000000ull /* ... within this long */
#define GS_PACE_SOLO_SPREADS 2ull /* ... an interval is charged at most its launches at that time and this many spreads */
#define GS_PACE_SOLO_UNEVEN 2ull /* ... and in full where the spread is more than 1/this of that time */
#define GS_PACE_WAIT_PLACES 8 /* a request's waits told apart by their place in it (gs_pace_waited) */
#define GS_PACE_FOLLOWED 64   /* waits_resumed of waits all followed at once; below half, one lets go */
#define GS_PACE_BEHIND 64     /* fences_behind of fence points that all found the GPU behind us; below half, host-bound */
#define GS_PACE_RING 16 /* fences in flight: a guest queues this many at most (a request, while a neighbour's long kernel runs out) */

struct gs_fence {
    void *ev;          /* the caller's event */
    unsigned launches; /* launches between the previous fence and this one */
    int marker;        /* recorded before a launch: starts a busy period, charges nothing */
    int behind;        /* the GPU was behind us when it was recorded: we competed */
};

/* A budget of waiting that refills at a share of wall time (patience, courtesy). */
struct gs_allowance {
    long long left_ns;
    unsigned long long stamp_ns;
    int spent; /* ran out: no waiting until a quarter is back */
};

/* The words of a card that a quiet process's tickets depend on
 * (gs_card_quiet_words), in this order. */
enum {
    GS_QUIET_OWNER,  /* turn_owner */
    GS_QUIET_WINDOW, /* free_until_ns */
    GS_QUIET_HIGH,   /* high_until_ns */
    GS_QUIET_GUEST,  /* guest_until_ns */
    GS_QUIET_LOW,    /* low_ns */
    GS_QUIET_WANT,   /* want_ns */
    GS_CARD_QUIET_WORDS
};

struct gs_pacer {
    struct gs_fence ring[GS_PACE_RING]; /* oldest at head */
    unsigned head, count;
    void *ref;                     /* completed event the next interval starts from */
    unsigned since_fence;          /* launches after the newest fence */
    unsigned per_fence;            /* launches between fences */
    unsigned long long per_launch_ns; /* GPU time one launch takes, smoothed; 0: unknown */
    /* Side by side (pace_side.c): a capped process's own time a launch, how
     * far one interval's time a launch strays from it (smoothed), how
     * much of its intervals it was learned from since it began to learn it
     * (again) and when it last learned, whether it was ever known, and
     * whether the intervals completing now may teach it (no one else's work
     * on the card); whether a side-by-side neighbour is there, how far short
     * of its cap it ran while awake (per mille of the card, smoothed), until
     * when it says so, the card time it was owed in its stretch side by
     * side since it last said so and when that stretch began; an uncapped
     * one's share of its time waiting for its own work (per mille,
     * smoothed), and whether it goes side by side; the epoch they are
     * reckoned over (GS_PACE_SIDE_EPOCH_NS), what the counters below (and
     * its charges, charged_*) said at its start, and when the first began. */
    unsigned long long solo_ns, solo_spread_ns, solo_known_ns, solo_at_ns;
    int solo_ok, solo_clean;
    int side_near;
    long long owed_pm;
    unsigned long long short_until_ns;
    long long stretch_owed_ns;
    unsigned long long stretch_since_ns;
    int waiting_pm;
    int side;
    unsigned long long epoch_ns, epoch_sleep_ns, epoch_card_ns, epoch_queue_ns, epoch_charged_ns;
    unsigned long long epoch_launches; /* spent_launches at its last epoch */
    unsigned long long first_epoch_ns;
    /* Its epochs, ever (launch.c's "side by side" line at exit): reckoned;
     * uncapped, those it went side by side in; capped, those it said it was
     * short in, while it learned its time a launch, for kernels of a time
     * slice or more, for running short of its cap, and for a cap above
     * GS_PACE_SIDE_MOST_CAP. */
    unsigned long long epochs, epochs_side, epochs_learning, epochs_long, epochs_owed, epochs_high;
    /* Its holds for running short (GS_PACE_SHORT_MEAN_PM), for the exit line:
     * how many, and when the first ones began (ms after its first epoch) with
     * how short it ran then (owed_pm). */
    unsigned holds;
    unsigned hold_at_ms[GS_PACE_HOLDS_KEPT];
    int hold_owed_pm[GS_PACE_HOLDS_KEPT];
    unsigned long long last_launch_ns, last_fence_ns;
    unsigned long long launch_ns;  /* the clock when the current launch began */
    unsigned long long returned_ns; /* when the last launch returned to the application */
    unsigned long long blocked_ns; /* how long a wait for our oldest fence took lately (decaying max) */
    int fences_behind;             /* of our last fence points, those that found an older fence in flight (GS_PACE_BEHIND-ths, decaying) */
    int need_mark;                 /* the queue is known empty: mark the next launch */
    unsigned long long charge_ns;  /* charged here, not yet moved to the bucket */
    unsigned long long held_ns;    /* others held it back (turns, guests), not yet settled */
    unsigned long long launches;   /* counted here, not yet moved to the bucket */
    int turn;                      /* holds the turn on the card */
    unsigned long long turn_since_ns; /* when it got it */
    unsigned long long turn_len_ns; /* its turn while uncapped processes wait (got_turn) */
    unsigned long long turn_card_ns; /* card time it was charged in its current turn */
    unsigned long long lost_ns;    /* when it last gave the turn up for others; 0: it did not */
    int gated_window;              /* the window it left was for gated processes: it waits awake */
    unsigned long long window_ns;  /* uncapped: the window (its end) it last launched in */
    int gate_refused;              /* its last gate_close failed: its windows are not cut short */
    unsigned long long wants_since_ns; /* capped: waiting for the card since (a window, then turns); 0: not */
    unsigned long long guest_since_ns; /* when its current guest stretch began; 0: not a guest */
    long long guest_credit_ns;     /* first service earned by idling, spent by holding the card */
    unsigned long long guest_seen_ns; /* when the credit was last spent */
    int guest_idled;               /* the stretch began after a real idle, not on a new process's start */
    /* Its waits by their place in a stretch of launching (the first since
     * it came back from idle, the second, ...; the last place counts every
     * later one): of those lately, how many it followed with a launch
     * within GS_PACE_ASIDE_NS of their return (a decode loop's next token)
     * rather than later (a request answered), a decaying average in
     * GS_PACE_FOLLOWED-ths; and the place of its next wait. */
    int waits_resumed[GS_PACE_WAIT_PLACES];
    int wait_place;
    int slept;                     /* slept for its cap since its last launch: no guest */
    /* Its last look at the card (a launch on a card with turns) found
     * nothing to do and nothing that could give it something to do but a
     * change of the card's words (gs_card_quiet_words): normal, no
     * stand-aside stamp, no window, not gated, and either uncapped with no
     * turn held anywhere, or capped, holding the turn, and nobody wanting it. */
    int quiet;
    /* Those words as that look read them, before it decided anything: a
     * change after the read, even during the launch that follows, makes
     * them differ, and the tickets handed out against them are not taken. */
    unsigned long long quiet_words[GS_CARD_QUIET_WORDS];
    int doubt;                     /* a wait for turns outlasted GS_PACE_GRACE_NS */
    unsigned long long fences;     /* fences recorded, ever */
    /* What pacing cost this process's host, ever (launch.c's debug line at
     * exit), in parts that do not overlap: launches seen (of them on
     * tickets: gs_pace_count); time at fence points of their own (event
     * calls, the card, the bucket); waiting for its own queue (at fence
     * points, drains, before launches), and how often; asleep for its cap;
     * and at the card before launches (turns, standing aside). */
    unsigned long long spent_launches, spent_ticketed, spent_fence_ns, spent_queue_ns;
    unsigned long long spent_queue_waits;
    unsigned long long spent_sleep_ns, spent_card_ns;
    /* What it was charged, ever (launch.c's debug line "pacing's charges" at exit), in
     * parts that do not overlap: the first interval of each busy period
     * (from its marker: the card just handed back to it, its host just
     * woken) and the launches in them; every later interval and its
     * launches; launches charged at the learned estimate (a gap's
     * unfenced ones, those that ran while it was held back). And its
     * stand-asides, and what their drains took that was others' work
     * (drain_own: not charged). */
    unsigned long long charged_firsts, charged_first_ns, charged_first_launches;
    unsigned long long charged_later_ns, charged_later_launches, charged_estimated_ns;
    unsigned long long asides, aside_others_ns;
    /* Credit its bucket's refills, at its settles, earned and did not keep
     * (gs_bucket_refill), and in how many (launch.c's "its bucket" line). */
    unsigned long long credit_cut_ns, credit_cuts;
    int ref_marker;                /* ref is a marker: the next interval is a period's first */
    struct gs_allowance patience;  /* for others' turns */
    struct gs_allowance courtesy;  /* for guests and higher priorities */
    /* The gate (io->gate_close): read and written by the gate's watcher too,
     * which never holds the pacer's lock: atomics only. */
    unsigned long long gate_since_ns;  /* closed since; 0: open */
    unsigned long long gate_limit_ns;  /* most it stays closed (grace, or patience left) */
    unsigned long long gate_queued_ns; /* GPU work we have queued behind it */
    unsigned long long gate_opened_ns; /* when the watcher last opened it */
    int gate_forced;                   /* ... with the turn still another's (its limit ran out) */
    unsigned long long gate_closed_ns; /* when we last closed it (ours alone) */
    /* When a wait of the application for the GPU last ended (a sync, a
     * blocking copy, a poll): stored by any thread (launch.c) without the
     * pacer's lock, so atomics only. */
    unsigned long long synced_ns;
    /* What the application's waits took since the side-by-side epoch
     * began (pace_side.c): atomics too. */
    unsigned long long app_wait_ns;
    /* The stand-aside stamp we last raised (gs_pace_announce): the card,
     * its word, until when, and whether a wait's return lets it go
     * (gs_pace_waited). Written under the pacer's lock, read by the thread
     * whose wait returned: atomics only. */
    struct gpuslice_cardfile *aside_card;
    unsigned long long *aside_stamp;
    unsigned long long aside_until_ns;
    int aside_lets_go;
    int gated;                     /* we closed it and have not seen it open since */
};

enum { GS_PACE_MARK = 1, GS_PACE_GAP = 2, GS_PACE_FENCE = 4 };

void gs_pace_reset(struct gs_pacer *p);
/* Before a launch: GS_PACE_MARK (record a marker first) or GS_PACE_GAP
 * (poll the ring, then call gs_pace_gap), or 0. */
int gs_pace_before(struct gs_pacer *p, unsigned long long now);
/* After polling on GS_PACE_GAP: GS_PACE_MARK if the queue ran dry. */
int gs_pace_gap(struct gs_pacer *p);
/* After a launch the driver took: GS_PACE_FENCE if a fence is due. */
int gs_pace_after(struct gs_pacer *p, unsigned long long now);
/* The caller recorded ev as a marker / a fence. 0, or -1: the ring is full
 * (cannot happen while the caller keeps the queue bounded). */
int gs_pace_push(struct gs_pacer *p, void *ev, int marker, unsigned long long now);
/* The newest entry was recorded while older ones were still in flight. */
void gs_pace_mark_behind(struct gs_pacer *p);
/* The oldest entry still in flight, or NULL. */
const struct gs_fence *gs_pace_oldest(const struct gs_pacer *p);
/* The oldest entry completed. elapsed_ns: GPU time from p->ref to it (ignored
 * for a marker, or when p->ref is NULL). competitors: other contexts busy on
 * the card. Returns the event that stops being needed (to recycle), or NULL. */
void *gs_pace_done(struct gs_pacer *p, unsigned long long elapsed_ns, unsigned competitors);
/* The queue was drained and the process will sleep: the next launch starts
 * a new busy period. Returns the reference event to recycle, or NULL. */
void *gs_pace_idle(struct gs_pacer *p);

/*
 * What the limiter needs from the driver and the host. launch.c implements
 * it with the real driver and the region; the simulator with its own GPU.
 * Events are opaque; streams too.
 */
struct gs_pace_io {
    void *(*event_take)(struct gs_pace_io *io);        /* NULL: none to be had */
    void (*event_give)(struct gs_pace_io *io, void *ev);
    int (*event_record)(struct gs_pace_io *io, void *ev, void *stream); /* 0: recorded */
    /* 1: the stream is being captured into a graph (or cannot tell): its
     * launches run later, and event queries now would break the capture. */
    int (*capturing)(struct gs_pace_io *io, void *stream);
    int (*event_done)(struct gs_pace_io *io, void *ev);                 /* 1: complete */
    int (*event_wait)(struct gs_pace_io *io, void *ev);                 /* 0: complete */
    /* 1: `to` is complete (`from`, recorded before it, too), and *ns the GPU's
     * time between them (0 if the driver cannot tell); 0: `to` is not. One
     * driver call where a query and then the time were two: on an H100 a
     * query that found its event done cost 1.4-2.2 us (bench/fence_calls). */
    int (*event_gap)(struct gs_pace_io *io, void *from, void *to, unsigned long long *ns);
    unsigned long long (*now)(struct gs_pace_io *io);
    void (*sleep)(struct gs_pace_io *io, unsigned long long ns);
    /* Sleep until *word is no longer `seen` (a futex on the card file), or
     * for ns at most; and wake whoever sleeps on word. */
    void (*wait_word)(struct gs_pace_io *io, unsigned *word, unsigned seen, unsigned long long ns);
    void (*wake_word)(struct gs_pace_io *io, unsigned *word);
    void (*pause)(struct gs_pace_io *io); /* a few microseconds on the CPU, awake */
    /* Gates (all NULL: none, an uncapped process waits for turns on the host).
     * An uncapped process whose turn it is not goes on launching, its work
     * held on the GPU behind its gate (cuStreamWaitValue32 on a word of its
     * own), which its watcher (gs_pace_gate_watch, a thread that never takes
     * the pacer's lock) opens when its turn comes. gate_close: a new closed
     * period, `stream` waits at it (0; -1: not closed, the process waits on
     * the host); gate_hold: `stream` waits at the closed gate if it does not
     * yet; gate_open: the watcher opens it (never blocks). */
    int (*gate_close)(struct gs_pace_io *io, void *stream);
    void (*gate_hold)(struct gs_pace_io *io, void *stream);
    void (*gate_open)(struct gs_pace_io *io);
    /* Move charge and launches into the bucket, refill it (held_ns: how long
     * others held the process back since the last settle, gs_bucket_refill);
     * returns the cap (percent, 0: none) and in *wait how long the container
     * must sleep. */
    unsigned (*settle)(struct gs_pace_io *io, unsigned long long charge_ns,
                       unsigned long long launches, unsigned long long held_ns,
                       unsigned long long *wait);
    void (*throttled)(struct gs_pace_io *io, unsigned long long ns);
    unsigned (*cap)(struct gs_pace_io *io);
    struct gpuslice_cardfile *card; /* NULL: no view of the neighbours */
    int seat; /* our seat in the card file; -1: none yet */
    unsigned long long token;
    /* Tenants of a card take turns and stand aside for guests and higher
     * priorities (GPUSLICE_COMPUTE_TURNS, on unless 0); a turn is a process's. */
    int turns;
    /* Uncapped, it launches through capped holders' turns while its own
     * waits take little of its time (GPUSLICE_COMPUTE_SIDE, on unless 0;
     * turns on; no gates, or its last gate refused). */
    int side;
    unsigned prio; /* GPUSLICE_PRIORITY_* (limits.h): the container's own claim */
};

/* Around one launch that goes to `stream`: begin before the driver call,
 * end after it with whether the driver took the launch. */
void gs_pace_launch_begin(struct gs_pacer *p, struct gs_pace_io *io, void *stream);
void gs_pace_launch_end(struct gs_pacer *p, struct gs_pace_io *io, void *stream, int ok);

/* Launches past the pacer (launch.c's lock-free path; pure, no io):
 * gs_pace_room: how many launches may go to the driver without
 * gs_pace_launch_begin/end before one must come through them again (0 while
 * a marker is due); gs_pace_room_until: the clock by which one must (a
 * fence due by time, or the gap check); gs_pace_room_ahead: the same
 * while a launch that fences at its end is in the driver, counted from
 * that fence on (*until set; 0 where no fence is due at that launch, or
 * a marker is); gs_pace_count: n such launches the
 * driver took, `unseen` of them while the pacer held the process back
 * (charged at the learned estimate). */
unsigned gs_pace_room(const struct gs_pacer *p);
unsigned long long gs_pace_room_until(const struct gs_pacer *p);
unsigned gs_pace_room_ahead(const struct gs_pacer *p, unsigned long long *until);
void gs_pace_count(struct gs_pacer *p, unsigned long long n, unsigned long long unseen);
/* The words of a card that change whenever a quiet process (p->quiet) would
 * have something to do at its next launch: a turn taken, a window left, a
 * stand-aside stamp raised, a low tenant running, a waiter for the turn.
 * While they read as they did at its last look, a launch between fence
 * points may skip the pacer on a card with turns too. */
void gs_card_quiet_words(const struct gpuslice_cardfile *c,
                         unsigned long long w[GS_CARD_QUIET_WORDS]);

/* The gate's watcher, every GS_PACE_POLL_NS (and when the card's seq
 * changes) while p->gate_since_ns is set: renews our want of the card, and
 * opens the gate (io->gate_open) once the turn is no longer another's, or
 * it has been closed for p->gate_limit_ns. Reads and writes only the card
 * file and the pacer's gate_* atomics. 1: it opened the gate. */
int gs_pace_gate_watch(struct gs_pacer *p, struct gs_pace_io *io, unsigned long long now);

/* The application's wait for the GPU (a sync, a blocking copy, a poll
 * that ended), begun at `began` (0: not known), returned at now, on any
 * thread, without the pacer's lock:
 * idling counts from here (first service), and a process whose waits at
 * this place in its requests were lately not followed by a launch within
 * GS_PACE_ASIDE_NS lets its stand-aside stamp go (its work is done).
 * Returns the card whose seq it then bumped (the caller wakes who waits
 * on it), or NULL. */
struct gpuslice_cardfile *gs_pace_waited(struct gs_pacer *p, unsigned long long began,
                                         unsigned long long now);

/* Whether the GPU is seldom behind us: most of our last fence points
 * (fences_behind) found the fence before done. Such a process keeps a deeper
 * queue beside others (what it has in flight is short, whatever the
 * estimate); launch.c says which it was at exit (GPUSLICE_LOG=debug). */
int gs_pace_host_bound(const struct gs_pacer *p);

/* The process is going away: give back the turn if it holds it (no driver
 * call; its queue dies with its context). */
void gs_pace_leave(struct gs_pacer *p, struct gs_pace_io *io);

/* The container's bucket (caller holds the region lock). */
/* Refill at cap % of the time since the last refill, up to GS_PACE_BURST_NS;
 * for a process that others held back for held_ns meanwhile, up to what it
 * earned while held back more (at most another GS_PACE_BURST_NS). Credit kept
 * above the burst is never cut, only spent. Returns what it earned and did
 * not keep (ns) if the last refill was less than GS_PACE_STALE_NS ago (an
 * idle second or more, a container's start, is not counted): what an idle
 * or host-bound container did not use, or what others' turns kept from a
 * GPU-bound one, short of its cap though its bucket had credit. */
unsigned long long gs_bucket_refill(struct gpuslice_bucket *b, unsigned cap,
                                    unsigned long long now, unsigned long long held_ns);
void gs_bucket_charge(struct gpuslice_bucket *b, unsigned long long ns);
/* 0 if the container may run; else how long to sleep (ns) for the credit
 * to reach GS_PACE_RESUME_NS. */
unsigned long long gs_bucket_wait_ns(const struct gpuslice_bucket *b, unsigned cap);

/* How many other processes' seats say they have GPU work queued now (or
 * had, until GS_PACE_BACKLOG_NS ago) and have not let their queue run dry
 * since: they compete for the card (a turn taker waits for them). */
unsigned gs_card_competitors(const struct gpuslice_cardfile *c, int mine, unsigned long long now);
/* A seat for token (its own, a free or a stale one); -1 if none. */
int gs_card_seat(struct gpuslice_cardfile *c, unsigned long long token, unsigned long long now);
/* Say that we have work queued until at least `until` (GS_CARD_BACKLOG), or
 * that our queue ran dry (GS_CARD_DRAINED, until ignored); returns our seat
 * (it may have moved). */
enum { GS_CARD_BACKLOG, GS_CARD_DRAINED };
int gs_card_stamp(struct gpuslice_cardfile *c, int seat, unsigned long long token, int what,
                  unsigned long long until, unsigned long long now);
/* Who waits for the turn on a card, but `mine`: next, the seat of the capped
 * process (GPUSLICE_CARDFILE_WAITS_CAPPED) to pass the turn to, -1 if there is
 * none or uncapped waiters have waited longer (they get a window, together);
 * uncapped: whether any uncapped process waits; any: whether anyone does;
 * parties: how many wait (each capped process, the uncapped ones as one);
 * oldest_ns: since when the one that has waited longest waits; gated: an
 * uncapped waiter waits behind its gate (GPUSLICE_CARDFILE_GATED). */
struct gs_waiters {
    int next, uncapped, any, gated;
    unsigned parties;
    unsigned long long oldest_ns;
};
void gs_card_waiters(const struct gpuslice_cardfile *c, int mine, unsigned long long now,
                     struct gs_waiters *w);

#endif
