/*
 * The charging rules: what a process is charged, when a charge is settled on
 * what the driver holds, and what is tried before an allocation is refused.
 * The API families (cuda_mem.c, cuda_ctx.c, graphs.c) call it; it calls
 * only what lies beneath: the region's books (ledger.c), what the driver
 * holds (pools.c for pools, graph_mem.c for graph memory, ctx_cost.c for a
 * process's context), devices.c, and the driver through them.
 *
 *   charge   gs_charge_settling: an allocation's charge, checked against
 *            the cap (ledger.c), with room for the driver's own share near
 *            the cap (gs_ctx_headroom);
 *   settle   pools and the device's graph memory on their reservation
 *            (gs_pool_settle, gs_graph_settle), a context on the driver's
 *            figure (gs_ctx_settle); a settle counts only when no other
 *            operation of the process is half done (gs_mem_op_begin/end);
 *   retry    before a refusal: stale pool charges settled, graph memory of
 *            destroyed graphs trimmed, the context settled; then once more.
 *
 * The context charge. A context costs device memory the allocation calls
 * never show (code, stacks, the driver's own heaps), and how much differs by
 * card, driver and program (about 520-610 MiB on an H200). When a process
 * first holds a context on a device it is charged GPUSLICE_CONTEXT_RESERVE,
 * checked against the cap like an allocation. From then on the charge
 * follows what the driver really holds for the process beyond its tracked
 * allocations, as NVML reports it (ctx_cost.c): raised to it right after the
 * context is made and at most every SETTLE_NS on the allocation path;
 * brought down to it near the cap (gs_ctx_headroom), before an allocation is
 * refused and when a program asks how much is free. Where NVML cannot tell,
 * the fixed charge stays. It is given back when the process holds no
 * context there any more.
 *
 * No lock of this file is held across a driver call: ctx_mu is held across
 * the region lock only (always in this order), never across NVML or CUDA.
 */
#define _POSIX_C_SOURCE 200809L
#include "gpuslice.h"

#include <pthread.h>
#include <string.h>

static void settle_when_done(void);
static int settle_stale(int dev, int ctx_too);

/* ------------------------------------------------------ open operations */

/* Open operations of the process, and of this thread: a settle runs only
 * from a thread whose own open operation has not charged yet or has had
 * the driver's answer, so only the others' can make the figures disagree. */
static unsigned int ops_started, ops_open;
static __thread unsigned int ops_mine;

void gs_mem_op_begin(void)
{
    ops_mine++;
    __atomic_fetch_add(&ops_started, 1, __ATOMIC_ACQ_REL);
    __atomic_fetch_add(&ops_open, 1, __ATOMIC_ACQ_REL);
}

void gs_mem_op_end(void)
{
    ops_mine--;
    __atomic_fetch_sub(&ops_open, 1, __ATOMIC_ACQ_REL);
    settle_when_done();
}

static unsigned int ops_started_now(void)
{
    return __atomic_load_n(&ops_started, __ATOMIC_ACQUIRE);
}

static unsigned int ops_others_open(void)
{
    return __atomic_load_n(&ops_open, __ATOMIC_ACQUIRE) - ops_mine;
}

/* ------------------------------------------------------ the context charge */

static pthread_mutex_t ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned int ctx_refs[GPUSLICE_MAX_DEVICES];
static unsigned char ctx_charged[GPUSLICE_MAX_DEVICES];
static unsigned long long ctx_bytes[GPUSLICE_MAX_DEVICES]; /* the context charge now */
/* What raised limits reserve (gs_ctx_grow), and the context's own figure at
 * its first settle: a settle never takes the charge below their sum. The
 * driver makes a raised malloc heap resident only later (at a launch: an
 * H200 showed nothing of a 5 GiB heap after cuCtxSetLimit), so the driver's
 * figure cannot be what the charge follows until then. */
static unsigned long long ctx_limits[GPUSLICE_MAX_DEVICES], ctx_base[GPUSLICE_MAX_DEVICES];
static unsigned char ctx_based[GPUSLICE_MAX_DEVICES];
static unsigned long long settled_ns[GPUSLICE_MAX_DEVICES];

/* Growth of the driver's own memory (modules loaded lazily, a second
 * context) shows up in the cap within this time of the next allocation. */
#define SETTLE_NS 100000000ull
/* Readings of the driver's figures a settle tries before it gives up while
 * graph launches keep mapping memory (the next settle tries again). */
#define SETTLE_READS 4

/* Take a context reference on dev, charging the reservation on the first. */
static CUresult ctx_ref(int dev)
{
    if (gs_cfg.fail_closed)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (dev < 0 || dev >= GPUSLICE_MAX_DEVICES)
        return gs_charge(dev, GPUSLICE_KIND_CONTEXT, 0) == GS_DENIED
                   ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
    gs_device_note(dev);
    /* ctx_mu orders first-reference decisions; it is never held across a
     * driver call (only across the region lock, always in this order). */
    pthread_mutex_lock(&ctx_mu);
    if (ctx_refs[dev] == 0) {
        int c = gs_charge(dev, GPUSLICE_KIND_CONTEXT, gs_cfg.context_reserve);
        if (c == GS_DENIED) {
            pthread_mutex_unlock(&ctx_mu);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        ctx_charged[dev] = c == GS_CHARGED;
        ctx_bytes[dev] = c == GS_CHARGED ? gs_cfg.context_reserve : 0;
    }
    ctx_refs[dev]++;
    pthread_mutex_unlock(&ctx_mu);
    return CUDA_SUCCESS;
}

static void ctx_unref(int dev)
{
    if (dev < 0 || dev >= GPUSLICE_MAX_DEVICES)
        return;
    pthread_mutex_lock(&ctx_mu);
    if (ctx_refs[dev] > 0 && --ctx_refs[dev] == 0 && ctx_charged[dev]) {
        ctx_charged[dev] = 0;
        gs_uncharge(dev, GPUSLICE_KIND_CONTEXT, ctx_bytes[dev]);
        ctx_bytes[dev] = ctx_limits[dev] = ctx_base[dev] = 0;
        ctx_based[dev] = 0;
    }
    pthread_mutex_unlock(&ctx_mu);
}

/* up_only: only ever raise the charge. Far from the cap the fixed charge
 * stays while it covers what the driver holds: a context grows after it is
 * made (modules loaded at their first launch, cuBLAS, ...), and growth
 * inside the charge can never take the cap past what it is. Near the cap
 * and before a refusal the charge comes down to the driver's figure. */
static int settle_ctx(int dev, int up_only)
{
    if (dev < 0 || dev >= GPUSLICE_MAX_DEVICES || !gs_driver_pid() || !gs_limit(dev))
        return 0;
    /* The driver's figure and ours must describe the same moment: nothing
     * of this process may be between its charge and the driver's answer. */
    unsigned int started = ops_started_now();
    if (ops_others_open())
        return 0;
    /* Graph memory is charged before the driver maps it (graphs.c): that
     * part is not in the driver's figure, and must not shrink the context.
     * A graph launch (no operation of ours: the launch path is not touched)
     * maps it at any time, so the driver's figure and the graph pool's must
     * be read at one moment: a launch between the two readings would count
     * its graph in neither and lower the context by the graph's size. */
    unsigned long long held, mapped = gs_graph_mapped(dev);
    int same = 0;
    for (int tries = 0; tries < SETTLE_READS && !same; tries++) {
        unsigned long long before = mapped;
        if (gs_ctx_cost_read(dev, &held) != 0)
            return 0;
        mapped = gs_graph_mapped(dev);
        same = mapped == before;
    }
    if (!same)
        return 0;
    unsigned long long ahead = gs_graph_ahead(dev, mapped);
    struct gpuslice_region *r = gs_region();
    if (gs_region_lock(r) != 0)
        return 0;
    int mine = gs_proc_entry_locked(r);
    unsigned long long tracked = 0;
    for (int k = 0; mine >= 0 && k < GPUSLICE_KINDS; k++)
        if (k != GPUSLICE_KIND_CONTEXT)
            tracked += r->procs[mine].used[dev][k];
    gs_region_unlock(r);
    if (mine < 0 || ops_others_open() || ops_started_now() != started)
        return 0;
    tracked = tracked > ahead ? tracked - ahead : 0;
    /* What we track but the driver does not hold (managed memory not yet
     * resident) leaves the context at 0: the charge never falls below the
     * driver's figure. */
    unsigned long long target = held > tracked ? held - tracked : 0;
    int lowered = 0;
    pthread_mutex_lock(&ctx_mu);
    if (ctx_refs[dev] && !ctx_based[dev]) {
        ctx_base[dev] = target;
        ctx_based[dev] = 1;
    }
    if (ctx_limits[dev] && target < ctx_base[dev] + ctx_limits[dev])
        target = ctx_base[dev] + ctx_limits[dev];
    if (ctx_refs[dev] && ctx_charged[dev] && target != ctx_bytes[dev] &&
        (!up_only || target > ctx_bytes[dev])) {
        if (target > ctx_bytes[dev]) {
            gs_charge_held(dev, GPUSLICE_KIND_CONTEXT, target - ctx_bytes[dev]);
        } else {
            gs_uncharge(dev, GPUSLICE_KIND_CONTEXT, ctx_bytes[dev] - target);
            lowered = 1;
        }
        GS_LOG(GS_LOG_DEBUG, "device %d: context charge %llu -> %llu bytes (driver holds %llu)",
               dev, ctx_bytes[dev], target, held);
        ctx_bytes[dev] = target;
    }
    __atomic_store_n(&settled_ns[dev], gs_now_ns(), __ATOMIC_RELAXED);
    pthread_mutex_unlock(&ctx_mu);
    return lowered;
}

int gs_ctx_settle(int dev)
{
    return settle_ctx(dev, 0);
}

void gs_ctx_settle_up(int dev)
{
    settle_ctx(dev, 1);
}

/* Within this share of the cap, an allocation is admitted only with room
 * for what the driver itself takes for it (page tables and the like: about
 * 1.3 % of what was allocated on an H200, unseen until a settle), charged
 * to the context at once, and the context is settled right after the
 * driver's answer. Then no process's unsettled share can take the cap past
 * what it is, whatever its neighbours in the container do meanwhile. */
#define NEAR_SHARE 8
#define HEADROOM_MIN (2ull << 20)
#define HEADROOM_SHIFT 5 /* 1/32 of the request */

static __thread int settle_after; /* dev + 1: settle once this thread's operation ends */

int gs_ctx_headroom(int dev, unsigned long long bytes)
{
    unsigned long long limit;
    if (dev < 0 || dev >= GPUSLICE_MAX_DEVICES || !gs_driver_pid() || !(limit = gs_limit(dev)))
        return GS_UNCAPPED;
    unsigned long long used = gs_used(dev);
    if (used < limit && bytes < limit - used && limit - used - bytes > limit / NEAR_SHARE)
        return GS_UNCAPPED;
    gs_ctx_settle(dev);
    unsigned long long margin = bytes >> HEADROOM_SHIFT;
    margin = margin < HEADROOM_MIN ? HEADROOM_MIN : margin;
    int c = GS_UNCAPPED;
    pthread_mutex_lock(&ctx_mu);
    if (ctx_refs[dev] && ctx_charged[dev]) {
        c = gs_charge(dev, GPUSLICE_KIND_CONTEXT, margin);
        if (c == GS_CHARGED) {
            ctx_bytes[dev] += margin;
            settle_after = dev + 1;
        }
    }
    pthread_mutex_unlock(&ctx_mu);
    return c;
}

/* The charge and ctx_bytes move together under ctx_mu, as in a settle. */
static int grow_locked(int dev, unsigned long long bytes)
{
    int c = GS_UNCAPPED;
    pthread_mutex_lock(&ctx_mu);
    if (ctx_refs[dev] && ctx_charged[dev]) {
        c = gs_charge(dev, GPUSLICE_KIND_CONTEXT, bytes);
        if (c == GS_CHARGED) {
            ctx_bytes[dev] += bytes;
            ctx_limits[dev] += bytes;
        }
    }
    pthread_mutex_unlock(&ctx_mu);
    return c;
}

int gs_ctx_grow(int dev, unsigned long long bytes)
{
    gs_ctx_settle_due(dev);
    int c = grow_locked(dev, bytes);
    /* As gs_charge_settling: stale pool, graph and context charges first. */
    if (c == GS_DENIED && settle_stale(dev, 1))
        c = grow_locked(dev, bytes);
    if (c == GS_CHARGED)
        settle_after = dev + 1;
    return c;
}

void gs_ctx_shrink(int dev, unsigned long long bytes)
{
    pthread_mutex_lock(&ctx_mu);
    if (ctx_charged[dev]) {
        bytes = bytes > ctx_bytes[dev] ? ctx_bytes[dev] : bytes;
        ctx_bytes[dev] -= bytes;
        ctx_limits[dev] -= bytes > ctx_limits[dev] ? ctx_limits[dev] : bytes;
        gs_uncharge(dev, GPUSLICE_KIND_CONTEXT, bytes);
    }
    pthread_mutex_unlock(&ctx_mu);
}

/* At gs_mem_op_end: the settle a headroom or a growth asked for. */
static void settle_when_done(void)
{
    int dev = settle_after - 1;
    if (dev >= 0) {
        settle_after = 0;
        gs_ctx_settle(dev);
    }
}

void gs_ctx_settle_due(int dev)
{
    if (dev < 0 || dev >= GPUSLICE_MAX_DEVICES || !gs_driver_pid())
        return;
    unsigned long long last = __atomic_load_n(&settled_ns[dev], __ATOMIC_RELAXED);
    if (gs_now_ns() - last >= SETTLE_NS)
        settle_ctx(dev, 1);
}

/* Before the first context on dev: what NVML lists there (ctx_cost.c). */
static void ctx_before(int dev)
{
    if (dev >= 0 && dev < GPUSLICE_MAX_DEVICES && gs_limit(dev) && !gs_driver_pid())
        gs_ctx_cost_before(dev);
}

/* After a context was made on dev: learn our pid, then settle. */
static void ctx_after(int dev)
{
    if (dev < 0 || dev >= GPUSLICE_MAX_DEVICES || !gs_limit(dev))
        return;
    gs_ctx_cost_after(dev);
    settle_ctx(dev, 1);
}

/* A context is about to be made on dev: its first one is charged the
 * reserve (CUDA_ERROR_OUT_OF_MEMORY: it does not fit). gs_ctx_opened must
 * follow with whether the driver made it. */
CUresult gs_ctx_open(int dev)
{
    ctx_before(dev);
    return ctx_ref(dev);
}

void gs_ctx_opened(int dev, int made)
{
    if (made)
        ctx_after(dev);
    else
        ctx_unref(dev);
}

void gs_ctx_closed(int dev)
{
    ctx_unref(dev);
}

/* ------------------------------------------------------------ pools */

/* Move a pool's charge (graph: the device's graph memory) to what it holds
 * now; returns the change. */
static long long settle_pool(CUmemoryPool pool, int graph, int dev,
                             unsigned long long provisional)
{
    int ok;
    unsigned long long reserved = graph ? gs_graph_held(dev, &ok) : gs_pool_reserved(pool, &ok);
    long long moved = gs_pool_record(pool, graph, &dev, reserved, ok, provisional);
    if (moved > 0)
        gs_charge_held(dev, GPUSLICE_KIND_POOL, (unsigned long long)moved);
    else if (moved < 0)
        gs_uncharge(dev, GPUSLICE_KIND_POOL, (unsigned long long)-moved);
    return moved;
}

void gs_pool_settle(CUmemoryPool pool, int dev, unsigned long long provisional)
{
    settle_pool(pool, 0, dev, provisional);
}

int gs_graph_settle(int dev, unsigned long long provisional)
{
    return settle_pool(NULL, 1, dev, provisional) < 0;
}

void gs_pool_forget(CUmemoryPool pool)
{
    int dev;
    unsigned long long charged;
    if (gs_pool_drop(pool, &dev, &charged))
        gs_uncharge(dev, GPUSLICE_KIND_POOL, charged);
}

int gs_pools_settle_all(void)
{
    struct gs_pool_ref seen[GS_MAX_POOLS];
    int n = gs_pools_list(seen);
    int lowered = 0;
    for (int i = 0; i < n; i++)
        lowered |= settle_pool(seen[i].pool, seen[i].graph, seen[i].dev, 0) < 0;
    return lowered;
}

int gs_pool_admit(CUmemoryPool pool, int dev, unsigned long long bytes,
                  unsigned long long *provisional)
{
    /* Usually the whole request fits: charge it and let the settle correct
     * the charge to the pool's reservation, with no query of the pool here. */
    *provisional = bytes;
    int c = gs_charge_settling(dev, GPUSLICE_KIND_POOL, bytes);
    if (c != GS_DENIED)
        return c;
    /* Near the cap: only what the pool cannot serve from memory it already
     * holds needs room. An unreadable pool leaves the whole request. */
    unsigned long long spare = gs_pool_spare(pool);
    *provisional = bytes > spare ? bytes - spare : 0;
    c = *provisional ? gs_charge(dev, GPUSLICE_KIND_POOL, *provisional) : GS_CHARGED;
    if (c != GS_CHARGED)
        *provisional = 0;
    return c;
}

/* ------------------------------------------------------------ retry */

/* Graph memory destroyed graphs left in the pools, trimmed and settled;
 * 1 if a charge went down. */
static int trim_retired(void)
{
    unsigned trimmed = gs_graph_mem_trim_retired();
    int lowered = 0;
    for (int d = 0; d < GPUSLICE_MAX_DEVICES; d++)
        if (trimmed & (1u << d))
            lowered |= gs_graph_settle(d, 0);
    return lowered;
}

/* Charges that may be stale before a refusal: pools may have given memory
 * back at a sync point we did not see, destroyed graphs may have left
 * memory a trim gives back, and (ctx_too) the context may hold less than
 * its charge says. Every one is tried; 1 if any charge went down. */
static int settle_stale(int dev, int ctx_too)
{
    int lowered = gs_pools_settle_all();
    lowered |= trim_retired();
    if (ctx_too)
        lowered |= gs_ctx_settle(dev);
    return lowered;
}

int gs_charge_settling(int dev, int kind, unsigned long long bytes)
{
    gs_ctx_settle_due(dev);
    int h = gs_ctx_headroom(dev, bytes);
    if (h == GS_DENIED && gs_pools_settle_all())
        h = gs_ctx_headroom(dev, bytes);
    if (h == GS_DENIED)
        return GS_DENIED;
    int c = gs_charge(dev, kind, bytes);
    /* The headroom settled the context already when it charged (its room
     * must stay): then only pools and graphs. */
    if (c == GS_DENIED && settle_stale(dev, h != GS_CHARGED))
        c = gs_charge(dev, kind, bytes);
    return c;
}

/* ------------------------------------------------------------------ fork */

void gs_account_fork_prepare(void)
{
    pthread_mutex_lock(&ctx_mu);
}

void gs_account_fork_parent(void)
{
    pthread_mutex_unlock(&ctx_mu);
}

void gs_account_fork_child(void)
{
    /* Only the forking thread goes on in the child, outside any operation;
     * contexts do not survive fork: the child holds none. */
    ops_open = 0;
    ops_mine = 0;
    memset(ctx_refs, 0, sizeof ctx_refs);
    memset(ctx_charged, 0, sizeof ctx_charged);
    memset(ctx_bytes, 0, sizeof ctx_bytes);
    memset(ctx_limits, 0, sizeof ctx_limits);
    memset(ctx_base, 0, sizeof ctx_base);
    memset(ctx_based, 0, sizeof ctx_based);
    memset(settled_ns, 0, sizeof settled_ns);
    pthread_mutex_init(&ctx_mu, NULL);
}
