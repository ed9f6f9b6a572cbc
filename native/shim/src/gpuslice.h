/*
 * Internal header of libgpuslice.so: the types and the small functions that
 * every part shares. Fast paths are static inline here; slow paths live out
 * of line in the file that owns them.
 *
 *   log.c        GS_LOG, level read once
 *   config.c     the environment, parsed once
 *   region.c     the shared region file, process entries, the robust lock
 *   ledger.c     the region's books: charge/uncharge under the region lock
 *   account.c    the charging rules: charge, settle, retry; the context charge
 *   ptrmap.c     per-process map: allocation -> (device, kind, bytes)
 *   interpose.c  finding real functions, dlsym, cuGetProcAddress, fork
 *   devices.c    the current device, card UUIDs, a card noted in the region
 *   ctx_cost.c   what the driver holds for this process (NVML), its host pid
 *   pools.c      what stream-ordered pools hold, and what each was charged
 *   graph_mem.c  what executable graphs may map (the device's graph memory)
 *   cuda_ctx.c   cuInit, contexts, what programs see (cuMemGetInfo ...)
 *   cuda_mem.c   the allocation families
 *   graphs.c     graph memory nodes: charged at instantiation
 *   nvml_hooks.c NVML memory, process and utilization queries
 *   rm_filter.c  the driver's process lists, whatever route asks for them
 *   pace.c       the compute limiter's pacer (no CUDA: simulated in tests),
 *   pace_card.c  ... the card file's seats and stamps,
 *   pace_turns.c ... the turns on a shared card,
 *   pace_side.c  ... side by side beside host-bound neighbours
 *   launch.c     kernel launches: fences, the bucket, the card file
 *   gate.c       gates: a word streams wait at, and the thread that opens it
 *   presence.c   a capped or prioritised process's presence on its cards, kept by a thread
 *   thread.c     starting the shim's own threads; the futex they wait on
 */
#ifndef GPUSLICE_INTERNAL_H
#define GPUSLICE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "gpuslice/cuda_api.h"
#include "gpuslice/limits.h"
#include "gpuslice/region.h"
#include "gpuslice/statedir.h"
#include "functions.h"

#define GS_API __attribute__((visibility("default")))
#define GS_LIKELY(x) __builtin_expect(!!(x), 1)
#define GS_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define GS_MIB (1024ull * 1024ull)

/* ------------------------------------------------------------------ log.c */

enum { GS_LOG_ERROR = 0, GS_LOG_WARN = 1, GS_LOG_INFO = 2, GS_LOG_DEBUG = 3 };
extern int gs_log_level;
/* Parse GPUSLICE_LOG's value (NULL: default warn). Returns -1 if unknown. */
int gs_log_init(const char *value);
void gs_log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Checks one int before anything is formatted: free when the level is off. */
#define GS_LOG(level, ...)                                                                    \
    do {                                                                                      \
        if (GS_UNLIKELY((level) <= gs_log_level))                                             \
            gs_log_write((level), __VA_ARGS__);                                               \
    } while (0)

/* ------------------------------------------------------------- ctx_cost.c */

unsigned int gs_driver_pid(void); /* the driver's pid for this process; 0: not known */
void gs_ctx_cost_prepare(void); /* start NVML in the background (at cuInit) */
void gs_ctx_cost_before(int dev);
void gs_ctx_cost_after(int dev);
int gs_ctx_cost_read(int dev, unsigned long long *bytes); /* 0, or -1: NVML cannot tell */
void gs_ctx_cost_fork_child(void);
extern __thread int gs_own_query; /* the shim's own NVML query: nothing filtered */

/* ------------------------------------------------------------ rm_filter.c */

/* Cut a GPU_GET_PIDS answer (an NVOS54 control) to the pids in keep: the
 * number of pids taken out, or -1 if its size is unknown (then it is
 * refused: status set). Other controls are left alone (0). */
int gs_rm_filter(void *control, const unsigned int *keep, int n);
/* The container's processes as the driver knows them (this one first). */
int gs_container_driver_pids(unsigned int *out, int cap);

/* --------------------------------------------------------------- config.c */

struct gs_config {
    int disabled;    /* GPUSLICE_DISABLE=1: every wrapper calls the real function */
    int fail_closed; /* a malformed limit: every allocation is refused */
    int any_limit;   /* some memory limit was given */
    unsigned long long mem_limit[GPUSLICE_MAX_DEVICES]; /* 0 = none */
    unsigned int core_limit[GPUSLICE_MAX_DEVICES];      /* percent; 0 = none */
    int any_core;    /* some compute cap was given */
    int compute_turns; /* tenants of a card take turns (GPUSLICE_COMPUTE_TURNS=0: they do not) */
    int compute_gates; /* an uncapped process waits for turns on the GPU (GPUSLICE_COMPUTE_GATES=1) */
    int compute_side;  /* an uncapped process that seldom waits for its work launches through capped turns (GPUSLICE_COMPUTE_SIDE=0: it does not) */
    unsigned int priority; /* GPUSLICE_PRIORITY_* (GPUSLICE_PRIORITY), the container's own claim */
    unsigned long long context_reserve;
    char state_dir[512];
    char card_dir[512]; /* card files: what every tenant of a card shares */
    /* The cards the accountant placed a card-less container on (<state_dir>/card). */
    int placed_count;
    char placed[GPUSLICE_MAX_DEVICES][GPUSLICE_UUID_SIZE];
};
extern struct gs_config gs_cfg;

/* "4GiB", "4096MiB", "4g", "512m", "1073741824". 0 ok, -1 malformed. */
int gs_parse_size(const char *text, unsigned long long *out);
/* Read the environment into *cfg; reports each malformed variable once. */
void gs_config_load(struct gs_config *cfg);
/* The value of the last NAME= entry of the environment (docs/architecture.md,
 * "one env entry a name"), NULL if none. */
const char *gs_env_last(const char *name);
/* The cards the accountant placed the container on, into cfg->placed; writes
 * them joined by commas to out. Returns their number, 0 if none. */
int gs_placement_load(struct gs_config *cfg, char *out, size_t len);

/* ------------------------------------------------------------ interpose.c */

enum {
#define GS_ENUM(lib, name, ret, params) GS_FN_##name,
    GS_FUNCTIONS(GS_ENUM, GS_ENUM)
#undef GS_ENUM
    GS_FN_COUNT
};

/* Typed pointers to the real functions, and our wrappers' prototypes. */
#define GS_TYPEDEF(lib, name, ret, params) typedef ret(*gs_##name##_fn) params;
GS_FUNCTIONS(GS_TYPEDEF, GS_TYPEDEF)
#undef GS_TYPEDEF
#define GS_PROTO(lib, name, ret, params) GS_API ret name params;
#define GS_NOPROTO(lib, name, ret, params)
GS_FUNCTIONS(GS_PROTO, GS_NOPROTO)
#undef GS_PROTO
#undef GS_NOPROTO

/* Written once before the matching ready flag is published (release). */
extern void *gs_real[GS_FN_COUNT];
#define REAL(name) ((gs_##name##_fn)gs_real[GS_FN_##name])
#define HAS_REAL(name) (gs_real[GS_FN_##name] != NULL)

extern int gs_cuda_ready_flag, gs_nvml_ready_flag;
void gs_cuda_init_slow(void);
void gs_nvml_init_slow(void);
void gs_core_init(void);

static inline void gs_cuda_ready(void)
{
    if (GS_UNLIKELY(!__atomic_load_n(&gs_cuda_ready_flag, __ATOMIC_ACQUIRE)))
        gs_cuda_init_slow();
}

static inline void gs_nvml_ready(void)
{
    if (GS_UNLIKELY(!__atomic_load_n(&gs_nvml_ready_flag, __ATOMIC_ACQUIRE)))
        gs_nvml_init_slow();
}

/* The wrapper for a real function pointer, or the pointer itself. */
void *gs_wrapper_for(void *real);

/* --------------------------------------------------------------- region.c */

unsigned long long gs_now_ns(void); /* CLOCK_MONOTONIC */
/* A detached thread of the shim's, named, every signal blocked in it; 0, or -1. */
int gs_thread_start(void *(*fn)(void *), void *arg, const char *name);
/* Sleep while *word is `seen`, at most ns (GS_FUTEX_FOREVER: unbounded);
 * shared: the word lies in a file others map too (the card file). A wake-up
 * proves nothing: the caller looks again. */
#define GS_FUTEX_FOREVER (~0ull)
void gs_futex_wait(unsigned *word, unsigned seen, int shared, unsigned long long ns);
/* Wake every waiter on *word. */
void gs_futex_wake(unsigned *word, int shared);
/* A random id, never 0: a process's card-file token. */
unsigned long long gs_unique_id(void);

/* The region, opened on first use (never NULL: a private one as fallback). */
struct gpuslice_region *gs_region_open_slow(void);

/* A file of `size` bytes shared by processes: opened (made if missing), locked
 * with flock so that one process at a time creates or checks it, an empty one
 * grown to size, mapped read-write. in_shared_dir: it lives in a folder every
 * tenant writes (the card files): no link is followed, only a regular file
 * will do, and a new one is made writable by every user. GS_MAP_OK: *out is
 * the mapping and *fd holds the lock; the caller checks or initialises the
 * contents, then calls gs_map_done(*fd). Otherwise nothing is held, and errno
 * says why: GS_MAP_NO_FILE (open failed), GS_MAP_BAD_SIZE (*size_found is
 * the file's size), GS_MAP_ERROR (errno 0: not a regular file). */
enum { GS_MAP_OK, GS_MAP_NO_FILE, GS_MAP_BAD_SIZE, GS_MAP_ERROR };
int gs_map_locked(const char *path, size_t size, int in_shared_dir, void **out, int *fd,
                  long long *size_found);
void gs_map_done(int fd);
extern struct gpuslice_region *gs_region_ptr;
static inline struct gpuslice_region *gs_region(void)
{
    struct gpuslice_region *r = __atomic_load_n(&gs_region_ptr, __ATOMIC_ACQUIRE);
    return GS_LIKELY(r != NULL) ? r : gs_region_open_slow();
}

int gs_region_lock(struct gpuslice_region *r); /* 0, or -1: refuse */
void gs_region_unlock(struct gpuslice_region *r);
/* With the lock held: this process's entry, taken on first use; -1 if full. */
int gs_proc_entry_locked(struct gpuslice_region *r);
/* With the lock held: free the entries of dead processes. */
void gs_reclaim_locked(struct gpuslice_region *r);
void gs_region_init(struct gpuslice_region *r, const struct gs_config *cfg);
unsigned long long gs_proc_start_time(int pid); /* 0: unknown */

/* --------------------------------------------------------------- ledger.c */

enum { GS_UNCAPPED = 0, GS_CHARGED = 1, GS_DENIED = 2 };
/* Check and charge as one step; GS_UNCAPPED: dev has no cap, nothing done. */
int gs_charge(int dev, int kind, unsigned long long bytes);
void gs_charge_held(int dev, int kind, unsigned long long bytes); /* no check: already held */
void gs_uncharge(int dev, int kind, unsigned long long bytes);

/* ---------------------------------------------------------------- pools.c */
/* What stream-ordered pools hold (the charging rules charge it). */
#define GS_MAX_POOLS 64
unsigned long long gs_pool_reserved(CUmemoryPool pool, int *ok); /* ok: the driver said */
unsigned long long gs_pool_spare(CUmemoryPool pool); /* reserved - used; 0 if unknown */
/* Record that a pool (graph: the device's graph memory) holds `reserved`
 * (ok 0: unknown; the provisional charge is then kept as the pool's).
 * Returns the change the region's charge must make: reserved - (what was
 * charged + provisional); *dev: the pool's device. */
long long gs_pool_record(CUmemoryPool pool, int graph, int *dev, unsigned long long reserved,
                         int ok, unsigned long long provisional);
unsigned long long gs_graph_charged(int dev);
/* A destroyed pool's record dropped: 1, with its device and charge. */
int gs_pool_drop(CUmemoryPool pool, int *dev, unsigned long long *charged);
struct gs_pool_ref {
    CUmemoryPool pool;
    int graph;
    int dev;
};
int gs_pools_list(struct gs_pool_ref *out); /* out: GS_MAX_POOLS entries */
void gs_pools_fork_child(void);

/* ------------------------------------------------------------ graph_mem.c */
/* What executable graphs may map per device: live and destroyed graphs. */
unsigned long long gs_add_sat(unsigned long long a, unsigned long long b);
/* What the device's graph memory may hold at most (ok: 1). */
unsigned long long gs_graph_held(int dev, int *ok);
/* What the driver has mapped of the device's graph memory (its pool's
 * reservation); 0, with no driver call, while none is charged. */
unsigned long long gs_graph_mapped(int dev);
/* What of the device's graph memory charge is not `mapped` yet. */
unsigned long long gs_graph_ahead(int dev, unsigned long long mapped);
/* live + retired on dev, plus `more`. */
unsigned long long gs_graph_mem_bound(int dev, unsigned long long more);
/* What `exec` holds per device into bytes: 1 if it is recorded. */
int gs_graph_mem_of(CUgraphExec exec, unsigned long long *bytes);
/* `exec` was instantiated or updated from old to now bytes per device. */
void gs_graph_mem_record(CUgraphExec exec, const unsigned long long *old,
                         const unsigned long long *now);
void gs_graph_mem_retire(CUgraphExec exec); /* destroyed: held until a trim */
void gs_graph_mem_trimmed(int dev);         /* after a trim of dev */
/* Trim every device that destroyed graphs left memory on: a bit per device
 * trimmed (the caller settles them). */
unsigned gs_graph_mem_trim_retired(void);
void gs_graph_mem_fork_child(void);

/* -------------------------------------------------------------- account.c */
/* The charging rules. */

/* Brackets around every charge-then-driver-call and forget-then-free, so a
 * settle can tell that nothing of this process is half done. */
void gs_mem_op_begin(void);
void gs_mem_op_end(void);
/* gs_charge, with the context's headroom near the cap; if refused, stale
 * charges are settled and it is tried once more. */
int gs_charge_settling(int dev, int kind, unsigned long long bytes);
/* Stream-ordered pools are charged what they hold (their reserved memory). */
int gs_pool_admit(CUmemoryPool pool, int dev, unsigned long long bytes,
                  unsigned long long *provisional);
void gs_pool_settle(CUmemoryPool pool, int dev, unsigned long long provisional);
int gs_pools_settle_all(void); /* 1 if any charge went down */
void gs_pool_forget(CUmemoryPool pool); /* destroyed: what it held is gone */
/* The device's graph memory, settled like a pool: moved to gs_graph_held. */
int gs_graph_settle(int dev, unsigned long long provisional); /* 1 if it went down */
/* A context on dev: gs_ctx_open before the driver makes it (the first is
 * charged the reserve; CUDA_ERROR_OUT_OF_MEMORY if it does not fit), then
 * gs_ctx_opened with whether it did; gs_ctx_closed when one is destroyed. */
CUresult gs_ctx_open(int dev);
void gs_ctx_opened(int dev, int made);
void gs_ctx_closed(int dev);
/* The context charge moved to what the driver holds for this process beyond
 * its tracked allocations; 1 if it went down. _due: only if SETTLE_NS passed. */
int gs_ctx_settle(int dev);
/* Raised to the driver's figure if that is more; never lowered (far from
 * the cap the fixed charge stays: headroom for the context's own growth). */
void gs_ctx_settle_up(int dev);
void gs_ctx_settle_due(int dev);
/* Near the cap: room for the driver's own share of an allocation, charged
 * to the context (GS_DENIED: none); the settle follows at gs_mem_op_end. */
int gs_ctx_headroom(int dev, unsigned long long bytes);
/* Memory the context is about to take (a raised limit): charged to it now,
 * checked against the cap (GS_DENIED), settled at gs_mem_op_end;
 * gs_ctx_shrink gives it back if the driver refused. */
int gs_ctx_grow(int dev, unsigned long long bytes);
void gs_ctx_shrink(int dev, unsigned long long bytes);
void gs_account_fork_prepare(void);
void gs_account_fork_parent(void);
void gs_account_fork_child(void);

/* --------------------------------------------------------------- graphs.c */
void gs_graphs_fork_child(void);

static inline unsigned long long gs_limit(int dev)
{
    if (dev < 0 || dev >= GPUSLICE_MAX_DEVICES)
        return 0;
    return __atomic_load_n(&gs_region()->devices[dev].limit_bytes, __ATOMIC_RELAXED);
}

static inline unsigned long long gs_used(int dev)
{
    return __atomic_load_n(&gs_region()->devices[dev].used_bytes, __ATOMIC_RELAXED);
}

/* -------------------------------------------------------------- ptrmap.c */

enum { GS_NS_PTR = 1, GS_NS_VMM, GS_NS_ARRAY, GS_NS_MIPMAP, GS_NS_CTX, GS_NS_VMAP };
struct gs_alloc {
    int dev;
    int kind;
    unsigned long long bytes;
    CUmemoryPool pool; /* stream-ordered allocations: the pool they came from */
    /* VMM handles: how many mappings use it, and whether it was released
     * (the driver frees it with the last mapping). Mappings (GS_NS_VMAP,
     * keyed by address): the handle they map, bytes = their size. */
    unsigned int maps;
    int released;
    CUmemGenericAllocationHandle handle;
};
int gs_ptrmap_put(int ns, uint64_t key, const struct gs_alloc *a); /* 0, -1: no memory */
int gs_ptrmap_take(int ns, uint64_t key, struct gs_alloc *out);    /* 1 found, 0 not */
size_t gs_ptrmap_count(void);
void gs_ptrmap_fork_prepare(void);
void gs_ptrmap_fork_parent(void);
void gs_ptrmap_fork_child(void);

/* -------------------------------------------------------------- devices.c */

/* Record the card's UUID and total in the region the first time it is seen. */
void gs_device_note(int dev);
void gs_format_uuid(const CUuuid *u, char *out, size_t len); /* "GPU-...", as NVML names cards */
/* The current context's device, through the real driver; -1 if none. */
int gs_current_device(void);

/* -------------------------------------------------------------- launch.c */

/* -1: not decided yet, 0: no pacing in this process, 1: capped, 2: watching
 * the card files for a capped neighbour. */
extern int gs_pace_mode;
int gs_pace_wanted_slow(int mode);
/* One relaxed load on the path of a process that is never paced. */
static inline int gs_pace_wanted(void)
{
    int m = __atomic_load_n(&gs_pace_mode, __ATOMIC_RELAXED);
    if (GS_LIKELY(m == 0))
        return 0;
    return gs_pace_wanted_slow(m);
}
/* Whether launch wrappers are worth handing out at all (known at load). */
int gs_pace_possible(void);
int gs_is_paced_fn(int index);
void gs_launch_fork_child(void);

#endif
