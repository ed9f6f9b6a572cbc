/*
 * A gate: what holds an uncapped process's GPU work back while another
 * tenant holds the card, so that the process can go on launching (the
 * pacer's side: pace_turns.c, Gates; reasoning: docs/compute-limit.md).
 * One per device of a process: a word of pinned host memory the GPU reads,
 * the streams that wait at it (cuStreamWaitValue32), and the watcher, a
 * thread that opens it when gs_pace_gate_watch says so. launch.c owns the
 * pacer and calls these with its mutex held, but for gs_gate_open (the
 * watcher's) and gs_gate_release (at exit).
 */
#ifndef GPUSLICE_GATE_H
#define GPUSLICE_GATE_H

#include "gpuslice.h"
#include "pace.h"

#include <pthread.h>

#define GS_GATE_STREAMS 64 /* streams remembered per closed period; more get a second wait */

struct gs_gate {
    int dev;
    int off;            /* setup failed: this device gates nothing (the pacer waits on the host) */
    unsigned *word;     /* one page, registered with the driver; NULL: not yet */
    CUdeviceptr dword;  /* the word's address in ctx */
    CUcontext ctx;
    /* Closed periods so far: streams wait until the word reaches it, and
     * the watcher opens the gate by storing it there (atomic: both threads). */
    unsigned epoch;
    struct {
        CUstream s;
        unsigned epoch;
    } streams[GS_GATE_STREAMS]; /* which stream waits at which period */
    /* The watcher: it looks with `look` held, and the pacer's owner takes
     * it too before it resets the pacer or rewrites its io. */
    pthread_mutex_t look;
    int watching;
    struct gs_pacer *p;
    struct gs_pace_io *io;
};

/* Before any thread uses g (and in a forked child). */
void gs_gate_init(struct gs_gate *g, int dev, struct gs_pacer *p, struct gs_pace_io *io);
/* A new closed period that stream s waits at (set up on first use, the
 * watcher started). 0; -1: no gate here (never again, if the driver cannot). */
int gs_gate_close(struct gs_gate *g, CUcontext ctx, CUstream s);
/* Stream s waits at the current period, if it does not yet. */
void gs_gate_hold(struct gs_gate *g, CUstream s);
/* Open it: whatever waits runs (never blocks; any thread). */
void gs_gate_open(struct gs_gate *g);
/* The context goes (a new one, or the process exits): open, forget the streams. */
void gs_gate_release(struct gs_gate *g);

#endif
