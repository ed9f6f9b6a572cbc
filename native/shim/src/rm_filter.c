/*
 * The driver's process lists, whatever route asks for them.
 *
 * NVML learns which processes use a card from the kernel driver: an RM
 * control, GPU_GET_PIDS, issued through ioctl on /dev/nvidiactl. The public
 * calls (nvmlDeviceGetComputeRunningProcesses_v*, the graphics and MPS
 * lists) and the internal export table that nvidia-smi reads its process
 * table through all end in that control (seen on driver 580: the table's
 * layout is private, this control's is the driver's published ABI). Its
 * answer is cut here to the container's own processes: the driver pids
 * that its processes recorded in the region (ctx_cost.c). NVML then asks for
 * the usage of the pids so listed only, so no route shows another tenant's
 * pids or memory. An answer whose size is not the one we know is refused
 * rather than shown.
 *
 * This hides; it does not guard. A program that calls the kernel itself, or
 * runs without the shim, sees what the driver shows, which knows no pid
 * namespaces (docs/architecture.md, threat model).
 */
#define _GNU_SOURCE /* RTLD_NEXT */
#include "gpuslice.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <string.h>
#include <sys/ioctl.h>

/* NVOS54_PARAMETERS, the RM control escape's argument (nv_escape.h, nvos.h). */
struct rm_control {
    uint32_t client, object, cmd, flags;
    uint64_t params; /* NvP64 */
    uint32_t params_size, status;
};
_Static_assert(sizeof(struct rm_control) == 32, "NVOS54_PARAMETERS");
#define RM_IOCTL_TYPE 'F'
#define RM_ESC_CONTROL 0x2a

/* NV2080_CTRL_CMD_GPU_GET_PIDS (ctrl2080gpu.h). */
#define RM_GPU_GET_PIDS 0x2080018du
#define RM_GET_PIDS_MAX 950
struct rm_get_pids {
    uint32_t id_type, id, count;
    uint32_t pids[RM_GET_PIDS_MAX];
};
_Static_assert(sizeof(struct rm_get_pids) == 3812, "NV2080_CTRL_GPU_GET_PIDS_PARAMS");
#define RM_ERR_NOT_SUPPORTED 0x56u /* NV_ERR_NOT_SUPPORTED */

static int kept(unsigned int pid, const unsigned int *keep, int n)
{
    for (int i = 0; i < n; i++)
        if (keep[i] == pid)
            return 1;
    return 0;
}

int gs_rm_filter(void *control, const unsigned int *keep, int n)
{
    struct rm_control *c = control;
    if (c->cmd != RM_GPU_GET_PIDS || c->status != 0)
        return 0;
    struct rm_get_pids *p = (struct rm_get_pids *)(uintptr_t)c->params;
    if (c->params_size != sizeof *p || !p) {
        c->status = RM_ERR_NOT_SUPPORTED;
        return -1;
    }
    uint32_t count = p->count < RM_GET_PIDS_MAX ? p->count : RM_GET_PIDS_MAX, out = 0;
    for (uint32_t i = 0; i < count; i++)
        if (kept(p->pids[i], keep, n))
            p->pids[out++] = p->pids[i];
    memset(&p->pids[out], 0, (RM_GET_PIDS_MAX - out) * sizeof p->pids[0]);
    p->count = out;
    return (int)(count - out);
}

int gs_container_driver_pids(unsigned int *out, int cap)
{
    int n = 0;
    unsigned int me = gs_driver_pid();
    if (me)
        out[n++] = me;
    struct gpuslice_region *r = gs_region();
    for (int i = 0; i < GPUSLICE_MAX_PROCS && n < cap; i++) {
        const struct gpuslice_proc *s = &r->procs[i];
        unsigned int pid = __atomic_load_n(&s->host_pid, __ATOMIC_RELAXED);
        if (pid && pid != me && __atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == GPUSLICE_PROC_LIVE)
            out[n++] = pid;
    }
    return n;
}

typedef int (*ioctl_fn)(int, unsigned long, void *);

GS_API int ioctl(int fd, unsigned long request, ...)
{
    va_list ap;
    va_start(ap, request);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    static ioctl_fn real;
    ioctl_fn f = __atomic_load_n(&real, __ATOMIC_ACQUIRE);
    if (GS_UNLIKELY(!f)) {
        f = (ioctl_fn)dlsym(RTLD_NEXT, "ioctl");
        __atomic_store_n(&real, f, __ATOMIC_RELEASE);
    }
    int rc = f(fd, request, arg);
    if (GS_LIKELY(_IOC_TYPE(request) != RM_IOCTL_TYPE || _IOC_NR(request) != RM_ESC_CONTROL ||
                  _IOC_SIZE(request) != sizeof(struct rm_control)) ||
        rc != 0 || !arg || gs_own_query)
        return rc;
    if (((struct rm_control *)arg)->cmd != RM_GPU_GET_PIDS)
        return rc;
    gs_core_init();
    if (gs_cfg.disabled)
        return rc;
    unsigned int keep[GPUSLICE_MAX_PROCS + 1];
    int n = gs_container_driver_pids(keep, GPUSLICE_MAX_PROCS + 1);
    if (gs_rm_filter(arg, keep, n) < 0)
        GS_LOG(GS_LOG_WARN, "the driver's process list has a size this shim does not know; "
               "it is hidden");
    return rc;
}
