/*
 * The names in gpuslice's state dir, shared by the hook (which makes them),
 * the shim (which reads them inside the container) and the host tools
 * (ocihook/cheader.py reads this header). Plain C: integer #defines and
 * #defines of one string literal, nothing else.
 *
 * On the host, <state_dir> (configuration key state_dir) holds:
 *   containers/<id>/            one folder per admitted container, made at
 *                               admission and removed with its reservation
 *   containers/<id>/region      the shim's shared region (region.h)
 *   containers/<id>/placement   where its card-less devices were placed
 *   containers/<id>/cards       mount point: the host's cards/ bound here
 *   cards/<GPU UUID>            the card files (cardfile.h), mode 01777
 *   mps/<GPU UUID>/pipe/        a card in MPS mode: its control daemon's
 *                               pipes (CUDA_MPS_PIPE_DIRECTORY); the daemon
 *                               is up while pipe/control is there
 *   mps/<GPU UUID>/log/         its logs (CUDA_MPS_LOG_DIRECTORY)
 *   mps/<GPU UUID>/shm/         what the daemon and its server see as
 *                               /dev/shm, and so do the card's clients
 * Inside the container, containers/<id>/ is mounted at GPUSLICE_STATE_MOUNT.
 */
#ifndef GPUSLICE_STATEDIR_H
#define GPUSLICE_STATEDIR_H

#define GPUSLICE_STATE_MOUNT "/run/gpuslice"
#define GPUSLICE_CONTAINERS_DIR "containers"
#define GPUSLICE_REGION_FILE "region"
#define GPUSLICE_CARDFILES_DIR "cards"

/* A card in MPS mode (`gpuslice mps start`, ocihook/mps.py): its folder
 * under <state_dir>, the three folders in it, and the control daemon's
 * pipe, which the hook looks for before it admits a slice of the card. */
#define GPUSLICE_MPS_DIR "mps"
#define GPUSLICE_MPS_PIPE_DIR "pipe"
#define GPUSLICE_MPS_LOG_DIR "log"
#define GPUSLICE_MPS_SHM_DIR "shm"
#define GPUSLICE_MPS_CONTROL "control"

/* The placement file: one line "<index> <GPU UUID>\n" per card-less device,
 * in the order the devices were placed; written by the hook (replaced
 * atomically), read by the shim, which takes a line only if it is exactly
 * that form. Never longer than this. */
#define GPUSLICE_PLACEMENT_FILE "placement"

/* A Slurm job's env for its container steps (ocihook/slurm/job.py writes it
 * at admission, `gpuslice slurm bind` reads it): "NAME=value\n" lines. The
 * hook removes it with the folder, at release and gc. */
#define GPUSLICE_STEP_ENV_FILE "slurm.env"
#define GPUSLICE_PLACEMENT_MAX_BYTES 65536

#endif
