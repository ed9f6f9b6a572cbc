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
 * still refuse with the API's own CUDA_ERROR_OUT_OF_MEMORY: each executable
 * graph the sum of its alloc nodes, destroyed ones until a trim, the device
 * max(reserved now, live + retired) (graph_mem.c keeps these figures).
 *
 * Instantiation needs held(after) - charged: refused if that does not fit.
 * Launch and upload need nothing (already charged): the launch path is not
 * touched. When an allocation would be refused and destroyed graphs left
 * memory in the pool, the charging rules (account.c) trim the device's
 * graph memory (what the program would have to do to get it back) and
 * settles.
 *
 * Instantiations and updates of graphs with memory nodes are serialised by
 * inst_mu, which is held across the driver's instantiate or update on
 * purpose: the room one of them was charged is settled on the graph it
 * made, and a second one admitted in between would count on the same room
 * (the driver's figure does not show a graph until it is launched). Only
 * graphs with memory nodes on a capped device take it.
 */
#define _POSIX_C_SOURCE 200809L
#include "gpuslice.h"

#include <pthread.h>
#include <stdlib.h>

#define GRAPH_GRANULE (2ull * GS_MIB)
#define MAX_DEPTH 16 /* child graphs within child graphs */

static pthread_mutex_t inst_mu = PTHREAD_MUTEX_INITIALIZER;

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
            unsigned long long b = gs_add_sat(p.bytesize, GRAPH_GRANULE - 1) & ~(GRAPH_GRANULE - 1);
            bytes[dev] = gs_add_sat(bytes[dev], b);
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
    if (exec)
        concerned |= gs_graph_mem_of(exec, op->old);
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
        unsigned long long after = gs_graph_mem_bound(d, op->now[d] - op->old[d]);
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
    gs_graph_mem_record(exec, op->old, op->now);
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
    gs_graph_mem_retire(exec);
    return r;
}

GS_API CUresult cuDeviceGraphMemTrim(CUdevice dev)
{
    gs_cuda_ready();
    if (!HAS_REAL(cuDeviceGraphMemTrim))
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = REAL(cuDeviceGraphMemTrim)(dev);
    if (r == CUDA_SUCCESS && !gs_cfg.disabled && dev >= 0 && dev < GPUSLICE_MAX_DEVICES &&
        gs_limit(dev)) {
        gs_graph_mem_trimmed(dev);
        gs_graph_settle(dev, 0);
    }
    return r;
}

void gs_graphs_fork_child(void)
{
    pthread_mutex_init(&inst_mu, NULL);
}
