"""A reservation through gpuslice-hook, and what Nomad's task driver is told.

Reserve admits the slice with the hook's own admission (``gpuslice-hook
admit``: the C rules, one transaction, the same write lock as every
container's create hook), so Nomad and a container started by hand can never
both have the last room. The row is held under ``claim-<token>`` with the
plugin's pid (a reservation of a plugin that died is reclaimed by the next
admission, as a dead container's is) until the task's container takes it
over: its env carries ``GPUSLICE_CLAIM=<token>`` and its create hook renames
the row to itself (native/hook/hook/claim.h). The row's id is
``claim-<SHA-256 of the token>``: ids are shown (the exporter's labels,
``gpuslice status``, events), the token must not be, and the hash does not
give it back. A claim no container took within ``claim_timeout`` is given
back (``gpuslice-hook release``): Nomad's device API has no unreserve, so an
allocation that never started would otherwise hold its slice while the
plugin lives. Only a row this plugin process made and still holds (under
the claim id it made, with its pid) is ever given back: the prefix alone
proves nothing, since some starters pick their container's id.

The task gets ``GPUSLICE=<card>-<profile>`` (what ``runtime = "gpuslice"``
serves: the device's CDI edits and its hooks), the token, the slice's
environment (cdi/slice_env.py: its limits and priority, as the spec gives
them), and the device nodes and mounts of the device's CDI edits, which the
docker driver applies itself (the runtime then replaces each at the same
path, as the CDI rules do).
"""
from __future__ import annotations

import hashlib
import os
import secrets
import subprocess
from dataclasses import dataclass
from typing import List, Optional, Sequence, Set, Tuple

from cdi.generate import MPS_PIPE_CONTAINER_PATH
from cdi.limits import MODE_MPS
from cdi.registry import Registry, ResolveError
from cdi import names
from cdi.slice_env import slice_env
from ocihook import cheader, hookcall
from ocihook.cdi_cache import spec_dirs
from ocihook.config import Config
from ocihook.nomad.offers import Instance
from ocihook.nomad.proto import device_pb2

CLAIM_ENV = cheader.string("GPUSLICE_CLAIM_ENV")
DRIVER_VERSION_ENV = cheader.string("GPUSLICE_ENV_DRIVER_VERSION")
CLAIM_ID_PREFIX = cheader.string("GPUSLICE_CLAIM_ID_PREFIX")
TOKEN_BYTES = cheader.constant("GPUSLICE_CLAIM_TOKEN_LEN") // 2


class ReserveError(RuntimeError):
    """A reservation that cannot be made; one line. refused: the accountant said
    no (the card is full), rather than bad input or a broken node."""

    def __init__(self, message: str, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused


def new_token() -> str:
    return secrets.token_hex(TOKEN_BYTES)


def claim_id(token: str) -> str:
    """The reservation's id for token: its hash, never the token (see above)."""
    return CLAIM_ID_PREFIX + hashlib.sha256(token.encode()).hexdigest()


def _hook(cfg: Config, args: Sequence[str]) -> "subprocess.CompletedProcess[str]":
    return hookcall.run(cfg, args, ReserveError)


_last_line = hookcall.last_line


def admit(cfg: Config, inst: Instance, token: str) -> None:
    """The slice of inst, held as claim_id(token) for this process."""
    p = inst.profile
    # On an MPS card, the request the spec's hook makes: a slice for MPS (--mps).
    res = _hook(cfg, ["admit", "--id", claim_id(token), "--device", inst.device,
                      "--card", inst.card.uuid, "--memory-mib", str(p.memory_mib),
                      "--cores", str(p.cores or 0), "--priority", p.priority,
                      "--pid", str(os.getpid())] + (["--mps"] if mps(inst) else []))
    if res.returncode != 0:
        raise ReserveError(_last_line(res.stderr), refused=res.returncode == 1)


def release(cfg: Config, container_id: str) -> bool:
    """Give back what container_id (a claim) holds; False if it held nothing
    (a container took it over meanwhile)."""
    res = _hook(cfg, ["release", "--id", container_id])
    if res.returncode == 1:
        return False
    if res.returncode != 0:
        raise ReserveError(_last_line(res.stderr))
    return True


@dataclass(frozen=True)
class Edits:
    """What the docker driver can apply of a CDI device's edits (not the hooks:
    those need runtime = "gpuslice"): device nodes and mounts, spec-wide first."""
    devices: List[device_pb2.DeviceSpec]
    mounts: List[device_pb2.Mount]
    driver_version: str


def cdi_edits(cfg: Config, device: str) -> Edits:
    """The edits of <cdi_kind>=device from the spec dirs, as runtimes find them."""
    name = names.qualified(cfg.cdi_kind, device)
    try:
        [(spec, dev)] = Registry.load(spec_dirs(cfg.spec_dir)).resolve([name])
    except ResolveError as e:
        raise ReserveError(f"{e}; run `gpuslice cdi generate`") from None
    devices, mounts, version = [], [], ""
    for edits in (spec.edits, dev.edits):
        for n in edits.device_nodes:
            devices.append(device_pb2.DeviceSpec(task_path=n.path, host_path=n.host_path or n.path,
                                                 permissions=n.permissions or "rwm"))
        for m in edits.mounts:
            mounts.append(device_pb2.Mount(task_path=m.container_path, host_path=m.host_path,
                                           read_only="ro" in m.options))
        for e in edits.env:
            key, _, value = e.partition("=")
            if key == DRIVER_VERSION_ENV:
                version = value
    return Edits(devices, mounts, version)


def mps(inst: Instance) -> bool:
    """inst is a slice of a card in MPS mode (an MPS client of the card's server)."""
    return inst.card.mode == MODE_MPS


def container_reservation(inst: Instance, token: str, edits: Edits
                          ) -> device_pb2.ContainerReservation:
    """What the task's container is given: its device, its token and the slice's
    environment (its limits and priority; on an MPS card MPS's client env, the
    card's pipes and shm folder being among the edits' mounts), as the spec gives
    a slice's."""
    envs = {"GPUSLICE": inst.device, CLAIM_ENV: token,
            **slice_env(inst.profile, MPS_PIPE_CONTAINER_PATH if mps(inst) else None)}
    return device_pb2.ContainerReservation(envs=envs, devices=edits.devices, mounts=edits.mounts)


def stale_claims(rows: Sequence[Tuple[str, Optional[int], float]], mine: Set[str], now: float,
                 timeout: float) -> List[str]:
    """Of (container id, pid, created) rows, the claims older than timeout that
    this process made (their ids in `mine`) and still holds (its pid)."""
    me = os.getpid()
    return sorted({cid for cid, pid, created in rows
                   if cid in mine and pid == me and now - created > timeout})


def reserve(cfg: Config, inst: Instance, token: Optional[str] = None
            ) -> Tuple[str, device_pb2.ContainerReservation]:
    """Admit inst's slice and say what the task gets: (token, reservation). The
    CDI device is resolved first: nothing is held for a task that could not
    start."""
    edits = cdi_edits(cfg, inst.device)
    token = token or new_token()
    admit(cfg, inst, token)
    return token, container_reservation(inst, token, edits)


def driver_version(cfg: Config) -> str:
    """The driver the node's CDI spec describes (its GPUSLICE_DRIVER_VERSION), ""
    when no spec of cdi_kind is found."""
    reg = Registry.load(spec_dirs(cfg.spec_dir))
    for name, found in sorted(reg.devices.items()):
        if name.partition("=")[0] == cfg.cdi_kind:
            for e in found.spec.edits.env:
                key, _, value = e.partition("=")
                if key == DRIVER_VERSION_ENV:
                    return value
    return ""
