/*
 * The limit contract: the environment a slice's processes are given (the
 * names libgpuslice.so reads, the CDI spec and the Nomad plugin write) and
 * the compute priority, as a word (the profile, the hook's --priority, the
 * accountant's column, the environment) and as its one number (the region,
 * the pacer). The one definition of each: C includes this header, Python
 * reads it through ocihook/cheader.py; tests/test_limits_contract.py fails
 * on a place that spells one of these itself. Plain C: integer #defines and
 * #defines of one string literal, nothing else.
 */
#ifndef GPUSLICE_LIMITS_H
#define GPUSLICE_LIMITS_H

/* Caps for every device; NAME_<i> for CUDA ordinal i overrides. */
#define GPUSLICE_ENV_MEMORY_LIMIT "GPUSLICE_MEMORY_LIMIT"
#define GPUSLICE_ENV_CORE_LIMIT "GPUSLICE_CORE_LIMIT"
/* HAMi's names for the same, taken when ours are not set. */
#define GPUSLICE_ENV_MEMORY_LIMIT_ALIAS "CUDA_DEVICE_MEMORY_LIMIT"
#define GPUSLICE_ENV_CORE_LIMIT_ALIAS "CUDA_DEVICE_SM_LIMIT"
/* One of the GPUSLICE_PRIORITY_*_WORD below; a region's priority holds over it. */
#define GPUSLICE_ENV_PRIORITY "GPUSLICE_PRIORITY"
/* The driver a spec was made for (spec-wide; `gpuslice cdi generate --check`
 * and the Nomad plugin read it back). */
#define GPUSLICE_ENV_DRIVER_VERSION "GPUSLICE_DRIVER_VERSION"
/* The shim's own settings (native/shim/README.md). */
#define GPUSLICE_ENV_STATE_DIR "GPUSLICE_STATE_DIR"
#define GPUSLICE_ENV_CARD_DIR "GPUSLICE_CARD_DIR"
#define GPUSLICE_ENV_CONTEXT_RESERVE "GPUSLICE_CONTEXT_RESERVE"
#define GPUSLICE_ENV_COMPUTE_TURNS "GPUSLICE_COMPUTE_TURNS"
#define GPUSLICE_ENV_COMPUTE_GATES "GPUSLICE_COMPUTE_GATES"
#define GPUSLICE_ENV_COMPUTE_SIDE "GPUSLICE_COMPUTE_SIDE"
#define GPUSLICE_ENV_LOG "GPUSLICE_LOG"
#define GPUSLICE_ENV_DISABLE "GPUSLICE_DISABLE"

/* A slice of a card in MPS mode (docs/compute-limit.md, Two modes): NVIDIA's
 * client settings, which the CDI spec gives the slice in place of the
 * pacer's GPUSLICE_ENV_CORE_LIMIT. Where the card's control daemon listens,
 * the SM share in percent (the slice's compute share), the device memory
 * cap as "<ordinal>=<MiB>M" (a second guard behind the shim's), and where
 * a client logs. */
#define GPUSLICE_ENV_MPS_PIPE_DIRECTORY "CUDA_MPS_PIPE_DIRECTORY"
#define GPUSLICE_ENV_MPS_LOG_DIRECTORY "CUDA_MPS_LOG_DIRECTORY"
#define GPUSLICE_ENV_MPS_ACTIVE_THREAD_PERCENTAGE "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
#define GPUSLICE_ENV_MPS_PINNED_DEVICE_MEM_LIMIT "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
/* What one MPS server serves on Volta and later: clients per card. The
 * hook admits at most this many containers to an MPS card (each holds one
 * client at least). */
#define GPUSLICE_MPS_MAX_CLIENTS 48
/* A card's sharing mode, as the configuration, the accountant's column and
 * every reader spell it: time slicing with card-time caps (the default),
 * or NVIDIA MPS with SM shares. */
#define GPUSLICE_MODE_TIME "time"
#define GPUSLICE_MODE_MPS "mps"

/* A container's compute priority: who of a card's tenants is served first.
 * The number is what a region stores (0 is normal, so a zeroed field is the
 * default); the word is what people and the accountant's CHECK say. */
#define GPUSLICE_PRIORITY_NORMAL 0
#define GPUSLICE_PRIORITY_HIGH 1
#define GPUSLICE_PRIORITY_LOW 2
#define GPUSLICE_PRIORITIES 3
#define GPUSLICE_PRIORITY_NORMAL_WORD "normal"
#define GPUSLICE_PRIORITY_HIGH_WORD "high"
#define GPUSLICE_PRIORITY_LOW_WORD "low"

#endif
