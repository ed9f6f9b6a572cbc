/*
 * The card file: <state dir>/cards/<GPU UUID> (GPUSLICE_CARDFILES_DIR,
 * statedir.h), one per card for the whole host, mapped by every process of
 * every container that has the card in a slice. Each such process takes a
 * seat here (its random token as the owner), where it says how long its
 * queue lasts and whether it waits for the turn. The file says whose turn the card
 * is, who waits for it, and whose work others stand aside for
 * (docs/compute-limit.md). Fields are written with relaxed atomics,
 * never under a lock: any tenant can write here, so a reader trusts nothing
 * it reads. Plain C declarations and integer #defines only, as region.h.
 */
#ifndef GPUSLICE_CARDFILE_H
#define GPUSLICE_CARDFILE_H

#define GPUSLICE_CARDFILE_MAGIC 0x43535047
#define GPUSLICE_CARDFILE_VERSION 3
#define GPUSLICE_CARDFILE_SEATS 256

/* A seat's flags while its process waits: it takes the turn when given (capped);
 * its work waits on the GPU behind its gate, so it cannot launch into another's turn;
 * it waits for its own queue, so its work is on the card now (a long kernel may be). */
#define GPUSLICE_CARDFILE_WAITS_CAPPED 1
#define GPUSLICE_CARDFILE_GATED 2
#define GPUSLICE_CARDFILE_BLOCKED 4

/* A seat's mode (its own, kept while it lasts): its process launches through
 * capped holders' turns, side by side, for it seldom waits for its own work
 * (GPUSLICE_COMPUTE_SIDE, on unless 0); a capped process beside such a one gets less
 * than its cap, so they take turns again. */
#define GPUSLICE_CARDFILE_SIDE 1
#define GPUSLICE_CARDFILE_SHORT 2

struct gpuslice_cardfile_seat {
    unsigned long long owner;         /* a process's random token; 0 = free */
    unsigned long long backlog_ns;    /* CLOCK_MONOTONIC until which it has GPU work queued */
    unsigned long long drained_ns;    /* when it last let its queue run dry */
    unsigned long long want_ns;       /* last time it said it waits for the turn (renewed while it does) */
    unsigned long long want_since_ns; /* since when it has waited */
    unsigned int flags;               /* GPUSLICE_CARDFILE_WAITS_CAPPED, _GATED, _BLOCKED */
    unsigned int mode;                /* GPUSLICE_CARDFILE_SIDE, _SHORT */
};

struct gpuslice_cardfile {
    unsigned int magic;
    unsigned int version;
    unsigned int size;
    unsigned int seq;                  /* changes when the turn changes hands or a stamp below is let go early: waiters sleep on it */
    unsigned long long managed_ns;     /* last time a capped or prioritised process ran here; 0: none */
    unsigned long long low_ns;         /* last time a low-priority process ran here; 0: none */
    unsigned long long turn_owner;     /* the process (its seat's token) whose turn it is; 0: nobody's */
    unsigned long long turn_until_ns;  /* its lease: renewed while it runs */
    unsigned long long turn_since_ns;  /* when its turn began: waiters wake in time for its end */
    unsigned long long free_until_ns;  /* a holder that yielded leaves the card to uncapped tenants until then */
    unsigned long long want_ns;        /* last time anyone said it waits for the turn */
    unsigned long long high_until_ns;  /* high-priority work is queued until then */
    unsigned long long guest_until_ns; /* a fresh request (a guest) runs until then */
    unsigned long long normal_until_ns; /* normal work is queued until then (said while a low tenant is here) */
    struct gpuslice_cardfile_seat seats[GPUSLICE_CARDFILE_SEATS];
};

#endif
