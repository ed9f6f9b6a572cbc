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
