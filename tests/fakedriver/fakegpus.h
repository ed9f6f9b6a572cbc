/*
 * fakegpus: the description of the fake GPUs that the fake NVIDIA driver
 * libraries (libnvidia-ml.so.1 now, libcuda.so.1 later) pretend to drive.
 *
 * Both fake libraries read the same JSON file so that every view of the
 * "hardware" agrees. The file is named by $GPUSLICE_FAKE_GPUS; with the
 * variable unset or empty it is FAKEGPUS_DEFAULT_PATH, so hooks that a
 * container runtime starts with a clean environment see the same cards.
 *
 * The result is plain fixed-size data (no heap pointers), so a caller can
 * keep it in a static and never worry about freeing or dangling pointers.
 * Link this file, and the hook's json.c and util.c that it reads the JSON
 * with, into each fake library with -fvisibility=hidden: both libraries may
 * be loaded into one process (beside libgpuslice.so), and their copies of
 * these functions must not interpose on each other.
 */
#ifndef GPUSLICE_FAKEGPUS_H
#define GPUSLICE_FAKEGPUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FAKEGPUS_ENV "GPUSLICE_FAKE_GPUS"
#define FAKEGPUS_DEFAULT_PATH "/run/gpuslice-fake/gpus.json"

#define FAKEGPUS_MAX_GPUS 64
/* Sized after NVML's largest buffers (the _V2 sizes), NUL included. */
#define FAKEGPUS_UUID_SIZE 96
#define FAKEGPUS_NAME_SIZE 96
#define FAKEGPUS_SERIAL_SIZE 30
#define FAKEGPUS_BUSID_SIZE 32
#define FAKEGPUS_VERSION_SIZE 80
#define FAKEGPUS_PATH_SIZE 4096

/* How two cards are connected; the values are ours, not NVML's. */
typedef enum {
    FAKEGPU_LINK_INTERNAL = 0, /* two GPUs on one board (e.g. K80) */
    FAKEGPU_LINK_SINGLE,       /* one PCIe switch between them */
    FAKEGPU_LINK_MULTIPLE,     /* several PCIe switches, no host bridge */
    FAKEGPU_LINK_HOSTBRIDGE,   /* the same host bridge */
    FAKEGPU_LINK_NODE,         /* the same NUMA node / CPU socket */
    FAKEGPU_LINK_SYSTEM,       /* across sockets (the default) */
    FAKEGPU_LINK_NVLINK        /* NVLink between the two */
} fakegpu_link;

struct fakegpu {
    char uuid[FAKEGPUS_UUID_SIZE];
    char name[FAKEGPUS_NAME_SIZE];
    char serial[FAKEGPUS_SERIAL_SIZE];
    /* Normalised to NVML's form "%08X:%02X:%02X.%X". */
    char pci_bus_id[FAKEGPUS_BUSID_SIZE];
    unsigned pci_domain, pci_bus, pci_device, pci_function;
    unsigned pci_device_id; /* (device id << 16) | vendor id */
    uint64_t memory_mib;
    uint64_t memory_used_mib;
    unsigned utilization_pct; /* "utilization_pct": what NVML says the card is busy */
    unsigned minor;
    int numa_node; /* -1: unknown */
    bool mig;
    bool lost;
    int cc_major, cc_minor;
    unsigned brand;        /* NVML's nvmlBrandType_t value */
    unsigned architecture; /* NVML's nvmlDeviceArchitecture_t value */
    bool has_context_mib;  /* "context_mib" given: what a CUDA context costs here */
    uint64_t context_mib;
};

struct fakegpus {
    char path[FAKEGPUS_PATH_SIZE]; /* the file this came from */
    char driver_version[FAKEGPUS_VERSION_SIZE];
    int cuda_major, cuda_minor;
    unsigned count;
    struct fakegpu gpus[FAKEGPUS_MAX_GPUS];
    unsigned char link[FAKEGPUS_MAX_GPUS][FAKEGPUS_MAX_GPUS]; /* fakegpu_link */
    /* NVLink (the fake NVML's topology section): links between two cards
     * (topology[].nvlinks; level "nvlink" alone is one), links from a card
     * to NVSwitches ("nvswitch": {"gpus": [...], "links": N}), and the CPUs
     * per NUMA node ("cpus_per_numa_node", default 8: node n has CPUs
     * n*N .. n*N+N-1), from which a card's CPU affinity follows. A card has
     * at most FAKEGPUS_MAX_NVLINKS links in all. */
    unsigned char nvlinks[FAKEGPUS_MAX_GPUS][FAKEGPUS_MAX_GPUS];
    unsigned char nvswitch_links[FAKEGPUS_MAX_GPUS];
    unsigned cpus_per_numa_node;
};

#define FAKEGPUS_MAX_NVLINKS 18 /* NVML_NVLINK_MAX_LINKS */

/* The file to read: $GPUSLICE_FAKE_GPUS, or the default when unset/empty. */
const char *fakegpus_path(void);

/*
 * Parse a PCI address as NVML accepts it, all numbers hexadecimal:
 * "domain:bus:device.function", "domain:bus:device" or "bus:device.function".
 * Returns 0 on success, -1 if the text is not one of those forms.
 */
int fakegpus_parse_busid(const char *text, unsigned *domain, unsigned *bus,
                         unsigned *device, unsigned *function);

/*
 * Read and check the file at `path` (NULL: fakegpus_path()) into *out.
 * Returns 0 on success. On failure returns -1 and writes one line (no
 * newline) naming the file, the key and the problem into err; *out is then
 * unspecified. Never prints: each library decides how to report.
 */
int fakegpus_load(const char *path, struct fakegpus *out, char *err, size_t errlen);

#endif
