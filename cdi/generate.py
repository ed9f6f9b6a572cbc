"""Assemble gpuslice's CDI spec from what discovery found.

Spec-wide edits (control nodes, driver libraries, tools, firmware) apply to
any device of ours. Devices:

- ``<index>`` and ``GPU-<uuid>``: a whole card, held exclusively;
- ``all``: every card, exclusively;
- ``<index>-<profile>``: a slice of one card (not on MIG cards, nor where the
  profile's memory exceeds the card's);
- ``<profile>``: a slice of whichever card the accountant picks at create time;
- ``<count>x<profile>``: a gang, that many slices of the profile, each on its
  own card, placed together at create time (all or none) by the cards'
  topology; offered from 2 up to the cards that fit the profile (at most
  MAX_GANG).

A card in MPS mode (opts.mps) is offered whole and as ``<index>-<profile>``
slices, each with NVIDIA's MPS client env in place of the pacer's compute
cap and its card's MPS pipes and /dev/shm mounted; never as a card-less
slice or in a gang, whose card is picked after the spec is written.

Slices carry the limits and the compute priority as GPUSLICE_* env
(cdi/slice_env.py), the shim (mounted and preloaded), the host's card files
(read-write: how tenants of one card see each other compete,
docs/compute-limit.md) and the create and release hooks, always: a slice
whose shim or hook is missing fails to start rather than run unlimited.
Whole cards carry the hooks too, so that the accountant sees them, but only
once the hook is installed: until then a whole card works as any CDI
whole-card device does, unaccounted (and `--check` reports the spec stale
when the hook appears). A whole card has no priority:
no one shares it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Mapping, Optional, Sequence, Tuple

from cdi import devnodes, driverfiles
from cdi.nvml import DiscoveryError, Gpu, Inventory
from cdi.limits import DRIVER_VERSION_ENV
from cdi.profiles import MAX_GANG, Profile, gang_device_name, slice_device_name
from cdi.slice_env import slice_env
from cdi.spec import ContainerEdits, Device, DeviceNode, Hook, Mount, Spec
from cdi.version import minimum_version

SHIM_CONTAINER_PATH = "/usr/lib/gpuslice/libgpuslice.so"
CARD_DIR_OPTIONS = ["rw", "nosuid", "nodev", "noexec", "bind"]
HOOK_ENV_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# A slice of a card in MPS mode: where the container sees its card's MPS
# pipes, and its /dev/shm, which is the card's MPS folder (the server maps
# what it shares with its clients there; docs/compute-limit.md, Two modes).
MPS_PIPE_CONTAINER_PATH = "/run/nvidia-mps"
MPS_SHM_CONTAINER_PATH = "/dev/shm"
MPS_MOUNT_OPTIONS = ["rw", "nosuid", "nodev", "noexec", "bind"]


@dataclass(frozen=True)
class MpsFolders:
    """A card in MPS mode: its control daemon's folders on the host (under
    the state dir, statedir.h's names, which the caller has)."""
    pipe_dir: str
    shm_dir: str


@dataclass(frozen=True)
class GenerateOptions:
    """What the spec is built from; build_spec only reads it."""
    kind: str
    profiles: Sequence[Profile]
    # The host's card files and where a container sees them (the shim's
    # default GPUSLICE_CARD_DIR): names of native/include/gpuslice/statedir.h,
    # which the caller has from ocihook.statedir (cdi/ does not import ocihook/).
    card_dir: str
    card_dir_mount: str
    driver_root: str = "/"
    dev_root: str = "/"
    sys_root: str = "/sys"
    shim_path: str = "/usr/lib/gpuslice/libgpuslice.so"
    hook_path: str = "/usr/bin/gpuslice-hook"
    # What every hook run is told (the hook reads no configuration file: its
    # start is on every container start): where things are (--database,
    # --state-dir), and for create how the shim is preloaded (--preload). The
    # admission policy is not the device's: the hook reads it from the
    # accountant.
    hook_common: List[str] = field(default_factory=list)
    hook_create: List[str] = field(default_factory=list)
    hook_installed: bool = True
    # The cards in MPS mode, by UUID: offered as <index>-<profile> slices
    # only (the pipes a slice is given are its card's, fixed in the spec).
    mps: Mapping[str, MpsFolders] = field(default_factory=dict)


def _hooks(opts: GenerateOptions, device: str, request: List[str]) -> List[Hook]:
    """createContainer admits `request` (the hook's --card/--exclusive/--memory-mib/--cores/
    --priority) under the name `device`; poststop gives it back."""
    create = ["gpuslice-hook", "create", "--device", device, *request, *opts.hook_common,
              *opts.hook_create]
    release = ["gpuslice-hook", "release", *opts.hook_common]
    return [Hook("createContainer", opts.hook_path, args=create, env=[HOOK_ENV_PATH]),
            Hook("poststop", opts.hook_path, args=release, env=[HOOK_ENV_PATH])]


def _whole(opts: GenerateOptions, name: str, nodes: List[DeviceNode],
           gpus: Sequence[Gpu]) -> Device:
    request = [a for g in gpus for a in ("--card", g.uuid)] + ["--exclusive"]
    hooks = _hooks(opts, name, request) if opts.hook_installed else []
    return Device(name, ContainerEdits(device_nodes=nodes, hooks=hooks))


def _slice(opts: GenerateOptions, name: str, nodes: List[DeviceNode], profile: Profile,
           gpu: Optional[Gpu], slices: int = 1) -> Device:
    """A slice of `gpu`, or of whichever card the accountant picks (gpu None); with
    slices > 1, a gang of that many, on as many cards as the accountant picks.
    The limits are per card: every card the container sees is capped alike."""
    mps = opts.mps.get(gpu.uuid) if gpu else None
    request = (["--card", gpu.uuid] if gpu else []) + [
        "--memory-mib", str(profile.memory_mib), "--cores", str(profile.cores or 0),
        "--priority", profile.priority] + (["--slices", str(slices)] if slices > 1 else []) \
        + (["--mps"] if mps else [])
    env = [f"{k}={v}" for k, v in
           slice_env(profile, MPS_PIPE_CONTAINER_PATH if mps else None).items()]
    env.append(f"LD_PRELOAD={SHIM_CONTAINER_PATH}")
    mounts = [Mount(opts.shim_path, SHIM_CONTAINER_PATH, options=list(driverfiles.MOUNT_OPTIONS)),
              Mount(opts.card_dir, opts.card_dir_mount, options=list(CARD_DIR_OPTIONS))]
    if mps:
        mounts += [Mount(mps.pipe_dir, MPS_PIPE_CONTAINER_PATH, options=list(MPS_MOUNT_OPTIONS)),
                   Mount(mps.shm_dir, MPS_SHM_CONTAINER_PATH, options=list(MPS_MOUNT_OPTIONS))]
    return Device(name, ContainerEdits(env=env, device_nodes=nodes, mounts=mounts,
                                       hooks=_hooks(opts, name, request)))


def _spec_edits(inv: Inventory, opts: GenerateOptions) -> ContainerEdits:
    mounts = (driverfiles.library_mounts(opts.driver_root)
              + driverfiles.binary_mounts(opts.driver_root)
              + driverfiles.firmware_mounts(opts.driver_root, inv.driver_version))
    return ContainerEdits(
        # Tells a container which driver its spec was made for; `--check` reads it back.
        env=[f"{DRIVER_VERSION_ENV}={inv.driver_version}"],
        device_nodes=devnodes.control_nodes(opts.dev_root),
        mounts=mounts,
    )


def build_spec(inv: Inventory, opts: GenerateOptions) -> Tuple[Spec, List[str]]:
    """The complete spec for this host, and what it leaves out or offers
    otherwise than asked (one line each, for the user); raises DiscoveryError
    when the host cannot back it."""
    if not inv.gpus:
        raise DiscoveryError("NVML reports no GPUs on this host; nothing to describe")
    card_nodes = {g.index: devnodes.card_nodes(g, opts.dev_root, opts.sys_root) for g in inv.gpus}
    devices: List[Device] = []
    warnings: List[str] = []
    for gpu in inv.gpus:
        devices.append(_whole(opts, str(gpu.index), card_nodes[gpu.index], [gpu]))
        devices.append(_whole(opts, gpu.uuid, card_nodes[gpu.index], [gpu]))
    devices.append(_whole(opts, "all", [n for g in inv.gpus for n in card_nodes[g.index]],
                          inv.gpus))
    if not opts.hook_installed:
        warnings.append(f"{opts.hook_path} is not installed: whole cards are offered "
                             "without the accountant's hooks; run this again once it is")
    sliceable = [g for g in inv.gpus if not g.mig]
    for lost in inv.lost:
        warnings.append(f"{lost} does not answer NVML (GPU is lost): not offered")
    for gpu in inv.gpus:
        if gpu.mig:
            warnings.append(f"GPU {gpu.index} ({gpu.uuid}) is in MIG mode: offered whole only")
    for gpu in sliceable:
        for profile in opts.profiles:
            if profile.memory_mib <= gpu.memory_mib:
                devices.append(_slice(opts, slice_device_name(gpu.index, profile),
                                      card_nodes[gpu.index], profile, gpu))
    # A card-less slice or a gang is placed at create time, but a slice of an
    # MPS card carries its card's pipes: those are offered on time cards only.
    sliceable = [g for g in sliceable if g.uuid not in opts.mps]
    for profile in opts.profiles:
        fits = [g for g in sliceable if profile.memory_mib <= g.memory_mib]
        if fits:
            devices.append(_slice(opts, profile.name,
                                  [n for g in fits for n in card_nodes[g.index]], profile, None))
        else:
            warnings.append(f"profile {profile.name!r} fits no sliceable card: not offered")
    for profile in opts.profiles:
        fits = [g for g in sliceable if profile.memory_mib <= g.memory_mib]
        nodes = [n for g in fits for n in card_nodes[g.index]]
        for count in range(2, min(len(fits), MAX_GANG) + 1):
            devices.append(_slice(opts, gang_device_name(count, profile), nodes, profile, None,
                                  count))
    spec = Spec(version="", kind=opts.kind, devices=devices, edits=_spec_edits(inv, opts))
    spec.version = minimum_version(spec)
    spec.validate()
    return spec, warnings

