"""Device-node discovery: the card nodes, the control nodes, and DRI nodes.

Only nodes that exist under the dev root are emitted: a spec that names a
missing node makes every container that asks for it fail to start. A card's
own node and /dev/nvidiactl are required; the rest are optional.
"""
from __future__ import annotations

import os
import stat
from typing import List

from cdi.hostpaths import under
from cdi.nvml import DiscoveryError, Gpu
from cdi.spec import DeviceNode

REQUIRED_CONTROL = ("/dev/nvidiactl",)
OPTIONAL_CONTROL = ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")


def _is_char_device(path: str) -> bool:
    try:
        return stat.S_ISCHR(os.stat(path).st_mode)
    except OSError:
        return False


def _node(dev_root: str, path: str) -> DeviceNode:
    host = under(dev_root, path)
    # hostPath only where it differs: the spec stays short on a plain host.
    return DeviceNode(path=path, host_path=host if host != path else "")


def control_nodes(dev_root: str) -> List[DeviceNode]:
    nodes = []
    for path in REQUIRED_CONTROL:
        if not _is_char_device(under(dev_root, path)):
            raise DiscoveryError(f"{under(dev_root, path)} is missing or not a character device; "
                                 "is the NVIDIA kernel module loaded?")
        nodes.append(_node(dev_root, path))
    for path in OPTIONAL_CONTROL:
        if _is_char_device(under(dev_root, path)):
            nodes.append(_node(dev_root, path))
    return nodes


def sysfs_pci_name(bus_id: str) -> str:
    # NVML writes an 8-digit domain in upper case; sysfs uses 4 digits, lower case.
    domain, _, rest = bus_id.partition(":")
    return f"{int(domain, 16):04x}:{rest.lower()}"


def dri_nodes(gpu: Gpu, dev_root: str, sys_root: str = "/sys") -> List[DeviceNode]:
    drm = os.path.join(sys_root, "bus", "pci", "devices", sysfs_pci_name(gpu.pci_bus_id), "drm")
    try:
        entries = sorted(os.listdir(drm))
    except OSError:
        return []  # no DRM driver bound to this card: nothing to pass
    nodes = []
    for entry in entries:
        if entry.startswith("card") or entry.startswith("renderD"):
            path = f"/dev/dri/{entry}"
            if _is_char_device(under(dev_root, path)):
                nodes.append(_node(dev_root, path))
    return nodes


def card_nodes(gpu: Gpu, dev_root: str, sys_root: str = "/sys") -> List[DeviceNode]:
    path = f"/dev/nvidia{gpu.minor}"
    if not _is_char_device(under(dev_root, path)):
        raise DiscoveryError(f"GPU {gpu.index} ({gpu.uuid}) has no device node "
                             f"{under(dev_root, path)}; is the NVIDIA kernel module loaded?")
    return [_node(dev_root, path)] + dri_nodes(gpu, dev_root, sys_root)
