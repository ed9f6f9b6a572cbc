/*
 * Presence: a capped or prioritised process says, on each card it has
 * launched on, that it is there while it lives, launching or not
 * (managed_ns, every GS_PACE_PRESENCE_NS). Its uncapped neighbours then
 * stay paced, their queues short, and its next request or turn does not
 * wait behind the hundreds of milliseconds an unpaced neighbour queues
 * (docs/compute-limit.md, Sharing a card). One thread per process.
 */
#ifndef GPUSLICE_PRESENCE_H
#define GPUSLICE_PRESENCE_H

#include <gpuslice/cardfile.h>

/* This process launches on device dev, whose card file is c: say so from now
 * on (the thread started at the first call; any thread, with or without the
 * pacer's mutex). */
void gs_presence_note(int dev, struct gpuslice_cardfile *c);
/* In a forked child: the parent's thread is not here (started again at the
 * child's first paced launch). */
void gs_presence_fork_child(void);

#endif
