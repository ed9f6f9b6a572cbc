/*
 * The compute limiter's decisions, with no CUDA and no clock of their own:
 * launch.c feeds them times and fence results from the real driver, and
 * tests/shim/pace_sim.c feeds them a simulated GPU under a simulated clock.
 * Design and reasoning: docs/compute-limit.md.
 *
 * Per process and device a pacer follows the launches: every GS_PACE_FENCE_NS
 * of GPU work (estimated) it asks for a fence, an event recorded after a
 * launch. The GPU time between two completed fences is the time the process
 * held the card; it is charged to the container's bucket. If our work was
 * queued up behind the GPU meanwhile, the charge is divided by the number
 * of contexts competing for the card (the GPU time-slices evenly between
 * busy contexts); a process whose queue runs dry is barely slowed by a
 * neighbour and is charged in full. A bucket in debt makes the next fence point
 * drain the process's queue and sleep until the credit is back.
 */
#ifndef GPUSLICE_PACE_H
#define GPUSLICE_PACE_H

#include "gpuslice/region.h"

#define GS_PACE_FENCE_NS 1000000ull     /* GPU work between two fences */
#define GS_PACE_GAP_NS 2000000ull       /* no launch for this long: maybe a new busy period */
#ifndef GS_PACE_MAX_QUEUED /* -D to experiment */
#define GS_PACE_MAX_QUEUED 3            /* fences in flight before a capped launch waits */
#endif
#define GS_PACE_RESUME_NS 12000000ull   /* credit a throttled container sleeps for */
#define GS_PACE_BURST_NS 20000000ull    /* most credit an idle container keeps */
#define GS_PACE_BACKLOG_NS 5000000ull   /* a slot's backlog counts this long past its end */
#define GS_PACE_AHEAD_NS 100000000ull   /* most queued work a slot may announce */
#define GS_PACE_STALE_NS 1000000000ull  /* no capped tenant seen for this long: none left */
#define GS_PACE_LEASE_NS 5000000ull     /* a turn lapses this long after its last renewal */
#define GS_PACE_DRAIN_NS 16000000ull    /* most a new holder waits for the others' queues */
#define GS_PACE_TURN_POLL_NS 250000ull  /* how often a tenant waiting for the card looks */
#define GS_PACE_TURN_MAX_NS 50000000ull /* a holder gives the card up this often, if only briefly */
#define GS_PACE_PATIENCE_PCT 90ull      /* most of its time a process spends waiting for turns */
#define GS_PACE_PATIENCE_NS 20000000ull /* saved-up patience: a wait lasts 200 ms at most */
#define GS_PACE_LIGHT_FENCES 4u         /* fence points not behind the GPU: the process is light */
#define GS_PACE_MAX_PER_FENCE 4096u
#define GS_PACE_RING 8

struct gs_fence {
    void *ev;          /* the caller's event */
    unsigned launches; /* launches between the previous fence and this one */
    int marker;        /* recorded before a launch: starts a busy period, charges nothing */
    int behind;        /* the GPU was behind us when it was recorded: we competed */
};

struct gs_pacer {
    struct gs_fence ring[GS_PACE_RING]; /* oldest at head */
    unsigned head, count;
    void *ref;                     /* completed event the next interval starts from */
    unsigned since_fence;          /* launches after the newest fence */
    unsigned per_fence;            /* launches between fences */
    unsigned long long per_launch_ns; /* GPU time one launch takes, smoothed; 0: unknown */
    unsigned long long last_launch_ns, last_fence_ns;
    unsigned long long launch_ns;  /* the clock when the current launch began */
    int need_mark;                 /* the queue is known empty: mark the next launch */
    unsigned long long charge_ns;  /* charged here, not yet moved to the bucket */
    unsigned long long launches;   /* counted here, not yet moved to the bucket */
    unsigned light;                /* fence points in a row that found the GPU not behind us */
    int turn;                      /* holds the turn on the card */
    unsigned long long turn_since_ns; /* when it took it */
    unsigned long long turn_given_ns; /* when it last gave it up while it had work */
    long long patience_ns;         /* how much longer it may wait for others' turns */
    unsigned long long patience_stamp_ns;
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
 * (cannot happen while the caller keeps count <= GS_PACE_MAX_QUEUED + 1). */
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
    unsigned long long (*event_gap_ns)(struct gs_pace_io *io, void *from, void *to);
    unsigned long long (*now)(struct gs_pace_io *io);
    void (*sleep)(struct gs_pace_io *io, unsigned long long ns);
    /* Move charge and launches into the bucket, refill it; returns the cap
     * (percent, 0: none) and in *wait how long the container must sleep. */
    unsigned (*settle)(struct gs_pace_io *io, unsigned long long charge_ns,
                       unsigned long long launches, unsigned long long *wait);
    void (*throttled)(struct gs_pace_io *io, unsigned long long ns);
    unsigned (*cap)(struct gs_pace_io *io);
    struct gpuslice_card *card; /* NULL: no view of the neighbours */
    int slot;
    unsigned long long token;
    /* Capped tenants of a card run in turns instead of side by side
     * (GPUSLICE_COMPUTE_TURNS, on unless 0); a turn is a process's (token). */
    int turns;
};

/* Around one launch that goes to `stream`: begin before the driver call,
 * end after it with whether the driver took the launch. */
void gs_pace_launch_begin(struct gs_pacer *p, struct gs_pace_io *io, void *stream);
void gs_pace_launch_end(struct gs_pacer *p, struct gs_pace_io *io, void *stream, int ok);

/* The process is going away: give back the turn if it holds it (no driver
 * call; its queue dies with its context). */
void gs_pace_leave(struct gs_pacer *p, struct gs_pace_io *io);

/* The container's bucket (caller holds the region lock). */
void gs_bucket_refill(struct gpuslice_bucket *b, unsigned cap, unsigned long long now);
void gs_bucket_charge(struct gpuslice_bucket *b, unsigned long long ns);
/* 0 if the container may run; else how long to sleep (ns) for the credit
 * to reach GS_PACE_RESUME_NS. */
unsigned long long gs_bucket_wait_ns(const struct gpuslice_bucket *b, unsigned cap);

/* How many other processes' slots say they have GPU work queued now (or
 * had, until GS_PACE_BACKLOG_NS ago) and have not let their queue run dry
 * since: they compete for the card (a turn taker waits for them). */
unsigned gs_card_competitors(const struct gpuslice_card *c, int mine, unsigned long long now);
/* A slot for token (its own, a free or a stale one); -1 if none. */
int gs_card_claim(struct gpuslice_card *c, unsigned long long token, unsigned long long now);
/* Say that we have work queued until at least `until` (GS_CARD_BACKLOG), or
 * that our queue ran dry (GS_CARD_DRAINED, until ignored); returns our slot
 * (it may have moved). */
enum { GS_CARD_BACKLOG, GS_CARD_DRAINED };
int gs_card_stamp(struct gpuslice_card *c, int slot, unsigned long long token, int what,
                  unsigned long long until, unsigned long long now);

#endif
