"""Where the cards sit and how they are joined, from NVML, for placing a gang
(several slices of one device, each on its own card; docs/architecture.md).

Per card: its NUMA node (nvmlDeviceGetNumaNodeId, else the kernel's
numa_node of its PCI device) and the CPUs nearest it
(nvmlDeviceGetCpuAffinity, as a cpulist). Per pair of cards: the innermost
PCIe level they share (nvmlDeviceGetTopologyCommonAncestor) and how many
NVLinks join them. NVML reports NVLink per link of a card: whether it is
active (nvmlDeviceGetNvLinkState) and the PCI address at its far end
(nvmlDeviceGetNvLinkRemotePciInfo_v2). A link whose far end is another card
joins that pair; one whose far end is not a card leads to an NVSwitch, and
two cards both on NVSwitches are joined by as many links as the one with
fewer has there (what `nvidia-smi topo -m` shows as NV<n> on an HGX board).

A card or pair NVML cannot describe (NOT_SUPPORTED, as on a card without
NVLink) is recorded as unknown, and placement treats it as the farthest.
"""
from __future__ import annotations

import ctypes
import os
from ctypes import byref, c_int, c_uint, c_ulong
from typing import Dict, List, NamedTuple, Optional, Sequence

from cdi import devnodes
from cdi.nvml import Gpu, Nvml, NvmlError, NvmlPciInfo

NVML_NVLINK_MAX_LINKS = 18  # nvml.h
# nvmlGpuTopologyLevel_t, innermost first, and our names for them (the
# accountant's card_links.pcie CHECK lists the same).
PCIE_LEVELS = {0: "internal", 10: "single", 20: "multiple", 30: "hostbridge", 40: "node",
               50: "system"}
# NVML's codes for "this card cannot say" (nvml.h): not supported, invalid
# argument (a link number past the card's last), function not found.
_CANNOT_SAY = (2, 3, 13)
# Enough words for 1024 CPUs; NVML fills the words it needs.
_AFFINITY_WORDS = 1024 // (8 * ctypes.sizeof(c_ulong))


class Link(NamedTuple):
    a: int  # card indexes, a < b
    b: int
    pcie: str  # one of PCIE_LEVELS' names
    nvlinks: int


class Place(NamedTuple):
    numa_node: Optional[int]
    cpu_affinity: str  # a cpulist, "" unknown


class Topology(NamedTuple):
    places: Dict[int, Place]  # by card index
    links: List[Link]


def cpulist(words: Sequence[int], bits: int) -> str:
    """The CPUs set in a bitmask of `bits`-bit words as a cpulist: 0-3,8,10-11."""
    cpus = [w * bits + i for w, word in enumerate(words) for i in range(bits) if word >> i & 1]
    runs: List[str] = []
    start = prev = None
    for c in cpus + [None]:
        if start is not None and (c is None or c != prev + 1):
            runs.append(str(start) if start == prev else f"{start}-{prev}")
            start = None
        if c is not None and start is None:
            start = c
        prev = c
    return ",".join(runs)


def _sysfs_numa(sys_root: str, bus_id: str) -> Optional[int]:
    path = os.path.join(sys_root, "bus/pci/devices", devnodes.sysfs_pci_name(bus_id),
                        "numa_node")
    try:
        with open(path) as f:
            node = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None  # the kernel's -1: no NUMA information


def _only_numa_node(sys_root: str) -> Optional[int]:
    """The host's one NUMA node, if it has exactly one (a VM's usual case,
    where neither NVML nor the PCI device says, and nvidia-smi topo -m
    shows that node); None with several, or none known."""
    try:
        nodes = [n for n in os.listdir(os.path.join(sys_root, "devices/system/node"))
                 if n.startswith("node") and n[4:].isdigit()]
    except OSError:
        return None
    return int(nodes[0][4:]) if len(nodes) == 1 else None


def _place(nvml: Nvml, h: ctypes.c_void_p, gpu: Gpu, sys_root: str) -> Place:
    node: Optional[int]
    try:
        n = c_uint()
        nvml.call("nvmlDeviceGetNumaNodeId", h, byref(n))
        node = n.value
    except NvmlError as e:
        if e.code not in _CANNOT_SAY:
            raise
        node = _sysfs_numa(sys_root, gpu.pci_bus_id)
        if node is None:
            node = _only_numa_node(sys_root)
    words = (c_ulong * _AFFINITY_WORDS)()
    try:
        nvml.call("nvmlDeviceGetCpuAffinity", h, c_uint(_AFFINITY_WORDS), words)
        affinity = cpulist(list(words), 8 * ctypes.sizeof(c_ulong))
    except NvmlError as e:
        if e.code not in _CANNOT_SAY:
            raise
        affinity = ""
    return Place(node, affinity)


def _nvlink_ends(nvml: Nvml, h: ctypes.c_void_p) -> List[str]:
    """The far ends (PCI bus ids, NVML's form, upper case) of the card's active links."""
    ends = []
    for link in range(NVML_NVLINK_MAX_LINKS):
        active = c_int()
        try:
            nvml.call("nvmlDeviceGetNvLinkState", h, c_uint(link), byref(active))
        except NvmlError as e:
            if e.code in _CANNOT_SAY:
                break  # no NVLink, or no link past this one
            raise
        if not active.value:
            continue
        pci = NvmlPciInfo()
        nvml.call("nvmlDeviceGetNvLinkRemotePciInfo_v2", h, c_uint(link), byref(pci))
        ends.append(pci.busId.decode(errors="replace").upper())
    return ends


def _pcie(nvml: Nvml, h1: ctypes.c_void_p, h2: ctypes.c_void_p) -> str:
    level = c_int()
    try:
        nvml.call("nvmlDeviceGetTopologyCommonAncestor", h1, h2, byref(level))
    except NvmlError as e:
        if e.code not in _CANNOT_SAY:
            raise
        return "system"
    return PCIE_LEVELS.get(level.value, "system")


def discover(nvml: Nvml, gpus: Sequence[Gpu], sys_root: str = "/sys") -> Topology:
    """Every card's place and every pair's link, NVML initialised by the caller."""
    handles = {g.index: nvml.handle(g.index) for g in gpus}
    by_bus = {g.pci_bus_id.upper(): g.index for g in gpus}
    places = {g.index: _place(nvml, handles[g.index], g, sys_root) for g in gpus}
    direct: Dict[tuple, int] = {}
    switched: Dict[int, int] = {}
    for g in gpus:
        for end in _nvlink_ends(nvml, handles[g.index]):
            peer = by_bus.get(end)
            if peer is None:
                switched[g.index] = switched.get(g.index, 0) + 1
            elif peer != g.index:
                direct[(g.index, peer)] = direct.get((g.index, peer), 0) + 1
    links = []
    ordered = sorted(gpus, key=lambda g: g.index)
    for i, a in enumerate(ordered):
        for b in ordered[i + 1:]:
            # A direct link is seen from both ends; either may be all NVML tells.
            n = max(direct.get((a.index, b.index), 0), direct.get((b.index, a.index), 0))
            n += min(switched.get(a.index, 0), switched.get(b.index, 0))
            links.append(Link(a.index, b.index, _pcie(nvml, handles[a.index], handles[b.index]),
                              n))
    return Topology(places, links)
