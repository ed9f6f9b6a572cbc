/*
 * fake_nvml.c: a fake libnvidia-ml.so.1 for tests on machines without a GPU.
 *
 * It serves the cards described by the fakegpus JSON (see fakegpus.h) through
 * NVML's C ABI, so that unmodified pynvml (and anything else that dlopens
 * libnvidia-ml.so.1) sees them. Only the entry points gpuslice needs exist;
 * a missing one shows up in pynvml as NVMLError_FunctionNotFound.
 *
 * Semantics copied from the real library because callers depend on them:
 *  - init/shutdown are reference counted; any call outside an init returns
 *    NVML_ERROR_UNINITIALIZED. The JSON is (re)read when the count leaves 0.
 *  - a bad handle is NVML_ERROR_INVALID_ARGUMENT; a too-small string buffer
 *    is NVML_ERROR_INSUFFICIENT_SIZE; a lost card answers every per-device
 *    query with NVML_ERROR_GPU_IS_LOST but can still be looked up.
 * One mutex guards all state: calls are cheap and tests call from threads.
 *
 * Events (nvmlEventSet*, nvmlDeviceRegisterEvents): a test injects them at
 * run time by appending lines to the file named by $GPUSLICE_FAKE_NVML_EVENTS
 * (FAKE_NVML_EVENTS_ENV), each line one of
 *     xid <card index> <xid>    nvmlEventTypeXidCriticalError, eventData the XID
 *     dbe <card index>          nvmlEventTypeDoubleBitEccError
 *     sbe <card index>          nvmlEventTypeSingleBitEccError
 *     lost <card index>         the card falls off the bus: from then on every
 *                               query of it, and a wait on a set it is in,
 *                               returns NVML_ERROR_GPU_IS_LOST
 * The file is read on every call while the variable is set (new complete
 * lines only); an event goes to every set that registered its card and type
 * by then, as a real driver delivers only what happens after registration.
 * No NVML header is used; the types below repeat NVML's ABI (checked by the
 * static asserts against the sizes pynvml's ctypes structures have).
 */
#define _POSIX_C_SOURCE 200809L
#include "fakegpus.h"
#include "fakeprocs.h"

/* NVML's return codes, device handle and memory structs: one declaration,
 * shared with libgpuslice.so. */
#include <gpuslice/cuda_api.h>

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))

/* ------------------------------------------------------------- NVML's ABI */

typedef enum {
    NVML_TOPOLOGY_INTERNAL = 0,
    NVML_TOPOLOGY_SINGLE = 10,
    NVML_TOPOLOGY_MULTIPLE = 20,
    NVML_TOPOLOGY_HOSTBRIDGE = 30,
    NVML_TOPOLOGY_NODE = 40,
    NVML_TOPOLOGY_SYSTEM = 50
} nvmlGpuTopologyLevel_t;

typedef enum {
    NVML_P2P_CAPS_INDEX_READ = 0,
    NVML_P2P_CAPS_INDEX_WRITE = 1,
    NVML_P2P_CAPS_INDEX_NVLINK = 2,
    NVML_P2P_CAPS_INDEX_ATOMICS = 3,
    NVML_P2P_CAPS_INDEX_PCI = 4,
    NVML_P2P_CAPS_INDEX_UNKNOWN = 5
} nvmlGpuP2PCapsIndex_t;

typedef enum {
    NVML_P2P_STATUS_OK = 0,
    NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED = 1,
    NVML_P2P_STATUS_NOT_SUPPORTED = 5
} nvmlGpuP2PStatus_t;

typedef int nvmlBrandType_t;              /* an enum in nvml.h */
typedef unsigned nvmlDeviceArchitecture_t; /* a typedef of unsigned int in nvml.h */

/* The handle is opaque to callers; ours points into g_handles. */
struct nvmlDevice_st {
    unsigned index;
};

/* The layout since NVML 9.0 (nvmlDeviceGetPciInfo_v3). */
typedef struct {
    char busIdLegacy[16];
    unsigned domain;
    unsigned bus;
    unsigned device;
    unsigned pciDeviceId;
    unsigned pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

/* The layout the _v1 and _v2 entry points were built against; old callers
 * pass a buffer this small, so those entry points must not write more. */
typedef struct {
    char busId[16];
    unsigned domain;
    unsigned bus;
    unsigned device;
    unsigned pciDeviceId;
    unsigned pciSubSystemId;
    unsigned reserved[4];
} nvmlPciInfoLegacy_t;

/* nvmlEventData_t and the event types of nvml.h. */
typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData; /* the XID for XidCriticalError, else 0 */
    unsigned gpuInstanceId;       /* 0xFFFFFFFF: no MIG instance to blame */
    unsigned computeInstanceId;
} nvmlEventData_t;

#define nvmlEventTypeSingleBitEccError 0x0000000000000001ULL
#define nvmlEventTypeDoubleBitEccError 0x0000000000000002ULL
#define nvmlEventTypePState 0x0000000000000004ULL
#define nvmlEventTypeXidCriticalError 0x0000000000000008ULL
#define nvmlEventTypeClock 0x0000000000000010ULL
/* What every fake card offers (nvmlDeviceGetSupportedEventTypes). */
#define FAKE_SUPPORTED_EVENTS                                                            \
    (nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError |                   \
     nvmlEventTypePState | nvmlEventTypeXidCriticalError | nvmlEventTypeClock)

_Static_assert(sizeof(nvmlEventData_t) == 32, "nvmlEventData_t layout");
_Static_assert(offsetof(nvmlEventData_t, gpuInstanceId) == 24, "nvmlEventData_t layout");
_Static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t layout");
_Static_assert(offsetof(nvmlPciInfo_t, busId) == 36, "nvmlPciInfo_t layout");
_Static_assert(sizeof(nvmlPciInfoLegacy_t) == 52, "legacy nvmlPciInfo_t layout");
_Static_assert(sizeof(nvmlMemory_t) == 24, "nvmlMemory_t layout");
_Static_assert(sizeof(nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t layout");
_Static_assert(nvmlMemory_v2 == 0x02000028, "nvmlMemory_v2 as in nvml.h and pynvml");

/* ------------------------------------------------------------------ state */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned g_refcount;      /* guarded by g_lock */
static struct fakegpus g_gpus;   /* valid while g_refcount > 0 */
static struct nvmlDevice_st g_handles[FAKEGPUS_MAX_GPUS];

static nvmlReturn_t leave(nvmlReturn_t rc)
{
    pthread_mutex_unlock(&g_lock);
    return rc;
}

static void read_injected(void);

/* Take the lock if initialised; on failure the lock is not held. */
static nvmlReturn_t enter(void)
{
    pthread_mutex_lock(&g_lock);
    if (g_refcount == 0)
        return leave(NVML_ERROR_UNINITIALIZED);
    read_injected();
    return NVML_SUCCESS;
}

/* The card behind a handle, or NULL for NULL, foreign or stale handles. The
 * pointer is compared as a number and never dereferenced: a caller may pass
 * anything. */
static const struct fakegpu *lookup(nvmlDevice_t dev)
{
    uintptr_t base = (uintptr_t)g_handles, p = (uintptr_t)dev;
    if (p < base || p >= base + sizeof(g_handles))
        return NULL;
    if ((p - base) % sizeof(g_handles[0]) != 0)
        return NULL;
    size_t idx = (p - base) / sizeof(g_handles[0]);
    return idx < g_gpus.count ? &g_gpus.gpus[idx] : NULL;
}

/* enter() plus a handle check: what every per-device query starts with. */
static nvmlReturn_t enter_dev(nvmlDevice_t dev, const struct fakegpu **out)
{
    nvmlReturn_t rc = enter();
    if (rc != NVML_SUCCESS)
        return rc;
    const struct fakegpu *g = lookup(dev);
    if (!g)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (g->lost)
        return leave(NVML_ERROR_GPU_IS_LOST);
    *out = g;
    return NVML_SUCCESS;
}

/* The prologue of every per-device query: declare g, or return enter_dev's error. */
#define ENTER_DEVICE(dev, g)                          \
    const struct fakegpu *g;                          \
    do {                                              \
        nvmlReturn_t enter_rc_ = enter_dev((dev), &g); \
        if (enter_rc_ != NVML_SUCCESS)                \
            return enter_rc_;                         \
    } while (0)

static nvmlReturn_t copy_out(char *dst, unsigned length, const char *src)
{
    if (!dst)
        return NVML_ERROR_INVALID_ARGUMENT;
    size_t need = strlen(src) + 1;
    if (need > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, need);
    return NVML_SUCCESS;
}

static nvmlDevice_t handle_of(unsigned idx)
{
    g_handles[idx].index = idx;
    return &g_handles[idx];
}

/* --------------------------------------------------------- init, shutdown */

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned flags)
{
    (void)flags; /* NO_GPUS / NO_ATTACH change nothing: an empty list is fine */
    pthread_mutex_lock(&g_lock);
    if (g_refcount == 0) {
        char err[1024];
        if (fakegpus_load(NULL, &g_gpus, err, sizeof(err)) != 0) {
            fprintf(stderr, "gpuslice fake libnvidia-ml.so.1: %s\n", err);
            return leave(NVML_ERROR_DRIVER_NOT_LOADED);
        }
    }
    if (g_refcount < UINT32_MAX)
        g_refcount++;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlInit_v2(void)
{
    return nvmlInitWithFlags(0);
}

EXPORT nvmlReturn_t nvmlInit(void)
{
    return nvmlInitWithFlags(0);
}

EXPORT nvmlReturn_t nvmlShutdown(void)
{
    nvmlReturn_t rc = enter();
    if (rc != NVML_SUCCESS)
        return rc;
    g_refcount--;
    return leave(NVML_SUCCESS);
}

EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
    /* Works without init, as in NVML: callers format errors from init. */
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "Operating system blocked the request";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "Library and driver versions differ";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No Data";
    case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED: return "vGPU ECC not supported";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient Resources";
    case NVML_ERROR_FREQ_NOT_SUPPORTED: return "Frequency Not Supported";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument Version Mismatch";
    case NVML_ERROR_DEPRECATED: return "Deprecated";
    case NVML_ERROR_NOT_READY: return "Not Ready";
    case NVML_ERROR_GPU_NOT_FOUND: return "GPU Not Found";
    case NVML_ERROR_INVALID_STATE: return "Invalid State";
    default: return "Unknown Error";
    }
}

/* ----------------------------------------------------------------- system */

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned length)
{
    nvmlReturn_t rc = enter();
    if (rc != NVML_SUCCESS)
        return rc;
    return leave(copy_out(version, length, g_gpus.driver_version));
}

EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned length)
{
    nvmlReturn_t rc = enter();
    if (rc != NVML_SUCCESS)
        return rc;
    /* NVML reports "<CUDA major>.<driver version>", e.g. "13.580.95.05". */
    char text[FAKEGPUS_VERSION_SIZE + 16];
    snprintf(text, sizeof(text), "%d.%s", g_gpus.cuda_major, g_gpus.driver_version);
    return leave(copy_out(version, length, text));
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    nvmlReturn_t rc = enter();
    if (rc != NVML_SUCCESS)
        return rc;
    if (!cudaDriverVersion)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *cudaDriverVersion = g_gpus.cuda_major * 1000 + g_gpus.cuda_minor * 10;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

/* ---------------------------------------------------------- handle lookup */

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *deviceCount)
{
    nvmlReturn_t rc = enter();
    if (rc != NVML_SUCCESS)
        return rc;
    if (!deviceCount)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *deviceCount = g_gpus.count;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned *deviceCount)
{
    return nvmlDeviceGetCount_v2(deviceCount);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t *device)
{
    nvmlReturn_t rc = enter();
    if (rc != NVML_SUCCESS)
        return rc;
    if (!device || index >= g_gpus.count)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *device = handle_of(index);
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    nvmlReturn_t rc = enter();
    if (rc != NVML_SUCCESS)
        return rc;
    if (!uuid || !device)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned k = 0; k < g_gpus.count; k++) {
        if (strcmp(g_gpus.gpus[k].uuid, uuid) == 0) {
            *device = handle_of(k);
            return leave(NVML_SUCCESS);
        }
    }
    return leave(NVML_ERROR_NOT_FOUND);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    nvmlReturn_t rc = enter();
    if (rc != NVML_SUCCESS)
        return rc;
    if (!pciBusId || !device)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    /* Compare numerically: NVML accepts short domains and either case. */
    unsigned dom, bus, dev, fn;
    if (fakegpus_parse_busid(pciBusId, &dom, &bus, &dev, &fn) != 0)
        return leave(NVML_ERROR_NOT_FOUND);
    for (unsigned k = 0; k < g_gpus.count; k++) {
        const struct fakegpu *g = &g_gpus.gpus[k];
        if (g->pci_domain == dom && g->pci_bus == bus && g->pci_device == dev &&
            g->pci_function == fn) {
            *device = handle_of(k);
            return leave(NVML_SUCCESS);
        }
    }
    return leave(NVML_ERROR_NOT_FOUND);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

/* ------------------------------------------------------ per-device queries */

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned *index)
{
    ENTER_DEVICE(device, g);
    if (!index)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *index = (unsigned)(g - g_gpus.gpus);
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned length)
{
    ENTER_DEVICE(device, g);
    return leave(copy_out(name, length, g->name));
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned length)
{
    ENTER_DEVICE(device, g);
    return leave(copy_out(uuid, length, g->uuid));
}

EXPORT nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned length)
{
    ENTER_DEVICE(device, g);
    return leave(copy_out(serial, length, g->serial));
}

EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned *minorNumber)
{
    ENTER_DEVICE(device, g);
    if (!minorNumber)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *minorNumber = g->minor;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    ENTER_DEVICE(device, g);
    if (!pci)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    memset(pci, 0, sizeof(*pci));
    /* NVML's legacy format has a 4-digit domain so that it fits 16 bytes. */
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.%X",
             g->pci_domain & 0xFFFF, g->pci_bus, g->pci_device, g->pci_function);
    pci->domain = g->pci_domain;
    pci->bus = g->pci_bus;
    pci->device = g->pci_device;
    pci->pciDeviceId = g->pci_device_id;
    pci->pciSubSystemId = 0;
    memcpy(pci->busId, g->pci_bus_id, sizeof(pci->busId));
    return leave(NVML_SUCCESS);
}

static nvmlReturn_t pci_info_legacy(nvmlDevice_t device, nvmlPciInfoLegacy_t *pci)
{
    ENTER_DEVICE(device, g);
    if (!pci)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    memset(pci, 0, sizeof(*pci));
    snprintf(pci->busId, sizeof(pci->busId), "%04X:%02X:%02X.%X", g->pci_domain & 0xFFFF,
             g->pci_bus, g->pci_device, g->pci_function);
    pci->domain = g->pci_domain;
    pci->bus = g->pci_bus;
    pci->device = g->pci_device;
    pci->pciDeviceId = g->pci_device_id;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfoLegacy_t *pci)
{
    return pci_info_legacy(device, pci);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfoLegacy_t *pci)
{
    return pci_info_legacy(device, pci);
}

#define MIB 1048576ull

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    ENTER_DEVICE(device, g);
    if (!memory)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    memory->total = g->memory_mib * MIB;
    memory->used = g->memory_used_mib * MIB;
    memory->free = memory->total - memory->used;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    ENTER_DEVICE(device, g);
    if (!memory)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    /* The caller states which layout it passed; refuse one we do not know. */
    if (memory->version != nvmlMemory_v2)
        return leave(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    memory->total = g->memory_mib * MIB;
    memory->reserved = 0; /* the fake driver keeps nothing back */
    memory->used = g->memory_used_mib * MIB;
    memory->free = memory->total - memory->used;
    return leave(NVML_SUCCESS);
}

/* BAR1: the fake maps nothing; a 256 GiB aperture, as an H200 has. */
EXPORT nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t *bar1)
{
    ENTER_DEVICE(device, g);
    (void)g;
    if (!bar1)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    bar1->bar1Total = 262144 * MIB;
    bar1->bar1Used = 0;
    bar1->bar1Free = bar1->bar1Total;
    return leave(NVML_SUCCESS);
}

/* The video engines: the fake's cards encode and decode nothing. */
static nvmlReturn_t engine_idle(nvmlDevice_t device, unsigned *utilization, unsigned *period_us)
{
    ENTER_DEVICE(device, g);
    (void)g;
    if (!utilization || !period_us)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *utilization = 0;
    *period_us = 167000;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned *utilization,
                                                    unsigned *samplingPeriodUs)
{
    return engine_idle(device, utilization, samplingPeriodUs);
}

EXPORT nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned *utilization,
                                                    unsigned *samplingPeriodUs)
{
    return engine_idle(device, utilization, samplingPeriodUs);
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                  nvmlUtilization_t *utilization)
{
    ENTER_DEVICE(device, g);
    if (!utilization)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    utilization->gpu = g->utilization_pct;
    utilization->memory = 0;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned *currentMode,
                                         unsigned *pendingMode)
{
    ENTER_DEVICE(device, g);
    if (!currentMode || !pendingMode)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    /* No mode change is ever pending: pending equals current. */
    *currentMode = *pendingMode = g->mig ? 1u : 0u;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major,
                                                       int *minor)
{
    ENTER_DEVICE(device, g);
    if (!major || !minor)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *major = g->cc_major;
    *minor = g->cc_minor;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned *node)
{
    ENTER_DEVICE(device, g);
    if (!node)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    /* A machine without NUMA information makes NVML say "not supported". */
    if (g->numa_node < 0)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    *node = (unsigned)g->numa_node;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *type)
{
    ENTER_DEVICE(device, g);
    if (!type)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *type = (nvmlBrandType_t)g->brand;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device,
                                              nvmlDeviceArchitecture_t *arch)
{
    ENTER_DEVICE(device, g);
    if (!arch)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *arch = g->architecture;
    return leave(NVML_SUCCESS);
}

/*
 * Two cards' links. Both handles are checked, and a lost card on either end
 * makes the query fail as on the real driver. On success the lock is held.
 */
static nvmlReturn_t enter_pair(nvmlDevice_t d1, nvmlDevice_t d2, unsigned *i1, unsigned *i2)
{
    nvmlReturn_t rc = enter();
    if (rc != NVML_SUCCESS)
        return rc;
    const struct fakegpu *a = lookup(d1), *b = lookup(d2);
    if (!a || !b)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (a->lost || b->lost)
        return leave(NVML_ERROR_GPU_IS_LOST);
    *i1 = (unsigned)(a - g_gpus.gpus);
    *i2 = (unsigned)(b - g_gpus.gpus);
    return NVML_SUCCESS;
}

/*
 * NVLink is not a level of nvmlGpuTopologyLevel_t: the real driver answers
 * this query from the PCIe tree alone and reports NVLink through other calls
 * (nvmlDeviceGetNvLinkState, nvmlDeviceGetP2PStatus with the NVLINK index),
 * which is why `nvidia-smi topo -m` needs both. On NVLink boards (HGX/DGX)
 * each GPU sits behind its own PCIe switch off a CPU root port, so the PCIe
 * answer for an NVLink pair is NODE, or SYSTEM when the two cards are known
 * to hang off different NUMA nodes. That is what we report; NVLink itself is
 * visible through nvmlDeviceGetP2PStatus below.
 */
EXPORT nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1,
                                                        nvmlDevice_t device2,
                                                        nvmlGpuTopologyLevel_t *pathInfo)
{
    unsigned a, b;
    nvmlReturn_t rc = enter_pair(device1, device2, &a, &b);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!pathInfo)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    static const nvmlGpuTopologyLevel_t levels[] = {
        [FAKEGPU_LINK_INTERNAL] = NVML_TOPOLOGY_INTERNAL,
        [FAKEGPU_LINK_SINGLE] = NVML_TOPOLOGY_SINGLE,
        [FAKEGPU_LINK_MULTIPLE] = NVML_TOPOLOGY_MULTIPLE,
        [FAKEGPU_LINK_HOSTBRIDGE] = NVML_TOPOLOGY_HOSTBRIDGE,
        [FAKEGPU_LINK_NODE] = NVML_TOPOLOGY_NODE,
        [FAKEGPU_LINK_SYSTEM] = NVML_TOPOLOGY_SYSTEM,
        [FAKEGPU_LINK_NVLINK] = NVML_TOPOLOGY_NODE,
    };
    /* A card with itself shares everything: the innermost level (the link
     * table holds INTERNAL on its diagonal). */
    unsigned link = g_gpus.link[a][b];
    nvmlGpuTopologyLevel_t level = levels[link];
    int na = g_gpus.gpus[a].numa_node, nb = g_gpus.gpus[b].numa_node;
    if (link == FAKEGPU_LINK_NVLINK && na >= 0 && nb >= 0 && na != nb)
        level = NVML_TOPOLOGY_SYSTEM;
    *pathInfo = level;
    return leave(NVML_SUCCESS);
}

/*
 * Peer-to-peer: the NVLINK index is OK only for NVLink pairs. The others
 * (read, write, atomics, PCI) work over NVLink or within one PCIe host
 * bridge; through the CPU they report what common chipsets report.
 */
EXPORT nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
                                           nvmlGpuP2PCapsIndex_t p2pIndex,
                                           nvmlGpuP2PStatus_t *p2pStatus)
{
    unsigned a, b;
    nvmlReturn_t rc = enter_pair(device1, device2, &a, &b);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!p2pStatus || (unsigned)p2pIndex > NVML_P2P_CAPS_INDEX_UNKNOWN)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    unsigned link = g_gpus.link[a][b];
    if (p2pIndex == NVML_P2P_CAPS_INDEX_NVLINK)
        *p2pStatus = g_gpus.nvlinks[a][b] ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED;
    else if (g_gpus.nvlinks[a][b] || link <= FAKEGPU_LINK_HOSTBRIDGE)
        *p2pStatus = NVML_P2P_STATUS_OK;
    else
        *p2pStatus = NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED;
    return leave(NVML_SUCCESS);
}

/*
 * Running processes: those the fake libcuda published (fakeprocs.h), with
 * their usage on this card, under the pid the fake driver gives them. Too
 * small a buffer gets the count needed and NVML_ERROR_INSUFFICIENT_SIZE, as
 * NVML does. The versions differ only in the entry layout: v1 (pid, memory),
 * v2 and v3 (plus the MIG instance ids).
 */
static nvmlReturn_t processes(nvmlDevice_t device, unsigned *infoCount, void *infos, int v1)
{
    ENTER_DEVICE(device, g);
    if (!infoCount)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    struct fakeproc found[FAKEPROCS_MAX];
    int n = fakeprocs_list(g->uuid, found, FAKEPROCS_MAX);
    if (n < 0)
        return leave(NVML_ERROR_UNKNOWN);
    if (*infoCount < (unsigned)n || (n && !infos)) {
        *infoCount = (unsigned)n;
        return leave(n ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS);
    }
    for (int i = 0; i < n; i++) {
        if (v1) {
            nvmlProcessInfo_v1_t *p = &((nvmlProcessInfo_v1_t *)infos)[i];
            p->pid = found[i].pid;
            p->usedGpuMemory = found[i].bytes;
        } else {
            nvmlProcessInfo_t *p = &((nvmlProcessInfo_t *)infos)[i];
            p->pid = found[i].pid;
            p->usedGpuMemory = found[i].bytes;
            p->gpuInstanceId = 0xFFFFFFFFu;
            p->computeInstanceId = 0xFFFFFFFFu;
        }
    }
    *infoCount = (unsigned)n;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device,
                                                         unsigned *infoCount, void *infos)
{
    return processes(device, infoCount, infos, 1);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device,
                                                            unsigned *infoCount, void *infos)
{
    return processes(device, infoCount, infos, 0);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                            unsigned *infoCount, void *infos)
{
    return processes(device, infoCount, infos, 0);
}

/* ----------------------------------------------------------------- events */

#define FAKE_NVML_EVENTS_ENV "GPUSLICE_FAKE_NVML_EVENTS"
#define SET_QUEUE 64 /* events a set holds before the oldest is dropped */

struct nvmlEventSet_st {
    struct nvmlEventSet_st *next;          /* g_sets */
    unsigned long long mask[FAKEGPUS_MAX_GPUS]; /* registered types per card */
    nvmlEventData_t queue[SET_QUEUE];
    unsigned head, count;
};
typedef struct nvmlEventSet_st *nvmlEventSet_t;

static struct nvmlEventSet_st *g_sets; /* guarded by g_lock */
static long g_injected_seen;           /* bytes of the injection file read */

/* A set this library made and has not freed; compared, not dereferenced. */
static struct nvmlEventSet_st *find_set(nvmlEventSet_t set)
{
    for (struct nvmlEventSet_st *s = g_sets; s; s = s->next)
        if (s == set)
            return s;
    return NULL;
}

static void deliver(unsigned idx, unsigned long long type, unsigned long long data)
{
    for (struct nvmlEventSet_st *s = g_sets; s; s = s->next) {
        if (!(s->mask[idx] & type))
            continue;
        if (s->count == SET_QUEUE) { /* full: the oldest goes */
            s->head = (s->head + 1) % SET_QUEUE;
            s->count--;
        }
        nvmlEventData_t *e = &s->queue[(s->head + s->count++) % SET_QUEUE];
        *e = (nvmlEventData_t){handle_of(idx), type, data, 0xFFFFFFFFu, 0xFFFFFFFFu};
    }
}

static void inject(const char *line)
{
    char what[8];
    unsigned idx;
    unsigned long long xid = 0;
    int n = sscanf(line, "%7s %u %llu", what, &idx, &xid);
    int ok = n >= 2 && idx < g_gpus.count;
    if (ok && strcmp(what, "xid") == 0 && n == 3)
        deliver(idx, nvmlEventTypeXidCriticalError, xid);
    else if (ok && strcmp(what, "dbe") == 0 && n == 2)
        deliver(idx, nvmlEventTypeDoubleBitEccError, 0);
    else if (ok && strcmp(what, "sbe") == 0 && n == 2)
        deliver(idx, nvmlEventTypeSingleBitEccError, 0);
    else if (ok && strcmp(what, "lost") == 0 && n == 2)
        g_gpus.gpus[idx].lost = true;
    else
        fprintf(stderr, "gpuslice fake libnvidia-ml.so.1: $%s: ignored line \"%s\" (not "
                "\"xid N XID\", \"dbe N\", \"sbe N\" or \"lost N\" for a card N below %u)\n",
                FAKE_NVML_EVENTS_ENV, line, g_gpus.count);
}

/* The injection file's complete lines not read yet (g_lock held). */
static void read_injected(void)
{
    const char *path = getenv(FAKE_NVML_EVENTS_ENV);
    if (!path || !path[0])
        return;
    FILE *f = fopen(path, "r");
    if (!f)
        return; /* not there yet: nothing injected */
    char line[256];
    if (fseek(f, g_injected_seen, SEEK_SET) == 0) {
        while (fgets(line, sizeof line, f)) {
            size_t len = strlen(line);
            if (len == 0 || line[len - 1] != '\n')
                break; /* a line still being written: read it next time */
            g_injected_seen += (long)len;
            line[len - 1] = '\0';
            inject(line);
        }
    }
    fclose(f);
}

EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    nvmlReturn_t rc = enter();
    if (rc != NVML_SUCCESS)
        return rc;
    if (!set)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    struct nvmlEventSet_st *s = calloc(1, sizeof *s);
    if (!s)
        return leave(NVML_ERROR_MEMORY);
    s->next = g_sets;
    g_sets = s;
    *set = s;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    nvmlReturn_t rc = enter();
    if (rc != NVML_SUCCESS)
        return rc;
    for (struct nvmlEventSet_st **p = &g_sets; *p; p = &(*p)->next)
        if (*p == set) {
            *p = set->next;
            free(set);
            return leave(NVML_SUCCESS);
        }
    return leave(NVML_ERROR_INVALID_ARGUMENT);
}

EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device,
                                                     unsigned long long *eventTypes)
{
    ENTER_DEVICE(device, g);
    (void)g;
    if (!eventTypes)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *eventTypes = FAKE_SUPPORTED_EVENTS;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                             nvmlEventSet_t set)
{
    ENTER_DEVICE(device, g);
    struct nvmlEventSet_st *s = find_set(set);
    if (!s)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    /* As NVML: a type the card does not offer fails the whole call. */
    if (eventTypes & ~FAKE_SUPPORTED_EVENTS)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    s->mask[g - g_gpus.gpus] |= eventTypes;
    return leave(NVML_SUCCESS);
}

/* Whether a card registered in s is lost (g_lock held). */
static bool set_has_lost(const struct nvmlEventSet_st *s)
{
    for (unsigned i = 0; i < g_gpus.count; i++)
        if (s->mask[i] && g_gpus.gpus[i].lost)
            return true;
    return false;
}

/* Queued events first, then a lost card; the lock is let go between looks,
 * so that other threads' calls go on while one waits. */
EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data,
                                        unsigned timeoutms)
{
    struct timespec start, now, nap = {0, 5 * 1000 * 1000};
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        nvmlReturn_t rc = enter();
        if (rc != NVML_SUCCESS)
            return rc;
        struct nvmlEventSet_st *s = find_set(set);
        if (!s || !data)
            return leave(NVML_ERROR_INVALID_ARGUMENT);
        if (s->count) {
            *data = s->queue[s->head];
            s->head = (s->head + 1) % SET_QUEUE;
            s->count--;
            return leave(NVML_SUCCESS);
        }
        if (set_has_lost(s))
            return leave(NVML_ERROR_GPU_IS_LOST);
        pthread_mutex_unlock(&g_lock);
        clock_gettime(CLOCK_MONOTONIC, &now);
        double waited_ms = (double)(now.tv_sec - start.tv_sec) * 1e3 +
                           (double)(now.tv_nsec - start.tv_nsec) / 1e6;
        if (waited_ms >= (double)timeoutms)
            return NVML_ERROR_TIMEOUT;
        nanosleep(&nap, NULL);
    }
}

EXPORT nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data,
                                     unsigned timeoutms)
{
    return nvmlEventSetWait_v2(set, data, timeoutms);
}

/* ------------------------------------------------------------- NVLink
 *
 * A card's links are numbered from 0: first those to other cards, by the
 * other card's index (topology[].nvlinks of them each), then those to
 * NVSwitches ("nvswitch"), then inactive ones up to NVML's last link
 * number. A card with no link at all answers NVML_ERROR_NOT_SUPPORTED, as a
 * card without NVLink does. The far end of a switch link is the switch's
 * PCI address: 0000:<0xE0 + switch>:00.0, the links spread over four
 * switches as on an HGX board (not a card's address: that is how a caller
 * tells a switch from a card).
 */

typedef enum { FAKE_NVML_FEATURE_DISABLED = 0, FAKE_NVML_FEATURE_ENABLED = 1 } fake_enable_state;

/* Card idx's link `link`: the peer card (*peer), a switch (*peer = -1 - the
 * switch number), or none (*peer = INT32_MIN: inactive). -1 for a link number
 * past NVML's, or a card with no link. Lock held. */
static int nvlink_end(unsigned idx, unsigned link, int *peer)
{
    unsigned total = g_gpus.nvswitch_links[idx];
    for (unsigned b = 0; b < g_gpus.count; b++)
        total += g_gpus.nvlinks[idx][b];
    if (total == 0 || link >= FAKEGPUS_MAX_NVLINKS)
        return -1;
    unsigned at = 0;
    for (unsigned b = 0; b < g_gpus.count; b++) {
        if (link < at + g_gpus.nvlinks[idx][b]) {
            *peer = (int)b;
            return 0;
        }
        at += g_gpus.nvlinks[idx][b];
    }
    if (link < at + g_gpus.nvswitch_links[idx]) {
        *peer = -1 - (int)((link - at) % 4);
        return 0;
    }
    *peer = INT32_MIN;
    return 0;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned link,
                                             fake_enable_state *isActive)
{
    ENTER_DEVICE(device, g);
    int peer;
    if (!isActive)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (nvlink_end((unsigned)(g - g_gpus.gpus), link, &peer) < 0)
        return leave(link >= FAKEGPUS_MAX_NVLINKS ? NVML_ERROR_INVALID_ARGUMENT
                                                  : NVML_ERROR_NOT_SUPPORTED);
    *isActive = peer == INT32_MIN ? FAKE_NVML_FEATURE_DISABLED : FAKE_NVML_FEATURE_ENABLED;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned link,
                                                        nvmlPciInfo_t *pci)
{
    ENTER_DEVICE(device, g);
    int peer;
    if (!pci)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (nvlink_end((unsigned)(g - g_gpus.gpus), link, &peer) < 0)
        return leave(link >= FAKEGPUS_MAX_NVLINKS ? NVML_ERROR_INVALID_ARGUMENT
                                                  : NVML_ERROR_NOT_SUPPORTED);
    if (peer == INT32_MIN) /* an inactive link has no far end */
        return leave(NVML_ERROR_NOT_SUPPORTED);
    memset(pci, 0, sizeof *pci);
    if (peer >= 0) {
        const struct fakegpu *p = &g_gpus.gpus[peer];
        pci->domain = p->pci_domain;
        pci->bus = p->pci_bus;
        pci->device = p->pci_device;
        snprintf(pci->busId, sizeof pci->busId, "%s", p->pci_bus_id);
    } else {
        pci->bus = 0xE0u + (unsigned)(-1 - peer);
        snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.%X", 0u, pci->bus, 0u, 0u);
    }
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", pci->domain,
             pci->bus, pci->device);
    return leave(NVML_SUCCESS);
}

/* The CPUs of the card's NUMA node (cpus_per_numa_node each); a card whose
 * node is unknown is near every CPU of the nodes the file names. */
EXPORT nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned cpuSetSize,
                                             unsigned long *cpuSet)
{
    ENTER_DEVICE(device, g);
    if (!cpuSet || cpuSetSize == 0)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    unsigned per = g_gpus.cpus_per_numa_node, first = 0, count = per;
    if (g->numa_node >= 0) {
        first = (unsigned)g->numa_node * per;
    } else {
        int nodes = 1;
        for (unsigned i = 0; i < g_gpus.count; i++)
            if (g_gpus.gpus[i].numa_node + 1 > nodes)
                nodes = g_gpus.gpus[i].numa_node + 1;
        count = (unsigned)nodes * per;
    }
    const unsigned bits = 8 * sizeof *cpuSet;
    memset(cpuSet, 0, cpuSetSize * sizeof *cpuSet);
    for (unsigned cpu = first; cpu < first + count && cpu / bits < cpuSetSize; cpu++)
        cpuSet[cpu / bits] |= 1UL << (cpu % bits);
    return leave(NVML_SUCCESS);
}
