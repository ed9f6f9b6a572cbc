/*
 * Whether a card's MPS control daemon is up, as the hook asks before it
 * admits a slice of a card in MPS mode: its control pipe under the state
 * dir (statedir.h: mps/<uuid>/pipe/control), which nvidia-cuda-mps-control
 * makes as it starts and removes as it quits. One lstat, on every start of
 * a container on an MPS card and on no other: a daemon killed without its
 * `quit` leaves the pipe behind, which `gpuslice mps status` tells apart
 * and `gpuslice mps start` clears.
 */
#ifndef GS_MPSDAEMON_H
#define GS_MPSDAEMON_H

/* 1 if the control pipe of card uuid's daemon is there (a FIFO or a
 * socket), else 0; state_dir NULL: 0. */
int gs_mps_daemon_up(const char *state_dir, const char *uuid);

#endif
