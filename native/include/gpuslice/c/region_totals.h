/*
 * The one rule of the region (../region.h) that both of its C writers, the
 * shim and the hook, apply: a device's used_bytes is the sum of its live
 * slots' usage. Whoever takes the region's mutex from a process that died
 * holding it recomputes the totals with this. C only (static inline): the
 * headers cffi reads are the ones beside region.h.
 */
#ifndef GPUSLICE_C_REGION_TOTALS_H
#define GPUSLICE_C_REGION_TOTALS_H

#include "gpuslice/region.h"

/* With the region's mutex held. */
static inline void gpuslice_region_recompute(struct gpuslice_region *r)
{
    for (int d = 0; d < GPUSLICE_MAX_DEVICES; d++) {
        unsigned long long sum = 0;
        for (int i = 0; i < GPUSLICE_MAX_PROCS; i++)
            if (r->procs[i].state == GPUSLICE_SLOT_LIVE)
                for (int k = 0; k < GPUSLICE_KINDS; k++)
                    sum += r->procs[i].used[d][k];
        __atomic_store_n(&r->devices[d].used_bytes, sum, __ATOMIC_RELAXED);
    }
}

#endif
