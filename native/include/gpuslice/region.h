/*
 * The shared region: one file per container, mapped by every CUDA process of
 * the container (read-write) and by the host tools (read-only, through cffi
 * from this very header: keep it plain C declarations and integer #defines,
 * no other macros, no includes, no _Atomic; fields that processes update
 * concurrently are accessed with __atomic builtins in C).
 *
 * Layout version GPUSLICE_REGION_VERSION; a reader refuses another version.
 */
#ifndef GPUSLICE_REGION_H
#define GPUSLICE_REGION_H

#define GPUSLICE_REGION_MAGIC 0x53555047
#define GPUSLICE_REGION_VERSION 7
#define GPUSLICE_MAX_DEVICES 16
#define GPUSLICE_MAX_PROCS 128
#define GPUSLICE_UUID_SIZE 96
#define GPUSLICE_LOCK_SIZE 64

/* What a charge was for; usage is kept per kind for `gpuslice status`. */
#define GPUSLICE_KIND_CONTEXT 0
#define GPUSLICE_KIND_ALLOC 1
#define GPUSLICE_KIND_VMM 2
#define GPUSLICE_KIND_POOL 3
#define GPUSLICE_KIND_ARRAY 4
#define GPUSLICE_KINDS 5

/* The state of a process's entry in procs[]. */
#define GPUSLICE_PROC_FREE 0
#define GPUSLICE_PROC_LIVE 1

/* The compute budget of one device, shared by the container's processes
 * (guarded by the region lock). Credit is GPU time in ns the container may
 * still use; it refills at core_limit percent of wall time. */
struct gpuslice_bucket {
    long long credit_ns;
    unsigned long long stamp_ns;     /* CLOCK_MONOTONIC of the last refill */
    unsigned long long charged_ns;   /* GPU time charged since the region was made */
    unsigned long long throttled_ns; /* time processes slept for the cap */
    unsigned long long launches;     /* launches seen by the limiter */
};

/* A device's caps and priority are written by whoever makes the region
 * (gpuslice-hook at a container's create, from the accountant's row; else
 * the first process, from its environment), the caps then by gpuslice-hook
 * resize only: a process never changes them, and every process of the
 * container takes them from here (docs/architecture.md, Where a cap lives). */
struct gpuslice_device {
    char uuid[GPUSLICE_UUID_SIZE]; /* "GPU-..." once a CUDA process has seen it */
    unsigned long long limit_bytes;  /* memory cap; 0 = none */
    unsigned long long total_bytes;  /* the card's memory, as the driver reported it */
    unsigned long long used_bytes;   /* sum of live entries' usage on this device */
    unsigned int core_limit;         /* percent; 0 = none */
    unsigned int priority;           /* GPUSLICE_PRIORITY_* of limits.h */
    struct gpuslice_bucket compute;
};

struct gpuslice_proc {
    int pid;                         /* in the container's pid namespace */
    unsigned int state;              /* GPUSLICE_PROC_* */
    /* The pid the driver reports for this process (the host's namespace:
     * the driver knows no other), as the process learnt it; 0 until then. */
    unsigned int host_pid;
    unsigned int reserved0;
    unsigned long long start_time;   /* /proc/<pid>/stat field 22: tells a reused pid */
    unsigned long long heartbeat_ns; /* CLOCK_MONOTONIC of the last charge or check */
    unsigned long long used[GPUSLICE_MAX_DEVICES][GPUSLICE_KINDS];
};

struct gpuslice_region {
    unsigned int magic;
    unsigned int version;
    unsigned int size;               /* sizeof(struct gpuslice_region) */
    unsigned int device_count;
    unsigned char lock[GPUSLICE_LOCK_SIZE]; /* process-shared robust pthread mutex */
    struct gpuslice_device devices[GPUSLICE_MAX_DEVICES];
    struct gpuslice_proc procs[GPUSLICE_MAX_PROCS];
};

#endif
