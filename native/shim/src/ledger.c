/*
 * The region's books: a charge or an uncharge of this process's entry and
 * the device's total, under the region lock. The check and the charge are
 * one step, so two processes racing for the last bytes of a cap cannot both
 * win. Callers (the charging rules, account.c) call the driver after the
 * charge, outside the lock (a lock held across a driver call would
 * serialise every allocation of the container behind the slowest one), and
 * give the charge back when the driver refuses. No rules here: what to
 * charge, when to settle and when to retry is account.c's.
 *
 * Order of updates under the lock: the entry first, then the device total.
 * If we die in between, the next owner of the lock recomputes the totals
 * from the entries (see gs_region_lock).
 */
#define _POSIX_C_SOURCE 200809L
#include "gpuslice.h"

static int fits(const struct gpuslice_region *r, int dev, unsigned long long bytes,
                unsigned long long limit)
{
    unsigned long long used = r->devices[dev].used_bytes;
    return used <= limit && bytes <= limit - used;
}

/* force: the driver already holds the memory (a pool grew by more than we
 * asked for); the region must show it whether or not it fits. */
static int charge(int dev, int kind, unsigned long long bytes, int force)
{
    if (GS_UNLIKELY(gs_cfg.fail_closed) && !force)
        return GS_DENIED;
    if (dev < 0 || dev >= GPUSLICE_MAX_DEVICES) {
        /* Beyond the region's devices: a global cap must still hold. */
        return gs_cfg.any_limit ? GS_DENIED : GS_UNCAPPED;
    }
    unsigned long long limit = gs_limit(dev);
    if (limit == 0)
        return GS_UNCAPPED; /* pure pass-through: no lock, no map */

    struct gpuslice_region *r = gs_region();
    if (gs_region_lock(r) != 0)
        return GS_DENIED;
    int mine = gs_proc_entry_locked(r);
    if (mine < 0)
        goto denied;
    if (!force && !fits(r, dev, bytes, limit)) {
        /* Slow path only: dead processes may still hold part of the cap. */
        gs_reclaim_locked(r);
        if (!fits(r, dev, bytes, limit))
            goto denied;
    }
    struct gpuslice_proc *s = &r->procs[mine];
    __atomic_fetch_add(&s->used[dev][kind], bytes, __ATOMIC_RELAXED);
    __atomic_fetch_add(&r->devices[dev].used_bytes, bytes, __ATOMIC_RELAXED);
    __atomic_store_n(&s->heartbeat_ns, gs_now_ns(), __ATOMIC_RELAXED);
    gs_region_unlock(r);
    return GS_CHARGED;
denied:
    gs_region_unlock(r);
    GS_LOG(GS_LOG_DEBUG, "device %d: refusing %llu bytes (kind %d): cap %llu, used %llu", dev,
           bytes, kind, limit, gs_used(dev));
    return GS_DENIED;
}

int gs_charge(int dev, int kind, unsigned long long bytes)
{
    return charge(dev, kind, bytes, 0);
}

void gs_charge_held(int dev, int kind, unsigned long long bytes)
{
    if (bytes)
        charge(dev, kind, bytes, 1);
}

static unsigned long long sub_sat(unsigned long long *p, unsigned long long n, int *under)
{
    unsigned long long v = __atomic_load_n(p, __ATOMIC_RELAXED);
    if (n > v)
        *under = 1;
    unsigned long long nv = n > v ? 0 : v - n;
    __atomic_store_n(p, nv, __ATOMIC_RELAXED);
    return nv;
}

void gs_uncharge(int dev, int kind, unsigned long long bytes)
{
    if (dev < 0 || dev >= GPUSLICE_MAX_DEVICES || bytes == 0)
        return;
    struct gpuslice_region *r = gs_region();
    if (gs_region_lock(r) != 0)
        return;
    int mine = gs_proc_entry_locked(r);
    int under = 0;
    if (mine >= 0) {
        sub_sat(&r->procs[mine].used[dev][kind], bytes, &under);
        sub_sat(&r->devices[dev].used_bytes, bytes, &under);
    }
    gs_region_unlock(r);
    static int warned;
    if (under && !__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
        gs_log_write(GS_LOG_WARN, "device %d: uncharging %llu bytes (kind %d) would underflow; "
                     "clamped at 0 (logged once)", dev, bytes, kind);
}
