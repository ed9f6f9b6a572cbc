/*
 * Graph memory nodes (cuGraphAddMemAllocNode, and stream capture of
 * cuMemAllocAsync, which makes them). Their memory comes from a per-device
 * graph memory pool of the driver, and later than the call that asks: the
 * node holds only an address; an executable graph gets physical memory when
 * it is uploaded or launched, stream-ordered; the pool keeps it after the
 * graph is destroyed until cuDeviceGraphMemTrim; a trim unmaps what no
 * running graph uses, and the next launch maps it again.
 *
 * So the charge cannot follow the driver's figure (RESERVED_MEM_CURRENT)
 * alone: a launch queued behind other work maps its memory after the call
 * returns. It is charged ahead instead, at instantiation, when the shim can
 * still refuse with the API's own CUDA_ERROR_OUT_OF_MEMORY:
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
 * Instantiation needs held(after) - charged: refused if that does not fit.
 * Launch and upload need nothing (already charged): the launch path is not
 * touched. When an allocation would be refused and destroyed graphs left
 * memory in the pool, the shim trims the device's graph memory (what the
 * program would have to do to get it back) and settles.
 *
 * Instantiations and updates of graphs with memory nodes are serialised
 * (inst_mu) so that two cannot both count on the same room; the state
 * mutex is never held across a driver call or a charge.
 */
#define _POSIX_C_SOURCE 200809L
#include "gpuslice.h"

#include <pthread.h>
#include <stdlib.h>

#define GRAPH_GRANULE (2ull * GS_MIB)
#define MAX_DEPTH 16 /* child graphs within child graphs */

struct exec_rec {
    CUgraphExec exec;
    unsigned long long bytes[GPUSLICE_MAX_DEVICES];
};

static pthread_mutex_t inst_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t st_mu = PTHREAD_MUTEX_INITIALIZER;
static struct exec_rec *execs;
static size_t nexecs, cap_execs;
static unsigned long long live[GPUSLICE_MAX_DEVICES], retired[GPUSLICE_MAX_DEVICES];

static unsigned long long add_sat(unsigned long long a, unsigned long long b)
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
    unsigned long long bound = add_sat(live[dev], retired[dev]);
    pthread_mutex_unlock(&st_mu);
    unsigned long long r = reserved_now(dev);
    *ok = 1;
    return r > bound ? r : bound;
}

unsigned long long gs_graph_ahead(int dev)
{
    unsigned long long charged = gs_graph_charged(dev);
    if (!charged)
        return 0;
    unsigned long long r = reserved_now(dev);
    return charged > r ? charged - r : 0;
}

/* Adds the alloc nodes of `g` (and of its child graphs) per device.
 * Returns -1 if one lies on a device beyond the region's. */
static int walk(CUgraph g, unsigned long long *bytes, int depth)
{
    size_t n = 0;
    if (depth > MAX_DEPTH || !HAS_REAL(cuGraphGetNodes) || !HAS_REAL(cuGraphNodeGetType) ||
        REAL(cuGraphGetNodes)(g, NULL, &n) != CUDA_SUCCESS || n == 0)
        return 0; /* nothing we can read: the driver judges the graph itself */
    CUgraphNode *nodes = malloc(n * sizeof *nodes);
    if (!nodes || REAL(cuGraphGetNodes)(g, nodes, &n) != CUDA_SUCCESS) {
        free(nodes);
        return 0;
    }
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        int type = -1;
        if (!nodes[i] || REAL(cuGraphNodeGetType)(nodes[i], &type) != CUDA_SUCCESS)
            continue;
        if (type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && HAS_REAL(cuGraphMemAllocNodeGetParams)) {
            CUDA_MEM_ALLOC_NODE_PARAMS p = {0};
            if (REAL(cuGraphMemAllocNodeGetParams)(nodes[i], &p) != CUDA_SUCCESS ||
                p.poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
                continue; /* host-located graph memory is not the card's */
            int dev = p.poolProps.location.id;
            if (dev < 0 || dev >= GPUSLICE_MAX_DEVICES) {
                rc = -1;
                break;
            }
            unsigned long long b = add_sat(p.bytesize, GRAPH_GRANULE - 1) & ~(GRAPH_GRANULE - 1);
            bytes[dev] = add_sat(bytes[dev], b);
        } else if (type == CU_GRAPH_NODE_TYPE_GRAPH && HAS_REAL(cuGraphChildGraphNodeGetGraph)) {
            CUgraph child = NULL;
            if (REAL(cuGraphChildGraphNodeGetGraph)(nodes[i], &child) == CUDA_SUCCESS && child)
                rc = walk(child, bytes, depth + 1);
        }
    }
    free(nodes);
    return rc;
}

/* One instantiation or update: what its graph's alloc nodes take, per
 * device, against what the executable graph had before. */
struct graph_op {
    int active; /* some capped device is concerned: inst_mu is held */
    unsigned long long old[GPUSLICE_MAX_DEVICES], now[GPUSLICE_MAX_DEVICES];
    unsigned long long prov[GPUSLICE_MAX_DEVICES]; /* charged ahead of the driver */
};

static struct exec_rec *find_locked(CUgraphExec e)
{
    for (size_t i = 0; i < nexecs; i++)
        if (execs[i].exec == e)
            return &execs[i];
    return NULL;
}

static void unwind(struct graph_op *op)
{
    for (int d = 0; d < GPUSLICE_MAX_DEVICES; d++)
        if (op->prov[d])
            gs_uncharge(d, GPUSLICE_KIND_POOL, op->prov[d]);
    gs_mem_op_end();
    pthread_mutex_unlock(&inst_mu);
}

/* Before the driver call: GS_DENIED, or the room is charged (op->prov)
 * and finish() must follow. `exec` is the graph being updated, or NULL. */
static int admit(struct graph_op *op, CUgraph g, CUgraphExec exec)
{
    *op = (struct graph_op){0};
    if (GS_UNLIKELY(walk(g, op->now, 0) != 0))
        return gs_cfg.any_limit ? GS_DENIED : GS_UNCAPPED;
    int concerned = 0;
    for (int d = 0; d < GPUSLICE_MAX_DEVICES; d++)
        concerned |= op->now[d] && gs_limit(d);
    if (exec) {
        pthread_mutex_lock(&st_mu);
        struct exec_rec *r = find_locked(exec);
        if (r)
            for (int d = 0; d < GPUSLICE_MAX_DEVICES; d++)
                op->old[d] = r->bytes[d];
        concerned |= r != NULL;
        pthread_mutex_unlock(&st_mu);
    }
    if (!concerned)
        return GS_UNCAPPED;
    pthread_mutex_lock(&inst_mu);
    gs_mem_op_begin();
    op->active = 1;
    for (int d = 0; d < GPUSLICE_MAX_DEVICES; d++) {
        if (op->now[d] <= op->old[d] || !gs_limit(d))
            continue;
        gs_device_note(d);
        gs_graph_settle(d, 0); /* the record exists and is current */
        int ok;
        unsigned long long held = gs_graph_held(d, &ok), charged = gs_graph_charged(d);
        pthread_mutex_lock(&st_mu);
        unsigned long long after = add_sat(add_sat(live[d], retired[d]), op->now[d] - op->old[d]);
        pthread_mutex_unlock(&st_mu);
        if (held > after)
            after = held;
        unsigned long long need = after > charged ? after - charged : 0;
        if (need && gs_charge_settling(d, GPUSLICE_KIND_POOL, need) == GS_DENIED) {
            GS_LOG(GS_LOG_INFO, "device %d: refusing a graph whose memory nodes take %llu bytes",
                   d, op->now[d]);
            unwind(op);
            return GS_DENIED;
        }
        op->prov[d] = need;
    }
    return GS_CHARGED;
}

/* After the driver call: the executable graph is recorded (or its record
 * follows the update), and each device's charge moves to what it may hold. */
static void finish(struct graph_op *op, CUresult r, CUgraphExec exec)
{
    if (!op->active)
        return;
    if (r != CUDA_SUCCESS) {
        unwind(op);
        return;
    }
    int any = 0;
    for (int d = 0; d < GPUSLICE_MAX_DEVICES; d++)
        any |= op->now[d] != 0;
    pthread_mutex_lock(&st_mu);
    struct exec_rec *rec = find_locked(exec);
    if (!rec && any && nexecs == cap_execs) {
        size_t n = cap_execs ? cap_execs * 2 : 16;
        struct exec_rec *grown = realloc(execs, n * sizeof *grown);
        if (grown) {
            execs = grown;
            cap_execs = n;
        }
    }
    if (!rec && any && nexecs < cap_execs)
        rec = &execs[nexecs++];
    if (rec || !any) {
        for (int d = 0; d < GPUSLICE_MAX_DEVICES; d++) {
            /* What an update dropped stays in the pool until a trim. */
            live[d] = live[d] - op->old[d] + op->now[d];
            if (op->old[d] > op->now[d])
                retired[d] = add_sat(retired[d], op->old[d] - op->now[d]);
        }
        if (rec && any) {
            rec->exec = exec;
            for (int d = 0; d < GPUSLICE_MAX_DEVICES; d++)
                rec->bytes[d] = op->now[d];
        } else if (rec) { /* updated to a graph without memory nodes */
            *rec = execs[--nexecs];
        }
    } else {
        /* No room to remember it: its memory stays charged for good. */
        for (int d = 0; d < GPUSLICE_MAX_DEVICES; d++)
            retired[d] = add_sat(retired[d], op->now[d] - op->old[d]);
        GS_LOG(GS_LOG_WARN, "out of memory tracking a graph; its memory stays charged");
    }
    pthread_mutex_unlock(&st_mu);
    for (int d = 0; d < GPUSLICE_MAX_DEVICES; d++)
        if (op->prov[d] || op->now[d] != op->old[d])
            gs_graph_settle(d, op->prov[d]);
    gs_mem_op_end();
    pthread_mutex_unlock(&inst_mu);
}

#define GRAPH_CALL(fn, g, exec, ph, call)                                                     \
    do {                                                                                      \
        gs_cuda_ready();                                                                      \
        if (!HAS_REAL(fn))                                                                    \
            return CUDA_ERROR_NOT_FOUND;                                                      \
        if (gs_cfg.disabled)                                                                  \
            return REAL(fn) call;                                                             \
        struct graph_op op;                                                                   \
        if (admit(&op, (g), (exec)) == GS_DENIED)                                             \
            return CUDA_ERROR_OUT_OF_MEMORY;                                                  \
        CUresult r = REAL(fn) call;                                                           \
        finish(&op, r, r == CUDA_SUCCESS ? (ph) : NULL);                                      \
        return r;                                                                             \
    } while (0)

GS_API CUresult cuGraphInstantiate(CUgraphExec *ph, CUgraph g, CUgraphNode *err, char *log,
                                   size_t len)
{
    GRAPH_CALL(cuGraphInstantiate, g, NULL, *ph, (ph, g, err, log, len));
}

GS_API CUresult cuGraphInstantiate_v2(CUgraphExec *ph, CUgraph g, CUgraphNode *err, char *log,
                                      size_t len)
{
    GRAPH_CALL(cuGraphInstantiate_v2, g, NULL, *ph, (ph, g, err, log, len));
}

GS_API CUresult cuGraphInstantiateWithFlags(CUgraphExec *ph, CUgraph g, unsigned long long flags)
{
    GRAPH_CALL(cuGraphInstantiateWithFlags, g, NULL, *ph, (ph, g, flags));
}

GS_API CUresult cuGraphInstantiateWithParams(CUgraphExec *ph, CUgraph g,
                                             CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    GRAPH_CALL(cuGraphInstantiateWithParams, g, NULL, *ph, (ph, g, params));
}

GS_API CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *ph, CUgraph g,
                                                  CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    GRAPH_CALL(cuGraphInstantiateWithParams_ptsz, g, NULL, *ph, (ph, g, params));
}

GS_API CUresult cuGraphExecUpdate(CUgraphExec exec, CUgraph g, CUgraphNode *err, int *result)
{
    GRAPH_CALL(cuGraphExecUpdate, g, exec, exec, (exec, g, err, result));
}

GS_API CUresult cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph g, void *resultInfo)
{
    GRAPH_CALL(cuGraphExecUpdate_v2, g, exec, exec, (exec, g, resultInfo));
}

GS_API CUresult cuGraphExecDestroy(CUgraphExec exec)
{
    gs_cuda_ready();
    if (!HAS_REAL(cuGraphExecDestroy))
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = REAL(cuGraphExecDestroy)(exec);
    if (r != CUDA_SUCCESS || gs_cfg.disabled)
        return r;
    /* Its memory stays in the device's pool until a trim: still charged. */
    pthread_mutex_lock(&st_mu);
    struct exec_rec *rec = find_locked(exec);
    if (rec) {
        for (int d = 0; d < GPUSLICE_MAX_DEVICES; d++) {
            live[d] -= rec->bytes[d];
            retired[d] = add_sat(retired[d], rec->bytes[d]);
        }
        *rec = execs[--nexecs];
    }
    pthread_mutex_unlock(&st_mu);
    return r;
}

/* After a trim of `dev`: destroyed graphs hold at most what the pool still
 * reserves. Returns whether the charge went down. */
static int trimmed(int dev)
{
    unsigned long long r = reserved_now(dev);
    pthread_mutex_lock(&st_mu);
    if (retired[dev] > r)
        retired[dev] = r;
    pthread_mutex_unlock(&st_mu);
    return gs_graph_settle(dev, 0);
}

GS_API CUresult cuDeviceGraphMemTrim(CUdevice dev)
{
    gs_cuda_ready();
    if (!HAS_REAL(cuDeviceGraphMemTrim))
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = REAL(cuDeviceGraphMemTrim)(dev);
    if (r == CUDA_SUCCESS && !gs_cfg.disabled && dev >= 0 && dev < GPUSLICE_MAX_DEVICES &&
        gs_limit(dev))
        trimmed(dev);
    return r;
}

int gs_graphs_trim_retired(void)
{
    int lowered = 0;
    for (int d = 0; d < GPUSLICE_MAX_DEVICES; d++) {
        pthread_mutex_lock(&st_mu);
        int some = retired[d] != 0;
        pthread_mutex_unlock(&st_mu);
        if (some && HAS_REAL(cuDeviceGraphMemTrim) &&
            REAL(cuDeviceGraphMemTrim)(d) == CUDA_SUCCESS)
            lowered |= trimmed(d);
    }
    return lowered;
}

void gs_graphs_fork_child(void)
{
    /* The parent's graphs are the parent's: charged to its slot. */
    free(execs);
    execs = NULL;
    nexecs = cap_execs = 0;
    for (int d = 0; d < GPUSLICE_MAX_DEVICES; d++)
        live[d] = retired[d] = 0;
    pthread_mutex_init(&st_mu, NULL);
    pthread_mutex_init(&inst_mu, NULL);
}
