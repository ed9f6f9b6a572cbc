/*
 * The graph memory of each device: what executable graphs may map from the
 * driver's per-device graph memory pool. graphs.c (the API family) says why
 * graph memory is charged ahead, at instantiation; this file keeps the
 * figures the charging rules (account.c) charge and settle by:
 *
 *   live     the bytes of the alloc nodes of every live executable graph
 *            (each node rounded up to 2 MiB): an upper bound of what they
 *            can map, however often they are launched, trimmed, relaunched;
 *   retired  the same for destroyed executable graphs: the pool keeps their
 *            memory until a trim, and allocations they did not free live on.
 *            After a trim, what they still hold is at most the pool's
 *            reservation, so retired = min(retired, reserved after trim);
 *   held     max(reserved now, live + retired): the device's graph memory
 *            charge (a pool record in pools.c, kind POOL).
 *
 * Beneath the charging rules: it calls the driver (the pool's reservation, a
 * trim) and reads pools.c's record, never a charge. Its mutex is never held
 * across a driver call.
 */
#define _POSIX_C_SOURCE 200809L
#include "gpuslice.h"

#include <pthread.h>
#include <stdlib.h>

struct exec_rec {
    CUgraphExec exec;
    unsigned long long bytes[GPUSLICE_MAX_DEVICES];
};

static pthread_mutex_t st_mu = PTHREAD_MUTEX_INITIALIZER;
static struct exec_rec *execs;
static size_t nexecs, cap_execs;
static unsigned long long live[GPUSLICE_MAX_DEVICES], retired[GPUSLICE_MAX_DEVICES];

unsigned long long gs_add_sat(unsigned long long a, unsigned long long b)
{
    return a + b < a ? ~0ull : a + b;
}

static unsigned long long reserved_now(int dev)
{
    cuuint64_t v = 0;
    if (!HAS_REAL(cuDeviceGetGraphMemAttribute) ||
        REAL(cuDeviceGetGraphMemAttribute)(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &v) !=
            CUDA_SUCCESS)
        return 0;
    return v;
}

unsigned long long gs_graph_held(int dev, int *ok)
{
    pthread_mutex_lock(&st_mu);
    unsigned long long bound = gs_add_sat(live[dev], retired[dev]);
    pthread_mutex_unlock(&st_mu);
    unsigned long long r = reserved_now(dev);
    *ok = 1;
    return r > bound ? r : bound;
}

unsigned long long gs_graph_mapped(int dev)
{
    /* Nothing charged, nothing mapped: no driver call on the common path. */
    return gs_graph_charged(dev) ? reserved_now(dev) : 0;
}

unsigned long long gs_graph_ahead(int dev, unsigned long long mapped)
{
    unsigned long long charged = gs_graph_charged(dev);
    return charged > mapped ? charged - mapped : 0;
}

unsigned long long gs_graph_mem_bound(int dev, unsigned long long more)
{
    pthread_mutex_lock(&st_mu);
    unsigned long long b = gs_add_sat(gs_add_sat(live[dev], retired[dev]), more);
    pthread_mutex_unlock(&st_mu);
    return b;
}

static struct exec_rec *find_locked(CUgraphExec e)
{
    for (size_t i = 0; i < nexecs; i++)
        if (execs[i].exec == e)
            return &execs[i];
    return NULL;
}

int gs_graph_mem_of(CUgraphExec exec, unsigned long long *bytes)
{
    pthread_mutex_lock(&st_mu);
    struct exec_rec *r = find_locked(exec);
    if (r)
        for (int d = 0; d < GPUSLICE_MAX_DEVICES; d++)
            bytes[d] = r->bytes[d];
    pthread_mutex_unlock(&st_mu);
    return r != NULL;
}

/* With st_mu held: the record for a new executable graph, grown on need;
 * NULL when there is no memory for it. */
static struct exec_rec *new_locked(void)
{
    if (nexecs == cap_execs) {
        size_t n = cap_execs ? cap_execs * 2 : 16;
        struct exec_rec *grown = realloc(execs, n * sizeof *grown);
        if (grown) {
            execs = grown;
            cap_execs = n;
        }
    }
    return nexecs < cap_execs ? &execs[nexecs++] : NULL;
}

void gs_graph_mem_record(CUgraphExec exec, const unsigned long long *old,
                         const unsigned long long *now)
{
    int any = 0;
    for (int d = 0; d < GPUSLICE_MAX_DEVICES; d++)
        any |= now[d] != 0;
    pthread_mutex_lock(&st_mu);
    struct exec_rec *rec = find_locked(exec);
    if (!rec && any)
        rec = new_locked();
    if (rec || !any) {
        for (int d = 0; d < GPUSLICE_MAX_DEVICES; d++) {
            /* What an update dropped stays in the pool until a trim. */
            live[d] = live[d] - old[d] + now[d];
            if (old[d] > now[d])
                retired[d] = gs_add_sat(retired[d], old[d] - now[d]);
        }
        if (rec && any) {
            rec->exec = exec;
            for (int d = 0; d < GPUSLICE_MAX_DEVICES; d++)
                rec->bytes[d] = now[d];
        } else if (rec) { /* updated to a graph without memory nodes */
            *rec = execs[--nexecs];
        }
    } else {
        /* No room to remember it: its memory stays charged for good. */
        for (int d = 0; d < GPUSLICE_MAX_DEVICES; d++)
            retired[d] = gs_add_sat(retired[d], now[d] - old[d]);
        GS_LOG(GS_LOG_WARN, "out of memory tracking a graph; its memory stays charged");
    }
    pthread_mutex_unlock(&st_mu);
}

void gs_graph_mem_retire(CUgraphExec exec)
{
    /* Its memory stays in the device's pool until a trim: still charged. */
    pthread_mutex_lock(&st_mu);
    struct exec_rec *rec = find_locked(exec);
    if (rec) {
        for (int d = 0; d < GPUSLICE_MAX_DEVICES; d++) {
            live[d] -= rec->bytes[d];
            retired[d] = gs_add_sat(retired[d], rec->bytes[d]);
        }
        *rec = execs[--nexecs];
    }
    pthread_mutex_unlock(&st_mu);
}

void gs_graph_mem_trimmed(int dev)
{
    unsigned long long r = reserved_now(dev);
    pthread_mutex_lock(&st_mu);
    if (retired[dev] > r)
        retired[dev] = r;
    pthread_mutex_unlock(&st_mu);
}

unsigned gs_graph_mem_trim_retired(void)
{
    unsigned trimmed = 0;
    for (int d = 0; d < GPUSLICE_MAX_DEVICES; d++) {
        pthread_mutex_lock(&st_mu);
        int some = retired[d] != 0;
        pthread_mutex_unlock(&st_mu);
        if (some && HAS_REAL(cuDeviceGraphMemTrim) &&
            REAL(cuDeviceGraphMemTrim)(d) == CUDA_SUCCESS) {
            gs_graph_mem_trimmed(d);
            trimmed |= 1u << d;
        }
    }
    return trimmed;
}

void gs_graph_mem_fork_child(void)
{
    /* The parent's graphs are the parent's: charged to its entry. */
    free(execs);
    execs = NULL;
    nexecs = cap_execs = 0;
    for (int d = 0; d < GPUSLICE_MAX_DEVICES; d++)
        live[d] = retired[d] = 0;
    pthread_mutex_init(&st_mu, NULL);
}
