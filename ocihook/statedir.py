"""Paths in gpuslice's state dir, named as native/include/gpuslice/statedir.h
names them (the hook makes them, the shim reads them, the host tools here)."""
from __future__ import annotations

import os

from ocihook import cheader


def container_dir(state_dir: str, container_id: str) -> str:
    """<state_dir>/containers/<id>: what the hook made for one container."""
    return os.path.join(state_dir, cheader.string("GPUSLICE_CONTAINERS_DIR"), container_id)


def region_path(state_dir: str, container_id: str) -> str:
    """The container's shared region (region.h), as the host sees it."""
    return os.path.join(container_dir(state_dir, container_id),
                        cheader.string("GPUSLICE_REGION_FILE"))


def placement_path(state_dir: str, container_id: str) -> str:
    """The placement file: "<index> <uuid>" per card-less device."""
    return os.path.join(container_dir(state_dir, container_id),
                        cheader.string("GPUSLICE_PLACEMENT_FILE"))


def card_files_dir(state_dir: str) -> str:
    """<state_dir>/cards: the host's card files (cardfile.h)."""
    return os.path.join(state_dir, cheader.string("GPUSLICE_CARDFILES_DIR"))


def card_files_mount() -> str:
    """Where a container sees the card files: the shim's default GPUSLICE_CARD_DIR."""
    return os.path.join(cheader.string("GPUSLICE_STATE_MOUNT"),
                        cheader.string("GPUSLICE_CARDFILES_DIR"))


def mps_dir(state_dir: str, uuid: str) -> str:
    """<state_dir>/mps/<GPU UUID>: a card in MPS mode, its daemon's folders."""
    return os.path.join(state_dir, cheader.string("GPUSLICE_MPS_DIR"), uuid)


def mps_pipe_dir(state_dir: str, uuid: str) -> str:
    """Where the card's MPS control daemon listens (CUDA_MPS_PIPE_DIRECTORY)."""
    return os.path.join(mps_dir(state_dir, uuid), cheader.string("GPUSLICE_MPS_PIPE_DIR"))


def mps_log_dir(state_dir: str, uuid: str) -> str:
    """Where the card's MPS daemon and server log (CUDA_MPS_LOG_DIRECTORY)."""
    return os.path.join(mps_dir(state_dir, uuid), cheader.string("GPUSLICE_MPS_LOG_DIR"))


def mps_shm_dir(state_dir: str, uuid: str) -> str:
    """What the card's MPS daemon, its server and its clients see as /dev/shm."""
    return os.path.join(mps_dir(state_dir, uuid), cheader.string("GPUSLICE_MPS_SHM_DIR"))


def mps_control(state_dir: str, uuid: str) -> str:
    """The control daemon's pipe: there while the daemon is up (the hook looks)."""
    return os.path.join(mps_pipe_dir(state_dir, uuid), cheader.string("GPUSLICE_MPS_CONTROL"))
