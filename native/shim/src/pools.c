/*
 * Stream-ordered pools (cuMemAllocAsync and friends). A pool keeps memory it
 * has freed, up to its release threshold (CuPy's async pool keeps all of it),
 * and gives it back only when trimmed or at a synchronisation point. What a
 * pool holds is on the card, so that is what we charge: each pool's reserved
 * memory (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), not what is live in it.
 *
 *   admit:  before an allocation, a provisional charge checked against the
 *           cap like any other: the request, or near the cap only what the
 *           pool cannot serve from memory it already holds (reserved - used).
 *   settle: after the driver call, or a free, or a trim, read the pool's
 *           reservation and move our charge to exactly that.
 *
 * The graph memory of each device is kept here too, as a pool whose
 * reservation graphs.c computes (graphs.c says why).
 *
 * Memory a pool releases at a synchronisation point we do not see happen;
 * the charge stays high until the next settle; every allocation that would be
 * refused settles all pools first (gs_charge_settling), so a stale charge
 * never refuses what fits.
 *
 * The table is this process's (pools are per-process objects); its mutex is
 * never held across a driver call.
 */
#define _POSIX_C_SOURCE 200809L
#include "gpuslice.h"

#include <pthread.h>

#define MAX_POOLS 64

struct pool_rec {
    CUmemoryPool pool; /* NULL and not graph: free entry */
    int graph;         /* the device's graph memory (graphs.c): pool is NULL */
    int dev;
    unsigned long long charged; /* the reservation we last charged for */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct pool_rec pools[MAX_POOLS];

static unsigned long long attr(CUmemoryPool pool, int which, int *ok)
{
    cuuint64_t v = 0;
    *ok = HAS_REAL(cuMemPoolGetAttribute) &&
          REAL(cuMemPoolGetAttribute)(pool, which, &v) == CUDA_SUCCESS;
    return v;
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
    /* Pools may have given memory back at a sync point we did not see, and
     * the context may hold less than its charge says (the headroom settled
     * it already, and its room must stay). */
    if (c == GS_DENIED && (gs_pools_settle_all() | gs_graphs_trim_retired() |
                           (h != GS_CHARGED && gs_ctx_settle(dev))))
        c = gs_charge(dev, kind, bytes);
    return c;
}

int gs_pool_admit(CUmemoryPool pool, int dev, unsigned long long bytes,
                  unsigned long long *provisional)
{
    /* Usually the whole request fits: charge it and let settle() correct the
     * charge to the pool's reservation, with no query of the pool here. */
    *provisional = bytes;
    int c = gs_charge_settling(dev, GPUSLICE_KIND_POOL, bytes);
    if (c != GS_DENIED)
        return c;
    /* Near the cap: only what the pool cannot serve from memory it already
     * holds needs room. An unreadable pool leaves the whole request. */
    int ok_r, ok_u;
    unsigned long long reserved = attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &ok_r);
    unsigned long long used = attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &ok_u);
    unsigned long long spare = ok_r && ok_u && reserved > used ? reserved - used : 0;
    *provisional = bytes > spare ? bytes - spare : 0;
    c = *provisional ? gs_charge(dev, GPUSLICE_KIND_POOL, *provisional) : GS_CHARGED;
    if (c != GS_CHARGED)
        *provisional = 0;
    return c;
}

static int same(const struct pool_rec *r, CUmemoryPool pool, int graph, int dev)
{
    return graph ? r->graph && r->dev == dev : r->pool == pool && pool;
}

/* Move this pool's charge to its reservation now; returns the change. The
 * device's graph memory is one more pool: what graphs.c says it may hold. */
static long long settle(CUmemoryPool pool, int graph, int dev, unsigned long long provisional)
{
    int ok;
    unsigned long long reserved = graph ? gs_graph_held(dev, &ok)
                                        : attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &ok);
    pthread_mutex_lock(&mu);
    struct pool_rec *rec = NULL, *empty = NULL;
    for (int i = 0; i < MAX_POOLS && !rec; i++) {
        if (same(&pools[i], pool, graph, dev))
            rec = &pools[i];
        else if (!pools[i].pool && !pools[i].graph && !empty)
            empty = &pools[i];
    }
    if (!rec && empty) {
        rec = empty;
        *rec = (struct pool_rec){.pool = pool, .graph = graph, .dev = dev};
    }
    unsigned long long before = rec ? rec->charged : 0;
    if (!ok || !rec) {
        /* Unreadable pool, or more pools than we track: keep the provisional
         * charge as the pool's (never uncharge what we cannot see). */
        if (rec)
            rec->charged += provisional;
        pthread_mutex_unlock(&mu);
        return (long long)provisional;
    }
    rec->charged = reserved;
    dev = rec->dev;
    pthread_mutex_unlock(&mu);
    /* Region: from (before + provisional) to reserved. */
    unsigned long long had = before + provisional;
    if (reserved > had)
        gs_charge_held(dev, GPUSLICE_KIND_POOL, reserved - had);
    else if (reserved < had)
        gs_uncharge(dev, GPUSLICE_KIND_POOL, had - reserved);
    return (long long)reserved - (long long)had;
}

void gs_pool_settle(CUmemoryPool pool, int dev, unsigned long long provisional)
{
    settle(pool, 0, dev, provisional);
}

int gs_graph_settle(int dev, unsigned long long provisional)
{
    return settle(NULL, 1, dev, provisional) < 0;
}

unsigned long long gs_graph_charged(int dev)
{
    unsigned long long c = 0;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAX_POOLS; i++)
        if (same(&pools[i], NULL, 1, dev))
            c = pools[i].charged;
    pthread_mutex_unlock(&mu);
    return c;
}

void gs_pool_forget(CUmemoryPool pool)
{
    struct pool_rec gone = {0};
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAX_POOLS; i++)
        if (same(&pools[i], pool, 0, 0)) {
            gone = pools[i];
            pools[i] = (struct pool_rec){0};
            break;
        }
    pthread_mutex_unlock(&mu);
    if (gone.pool)
        gs_uncharge(gone.dev, GPUSLICE_KIND_POOL, gone.charged);
}

int gs_pools_settle_all(void)
{
    struct pool_rec seen[MAX_POOLS];
    int n = 0;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAX_POOLS; i++)
        if (pools[i].pool || pools[i].graph)
            seen[n++] = pools[i];
    pthread_mutex_unlock(&mu);
    int lowered = 0;
    for (int i = 0; i < n; i++)
        lowered |= settle(seen[i].pool, seen[i].graph, seen[i].dev, 0) < 0;
    return lowered;
}

void gs_pools_fork_child(void)
{
    /* The parent's pools are the parent's: charged to its slot. */
    for (int i = 0; i < MAX_POOLS; i++)
        pools[i] = (struct pool_rec){0};
    pthread_mutex_init(&mu, NULL);
}
