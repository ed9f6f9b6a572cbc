/*
 * What the region's two C writers, the hook (which makes a container's
 * region at its create, with the accountant's caps) and the shim (which
 * makes one where it finds none: a process run outside such a container),
 * both do to it: where its process-shared robust
 * mutex lives, how a fresh region is laid out, and its one derived figure (a
 * device's used_bytes is the sum of its live entries' usage). C only (static
 * inline): the headers cffi reads are the ones beside ../region.h.
 */
#ifndef GPUSLICE_C_REGION_RULES_H
#define GPUSLICE_C_REGION_RULES_H

#include <pthread.h>

#include "gpuslice/region.h"

_Static_assert(sizeof(pthread_mutex_t) <= GPUSLICE_LOCK_SIZE, "region lock too small");

static inline pthread_mutex_t *gpuslice_region_mutex(struct gpuslice_region *r)
{
    return (pthread_mutex_t *)(void *)r->lock;
}

/* Lay out a zeroed region: its mutex, each device's caps and the priority,
 * then the header, the magic last (a reader that sees it sees the rest). */
static inline void gpuslice_region_format(struct gpuslice_region *r,
                                          const unsigned long long *limit_bytes,
                                          const unsigned int *core_limit, unsigned int priority)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(gpuslice_region_mutex(r), &a);
    pthread_mutexattr_destroy(&a);
    for (int i = 0; i < GPUSLICE_MAX_DEVICES; i++) {
        r->devices[i].limit_bytes = limit_bytes[i];
        r->devices[i].core_limit = core_limit[i];
        r->devices[i].priority = priority;
    }
    r->version = GPUSLICE_REGION_VERSION;
    r->size = sizeof *r;
    __atomic_store_n(&r->magic, GPUSLICE_REGION_MAGIC, __ATOMIC_RELEASE);
}

/* With the region's mutex held: the totals from the live entries (after a
 * process died holding the mutex, maybe half-way through an update). */
static inline void gpuslice_region_recompute(struct gpuslice_region *r)
{
    for (int d = 0; d < GPUSLICE_MAX_DEVICES; d++) {
        unsigned long long sum = 0;
        for (int i = 0; i < GPUSLICE_MAX_PROCS; i++)
            if (r->procs[i].state == GPUSLICE_PROC_LIVE)
                for (int k = 0; k < GPUSLICE_KINDS; k++)
                    sum += r->procs[i].used[d][k];
        __atomic_store_n(&r->devices[d].used_bytes, sum, __ATOMIC_RELAXED);
    }
}

#endif
