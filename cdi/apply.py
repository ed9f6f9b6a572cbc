"""Apply CDI container edits to an OCI runtime config (config.json as a dict).

What a CDI-aware runtime does when it injects devices, for runtimes that
cannot (Docker 20-24, containerd 1.6): the edits of each requested device's
spec (once per spec) and of the device are joined in request order, then
applied in one pass, with the rules of the CDI specification and its
reference library:

- env: a variable of the same name is replaced where it stands, others are
  appended;
- device nodes: type, major and minor taken from the host node when the spec
  leaves them out (hostPath defaults to path); a node at the same path is
  replaced; block and character devices are allowed in the device cgroup
  (permissions "rwm" when none are given); uid and gid default to the
  process user's when that is not root;
- mounts: a mount at the same container path is replaced; then all mounts
  are sorted by the depth of their destination, so a parent is mounted
  before what is mounted inside it, and by destination within a depth, which
  is the order Podman 4.3 gives (tests/test_runtime_e2e.py compares);
- hooks: appended to the list of their kind;
- additionalGids: appended once each (0 is never added);
- intelRdt: set; netDevices: set by host interface name.
"""
from __future__ import annotations

import os
import stat
from typing import Any, Callable, Dict, List, Sequence, Tuple

from cdi.spec import HOOK_NAMES, ContainerEdits, DeviceNode, Device, Spec


class ApplyError(ValueError):
    """Edits that cannot be applied (a device node missing on the host, ...)."""


def joined_edits(chosen: Sequence[Tuple[Spec, Device]]) -> ContainerEdits:
    """The spec-wide edits of each spec (its first device brings them) and each
    device's edits, in order, as one set of edits."""
    out = ContainerEdits()
    specs_seen: List[int] = []
    for spec, device in chosen:
        if id(spec) not in specs_seen:
            specs_seen.append(id(spec))
            _append(out, spec.edits)
        _append(out, device.edits)
    return out


def _append(into: ContainerEdits, more: ContainerEdits) -> None:
    into.env += more.env
    into.device_nodes += more.device_nodes
    into.mounts += more.mounts
    into.hooks += more.hooks
    into.additional_gids += more.additional_gids
    into.net_devices += more.net_devices
    if more.intel_rdt is not None:
        into.intel_rdt = more.intel_rdt


def _node_info(node: DeviceNode, stat_fn: Callable[[str], os.stat_result]) -> Tuple[str, int, int]:
    """(type, major, minor): from the spec, or from the host's node."""
    if node.type and (node.major or node.type == "p"):
        return node.type, node.major or 0, node.minor or 0
    host = node.host_path or node.path
    try:
        st = stat_fn(host)
    except OSError as e:
        raise ApplyError(f"device node {host}: {e.strerror}; the CDI spec names a node this "
                         "host does not have (regenerate the spec?)") from None
    if stat.S_ISCHR(st.st_mode):
        kind = "c"
    elif stat.S_ISBLK(st.st_mode):
        kind = "b"
    elif stat.S_ISFIFO(st.st_mode):
        kind = "p"
    else:
        raise ApplyError(f"device node {host} is not a device (nor a fifo)")
    if node.type and node.type != kind and not (node.type == "u" and kind == "c"):
        raise ApplyError(f"device node {host}: the spec says type {node.type!r}, the host "
                         f"has {kind!r}")
    return kind, os.major(st.st_rdev), os.minor(st.st_rdev)


def _mount_order(mount: Dict[str, Any]) -> Tuple[int, str]:
    dest = os.path.normpath(mount.get("destination", ""))
    return dest.count("/"), dest


def apply(config: Dict[str, Any], edits: ContainerEdits,
          stat_fn: Callable[[str], os.stat_result] = os.stat) -> None:
    """Change config in place; ApplyError (config unchanged) if a node cannot be read."""
    # Everything that can fail first, so that a failure leaves config as it was.
    nodes = [(n, _node_info(n, stat_fn)) for n in edits.device_nodes]
    for h in edits.hooks:
        if h.hook_name not in HOOK_NAMES:
            raise ApplyError(f"hook name {h.hook_name!r} is not one of {', '.join(HOOK_NAMES)}; "
                             "the spec is not valid CDI")
    process = config.setdefault("process", {}) if (edits.env or edits.additional_gids) \
        else config.get("process") or {}
    user = process.get("user") or {}

    if edits.env:
        env: List[str] = process.setdefault("env", [])
        for entry in edits.env:
            key = entry.partition("=")[0]
            at = next((i for i, e in enumerate(env) if e.partition("=")[0] == key), None)
            if at is None:
                env.append(entry)
            else:
                env[at] = entry

    if nodes:
        linux = config.setdefault("linux", {})
        devices: List[Dict[str, Any]] = linux.setdefault("devices", [])
        for node, (kind, major, minor) in nodes:
            dev: Dict[str, Any] = {"path": node.path, "type": kind, "major": major,
                                   "minor": minor}
            if node.file_mode is not None:
                dev["fileMode"] = node.file_mode
            uid = node.uid if node.uid is not None else (user.get("uid") or None)
            gid = node.gid if node.gid is not None else (user.get("gid") or None)
            if uid is not None:
                dev["uid"] = uid
            if gid is not None:
                dev["gid"] = gid
            devices[:] = [d for d in devices if d.get("path") != node.path]
            devices.append(dev)
            if kind in ("b", "c"):
                access = {"": "rwm", "none": ""}.get(node.permissions, node.permissions)
                rules = linux.setdefault("resources", {}).setdefault("devices", [])
                rules.append({"allow": True, "type": kind, "major": major, "minor": minor,
                              "access": access})

    if edits.net_devices:
        net = config.setdefault("linux", {}).setdefault("netDevices", {})
        for nd in edits.net_devices:
            net[nd["hostInterfaceName"]] = {"name": nd["name"]}

    if edits.mounts:
        mounts: List[Dict[str, Any]] = config.setdefault("mounts", [])
        for m in edits.mounts:
            mounts[:] = [x for x in mounts if x.get("destination") != m.container_path]
            oci: Dict[str, Any] = {"destination": m.container_path, "source": m.host_path}
            if m.type:
                oci["type"] = m.type
            if m.options:
                oci["options"] = list(m.options)
            mounts.append(oci)
        mounts.sort(key=_mount_order)

    for h in edits.hooks:
        hook = h.to_dict()  # the OCI hook's keys, and the CDI hookName
        del hook["hookName"]
        config.setdefault("hooks", {}).setdefault(h.hook_name, []).append(hook)

    if edits.intel_rdt is not None:
        config.setdefault("linux", {})["intelRdt"] = dict(edits.intel_rdt)

    if edits.additional_gids:
        gids: List[int] = process.setdefault("user", {}).setdefault("additionalGids", [])
        for gid in edits.additional_gids:
            if gid and gid not in gids:
                gids.append(gid)
