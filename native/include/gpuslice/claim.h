/*
 * A claim (native/hook/hook/claim.h): a slice gpuslice-nomad-device reserved
 * for a task before its container exists, held in the accountant under the
 * container id GPUSLICE_CLAIM_ID_PREFIX + the lowercase hex SHA-256 of the
 * token, and taken over by the container's create hook when the container's
 * env carries GPUSLICE_CLAIM_ENV=token. The token: GPUSLICE_CLAIM_TOKEN_LEN
 * lowercase hex digits (128 random bits). Ids are shown to anyone who reads
 * the exporter or `gpuslice status`; the hash shows nothing of the token.
 * No container id from an OCI state may start with the prefix (the hook
 * refuses it): a starter that picks its id cannot pose as a claim. Plain C: #defines only (ocihook/cheader.py
 * reads this header for ocihook/nomad/).
 */
#ifndef GPUSLICE_CLAIM_H
#define GPUSLICE_CLAIM_H

#define GPUSLICE_CLAIM_ENV "GPUSLICE_CLAIM"
#define GPUSLICE_CLAIM_ID_PREFIX "claim-"
#define GPUSLICE_CLAIM_TOKEN_LEN 32

/* A Slurm job's slice (ocihook/slurm/job.py, docs/slurm.md), held with no
 * container at all under this prefix + the job id; like a claim's, no
 * container may take such an id, or it would pass for the job (and the
 * job's epilog would release it). */
#define GPUSLICE_SLURM_ID_PREFIX "slurm-"

#endif
