/*
 * Interposition: how programs reach our wrappers, and how we reach the real
 * driver.
 *
 *  - Real functions come from dlopen("libcuda.so.1"/"libnvidia-ml.so.1") +
 *    dlsym on that handle, never RTLD_NEXT: the handle lookup cannot land on
 *    us or on another preloaded library, so our calls never recurse.
 *  - Our wrappers are exported under the real names, which catches direct
 *    linking and RTLD_DEFAULT lookups through LD_PRELOAD.
 *  - dlsym itself is overridden: dlsym(<libcuda or NVML handle>, "<hooked
 *    name>") returns our wrapper. pynvml and libcudart look functions up
 *    exactly this way, and a handle lookup would otherwise bypass LD_PRELOAD.
 *  - cuGetProcAddress[_v2] is wrapped: the real one picks the variant for
 *    the version and flags, we map the pointer it returns to our wrapper of
 *    that variant. No copy of the driver's version rules.
 *
 * Init is split so that a process that never touches CUDA (a shell with the
 * shim preloaded) never loads libcuda: core (env, log, fork handlers) once,
 * CUDA on the first CUDA call, NVML on the first NVML call.
 */
#define _GNU_SOURCE /* dlvsym, RTLD_NEXT, RTLD_DEFAULT */
#include "gpuslice.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { LIB_CUDA, LIB_NVML };

void *gs_real[GS_FN_COUNT];
int gs_cuda_ready_flag, gs_nvml_ready_flag;

#define GS_NAME(lib, name, ret, params) #name,
static const char *const fn_names[GS_FN_COUNT] = {GS_FUNCTIONS(GS_NAME, GS_NAME)};
#undef GS_NAME
#define GS_LIB(lib, name, ret, params) LIB_##lib,
static const unsigned char fn_libs[GS_FN_COUNT] = {GS_FUNCTIONS(GS_LIB, GS_LIB)};
#undef GS_LIB
#define GS_WRAP(lib, name, ret, params) (void *)name,
#define GS_NOWRAP(lib, name, ret, params) NULL,
static void *const fn_wrappers[GS_FN_COUNT] = {GS_FUNCTIONS(GS_WRAP, GS_NOWRAP)};
#undef GS_WRAP
#undef GS_NOWRAP

static const char *const lib_sonames[] = {"libcuda.so.1", "libnvidia-ml.so.1"};

/* ------------------------------------------------------------- real dlsym */

typedef void *(*dlsym_fn)(void *, const char *);
static dlsym_fn real_dlsym_ptr;

/* Sanitizer runtimes call dlsym while they initialise, before they can
 * take instrumented code: what runs on that path is left uninstrumented. */
#define GS_NO_SANITIZE __attribute__((no_sanitize("thread", "address", "undefined")))

/* Needs no init and no malloc: sanitizer runtimes call dlsym very early. */
static GS_NO_SANITIZE dlsym_fn real_dlsym(void)
{
    dlsym_fn f = __atomic_load_n(&real_dlsym_ptr, __ATOMIC_ACQUIRE);
    if (GS_UNLIKELY(!f)) {
        f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
        if (!f)
            f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
        __atomic_store_n(&real_dlsym_ptr, f, __ATOMIC_RELEASE);
    }
    return f;
}

/* ------------------------------------------------------------------- init */

static void fork_prepare(void)
{
    gs_account_fork_prepare();
    gs_ptrmap_fork_prepare();
}

static void fork_parent(void)
{
    gs_ptrmap_fork_parent();
    gs_account_fork_parent();
}

static void fork_child(void)
{
    gs_ptrmap_fork_child();
    gs_pools_fork_child();
    gs_graphs_fork_child();
    gs_graph_mem_fork_child();
    gs_launch_fork_child();
    gs_ctx_cost_fork_child();
    gs_account_fork_child(); /* region.c resets its own entry (its own atfork handler) */
}

static pthread_once_t core_once = PTHREAD_ONCE_INIT;

static void core_init_once(void)
{
    const char *lvl = gs_env_last(GPUSLICE_ENV_LOG);
    if (gs_log_init(lvl) != 0)
        gs_log_write(GS_LOG_WARN, GPUSLICE_ENV_LOG "=\"%s\" is not error|warn|info|debug; using warn",
                     lvl);
    gs_config_load(&gs_cfg);
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    /* A card-less profile: CUDA sees only the card the accountant picked.
     * Before the driver's cuInit reads the variable; the placement wins over
     * a value the image set, which would name a card by its place among all. */
    char placed[GPUSLICE_MAX_DEVICES * 41]; /* "GPU-<36>" and a comma each */
    if (!gs_cfg.disabled && gs_placement_load(&gs_cfg, placed, sizeof placed) > 0) {
        const char *was = gs_env_last("CUDA_VISIBLE_DEVICES");
        if (was && strcmp(was, placed) != 0)
            GS_LOG(GS_LOG_INFO, "CUDA_VISIBLE_DEVICES=%s replaced by the placed card(s) %s", was,
                   placed);
        /* unsetenv removes every entry: the driver's getenv then finds ours. */
        unsetenv("CUDA_VISIBLE_DEVICES");
        setenv("CUDA_VISIBLE_DEVICES", placed, 1);
    }
    GS_LOG(GS_LOG_INFO, "loaded: state dir %s, %s", gs_cfg.state_dir,
           gs_cfg.disabled ? "disabled (pass-through)" : "enforcing");
}

void gs_core_init(void)
{
    pthread_once(&core_once, core_init_once);
}

static void resolve(int lib)
{
    const char *so = lib_sonames[lib];
    /* Already loaded (the usual case: the program linked or dlopened it)? */
    void *h = dlopen(so, RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        h = dlopen(so, RTLD_NOW);
    if (!h) {
        GS_LOG(GS_LOG_WARN, "cannot load %s: %s", so, dlerror());
        return;
    }
    dlsym_fn sym = real_dlsym();
    for (int i = 0; i < GS_FN_COUNT; i++)
        if (fn_libs[i] == lib)
            gs_real[i] = sym(h, fn_names[i]);
    /* The handle stays open: the pointers must outlive us. */
}

static pthread_once_t cuda_once = PTHREAD_ONCE_INIT, nvml_once = PTHREAD_ONCE_INIT;

static void cuda_init_once(void)
{
    gs_core_init();
    resolve(LIB_CUDA);
    __atomic_store_n(&gs_cuda_ready_flag, 1, __ATOMIC_RELEASE);
}

static void nvml_init_once(void)
{
    gs_core_init();
    resolve(LIB_NVML);
    __atomic_store_n(&gs_nvml_ready_flag, 1, __ATOMIC_RELEASE);
}

void gs_cuda_init_slow(void)
{
    pthread_once(&cuda_once, cuda_init_once);
}

void gs_nvml_init_slow(void)
{
    pthread_once(&nvml_once, nvml_init_once);
}

/* ------------------------------------------------------ pointer -> wrapper */

void *gs_wrapper_for(void *real)
{
    for (int i = 0; i < GS_FN_COUNT; i++)
        if (fn_wrappers[i] && gs_real[i] == real)
            return gs_is_paced_fn(i) && !gs_pace_possible() ? real : fn_wrappers[i];
    return real;
}

/* A pointer we know: one of our wrappers (a driver linked without
 * -Bsymbolic resolves its own exports through the preloaded shim, so its
 * cuGetProcAddress may hand out our wrappers), or a driver export we
 * resolved (handed out as it is when we choose so: an uncapped process's
 * launch functions). */
static int is_known(void *p)
{
    for (int i = 0; i < GS_FN_COUNT; i++)
        if (fn_wrappers[i] == p || (fn_wrappers[i] && gs_real[i] == p))
            return 1;
    return 0;
}

/* "cuMemAlloc" names the family of cuMemAlloc, cuMemAlloc_v2, ..._ptsz. */
static int names_hooked_family(const char *base)
{
    size_t n = strlen(base);
    for (int i = 0; i < GS_FN_COUNT; i++) {
        if (!fn_wrappers[i] || strncmp(fn_names[i], base, n) != 0)
            continue;
        const char *rest = fn_names[i] + n;
        if (!*rest || (rest[0] == '_' && (rest[1] == 'v' || rest[1] == 'p')))
            return 1;
    }
    return 0;
}

static void map_proc(const char *symbol, void **pfn)
{
    if (!pfn || !*pfn || gs_cfg.disabled)
        return;
    void *w = gs_wrapper_for(*pfn);
    if (w == *pfn && !is_known(w) && symbol && names_hooked_family(symbol)) {
        /* The driver handed out a pointer that is none of the exported
         * variants we resolved: we cannot tell which one it is. Say so. */
        static int warned;
        if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
            gs_log_write(GS_LOG_WARN, "cuGetProcAddress(\"%s\") returned an unknown pointer; "
                         "calls through it are not capped (logged once)", symbol);
    }
    *pfn = w;
}

GS_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                 cuuint64_t flags)
{
    gs_cuda_ready();
    if (!HAS_REAL(cuGetProcAddress))
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = REAL(cuGetProcAddress)(symbol, pfn, cudaVersion, flags);
    if (r == CUDA_SUCCESS)
        map_proc(symbol, pfn);
    return r;
}

GS_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                    cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
    gs_cuda_ready();
    if (!HAS_REAL(cuGetProcAddress_v2))
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = REAL(cuGetProcAddress_v2)(symbol, pfn, cudaVersion, flags, status);
    if (r == CUDA_SUCCESS)
        map_proc(symbol, pfn);
    return r;
}

/* ------------------------------------------------------------------ dlsym */

/* Our wrapper if `handle` is the real library and `name` a hooked row. */
static void *hooked_lookup(void *handle, const char *name)
{
    int i = 0;
    while (i < GS_FN_COUNT && !(fn_wrappers[i] && strcmp(fn_names[i], name) == 0))
        i++;
    if (i == GS_FN_COUNT)
        return NULL;
    /* Is `handle` that library? Only ask the loader about one already loaded. */
    void *lib = dlopen(lib_sonames[fn_libs[i]], RTLD_LAZY | RTLD_NOLOAD);
    if (!lib)
        return NULL;
    dlclose(lib);
    if (lib != handle)
        return NULL;
    if (fn_libs[i] == LIB_CUDA)
        gs_cuda_ready();
    else
        gs_nvml_ready();
    if (gs_cfg.disabled || !gs_real[i])
        return NULL; /* untouched, and a missing symbol stays missing */
    if (gs_is_paced_fn(i) && !gs_pace_possible())
        return NULL; /* never paced: the driver's own, nothing in between */
    return fn_wrappers[i];
}

/*
 * glibc's dlsym resolves RTLD_NEXT relative to its caller's return address.
 * The final call below must therefore be a tail call (a jump), so that the
 * real dlsym sees our caller's return address, not ours. gcc makes it one at
 * -O2; no_sanitize keeps TSan's entry/exit hooks from breaking that, and
 * tests/shim/rtld_next_*.c checks it in every build.
 */
GS_API GS_NO_SANITIZE void *dlsym(void *handle, const char *name)
{
    if (handle != RTLD_NEXT && handle != RTLD_DEFAULT &&
        ((name[0] == 'c' && name[1] == 'u') || (name[0] == 'n' && name[1] == 'v'))) {
        void *w = hooked_lookup(handle, name);
        if (w)
            return w;
    }
    return real_dlsym()(handle, name);
}
