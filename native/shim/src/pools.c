/*
 * Stream-ordered pools (cuMemAllocAsync and friends): what each pool holds.
 * A pool keeps memory it has freed, up to its release threshold (CuPy's
 * async pool keeps all of it), and gives it back only when trimmed or at a
 * synchronisation point. What a pool holds is on the card, so that is what
 * the charging rules (account.c) charge: each pool's reserved memory
 * (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), not what is live in it.
 *
 * This file reads what the driver says a pool holds and keeps the table of
 * what each pool was charged; account.c decides when to settle and moves
 * the region's charge by the change a record reports. The graph memory of
 * each device is one more record here, whose reservation graph_mem.c
 * computes (graph_mem.c says why).
 *
 * The table is this process's (pools are per-process objects); its mutex is
 * never held across a driver call or a charge.
 */
#define _POSIX_C_SOURCE 200809L
#include "gpuslice.h"

#include <pthread.h>

struct pool_rec {
    CUmemoryPool pool; /* NULL and not graph: free entry */
    int graph;         /* the device's graph memory (graph_mem.c): pool is NULL */
    int dev;
    unsigned long long charged; /* the reservation we last charged for */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct pool_rec pools[GS_MAX_POOLS];

static unsigned long long attr(CUmemoryPool pool, int which, int *ok)
{
    cuuint64_t v = 0;
    *ok = HAS_REAL(cuMemPoolGetAttribute) &&
          REAL(cuMemPoolGetAttribute)(pool, which, &v) == CUDA_SUCCESS;
    return v;
}

unsigned long long gs_pool_reserved(CUmemoryPool pool, int *ok)
{
    return attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, ok);
}

unsigned long long gs_pool_spare(CUmemoryPool pool)
{
    int ok_r, ok_u;
    unsigned long long reserved = attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &ok_r);
    unsigned long long used = attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &ok_u);
    return ok_r && ok_u && reserved > used ? reserved - used : 0;
}

static int same(const struct pool_rec *r, CUmemoryPool pool, int graph, int dev)
{
    return graph ? r->graph && r->dev == dev : r->pool == pool && pool;
}

long long gs_pool_record(CUmemoryPool pool, int graph, int *dev, unsigned long long reserved,
                         int ok, unsigned long long provisional)
{
    pthread_mutex_lock(&mu);
    struct pool_rec *rec = NULL, *empty = NULL;
    for (int i = 0; i < GS_MAX_POOLS && !rec; i++) {
        if (same(&pools[i], pool, graph, *dev))
            rec = &pools[i];
        else if (!pools[i].pool && !pools[i].graph && !empty)
            empty = &pools[i];
    }
    if (!rec && empty) {
        rec = empty;
        *rec = (struct pool_rec){.pool = pool, .graph = graph, .dev = *dev};
    }
    unsigned long long before = rec ? rec->charged : 0;
    if (!ok || !rec) {
        /* Unreadable pool, or more pools than we track: keep the provisional
         * charge as the pool's (never uncharge what we cannot see). */
        if (rec)
            rec->charged += provisional;
        pthread_mutex_unlock(&mu);
        return 0;
    }
    rec->charged = reserved;
    *dev = rec->dev;
    pthread_mutex_unlock(&mu);
    /* The region holds before + provisional for it; it must hold reserved. */
    return (long long)reserved - (long long)(before + provisional);
}

unsigned long long gs_graph_charged(int dev)
{
    unsigned long long c = 0;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < GS_MAX_POOLS; i++)
        if (same(&pools[i], NULL, 1, dev))
            c = pools[i].charged;
    pthread_mutex_unlock(&mu);
    return c;
}

int gs_pool_drop(CUmemoryPool pool, int *dev, unsigned long long *charged)
{
    struct pool_rec gone = {0};
    pthread_mutex_lock(&mu);
    for (int i = 0; i < GS_MAX_POOLS; i++)
        if (same(&pools[i], pool, 0, 0)) {
            gone = pools[i];
            pools[i] = (struct pool_rec){0};
            break;
        }
    pthread_mutex_unlock(&mu);
    *dev = gone.dev;
    *charged = gone.charged;
    return gone.pool != NULL;
}

int gs_pools_list(struct gs_pool_ref *out)
{
    int n = 0;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < GS_MAX_POOLS; i++)
        if (pools[i].pool || pools[i].graph)
            out[n++] = (struct gs_pool_ref){pools[i].pool, pools[i].graph, pools[i].dev};
    pthread_mutex_unlock(&mu);
    return n;
}

void gs_pools_fork_child(void)
{
    /* The parent's pools are the parent's: charged to its entry. */
    for (int i = 0; i < GS_MAX_POOLS; i++)
        pools[i] = (struct pool_rec){0};
    pthread_mutex_init(&mu, NULL);
}
