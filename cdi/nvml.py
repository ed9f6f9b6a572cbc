"""GPU discovery through NVML: what cards there are and what they are; and
NVML's events (critical XIDs, ECC errors), for the health watcher.

NVML is loaded from the driver root's own ld cache when the driver lives
somewhere other than ``/``, so that a spec for /run/nvidia/driver describes
that driver, not whatever libnvidia-ml.so.1 the host happens to resolve.

The binding is our own and tiny: ctypes declarations of the few entry points
and structures of NVML's C ABI (nvml.h) that discovery needs, so that no
Python NVML package is needed at run time (Debian packages none). Nothing is
kept between calls: each discover() loads the library it is given, uses it
and shuts NVML down again. A long-running caller (the health watcher) holds
one with open_nvml() and the event-set calls of Nvml.
"""
from __future__ import annotations

import ctypes
from ctypes import (POINTER, byref, c_char, c_char_p, c_int, c_uint, c_ulong, c_ulonglong,
                    c_void_p)
from typing import TYPE_CHECKING, Any, List, NamedTuple, Optional, Tuple

if TYPE_CHECKING:
    from cdi.topology import Topology

MIB = 1024 * 1024
DEFAULT_LIBRARY = "libnvidia-ml.so.1"

# nvmlReturn_t values that discovery treats specially (nvml.h).
NVML_SUCCESS = 0
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25

# Event types, a bit mask (nvml.h's nvmlEventType*).
EVENT_SINGLE_BIT_ECC = 0x0000000000000001
EVENT_DOUBLE_BIT_ECC = 0x0000000000000002
EVENT_XID_CRITICAL = 0x0000000000000008

# Buffer sizes from nvml.h: the _V2 sizes are the largest NVML fills.
NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE = 80
NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96
NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96
NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE = 32
NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE = 16

# Strings for the codes that arise before NVML itself can be asked (no
# library, or a library without nvmlErrorString); worded as NVML words them.
_FALLBACK_STRINGS = {
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
}


class DiscoveryError(RuntimeError):
    """NVML could not be loaded or queried; the message says what and where."""


class Gpu(NamedTuple):
    index: int
    uuid: str
    name: str
    minor: int
    memory_mib: int
    pci_bus_id: str  # NVML's form: 00000000:18:00.0
    mig: bool


class Inventory(NamedTuple):
    driver_version: str
    cuda_version: str  # "13.0"
    gpus: List[Gpu]
    lost: List[str]  # cards NVML lists but cannot reach (fallen off the bus)
    # Where the cards sit and how they are joined (cdi/topology.py); None: not asked.
    topology: Optional["Topology"] = None


# ------------------------------------------------------------ NVML's C ABI

class NvmlMemory(ctypes.Structure):
    """nvmlMemory_t, as nvmlDeviceGetMemoryInfo fills it (bytes)."""
    _fields_ = [
        ("total", c_ulonglong),
        ("free", c_ulonglong),
        ("used", c_ulonglong),
    ]


class NvmlPciInfo(ctypes.Structure):
    """nvmlPciInfo_t as of NVML 9.0, the layout nvmlDeviceGetPciInfo_v3 fills."""
    _fields_ = [
        ("busIdLegacy", c_char * NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE),
        ("domain", c_uint),
        ("bus", c_uint),
        ("device", c_uint),
        ("pciDeviceId", c_uint),  # (device id << 16) | vendor id
        ("pciSubSystemId", c_uint),
        ("busId", c_char * NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE),
    ]


class NvmlMemoryV2(ctypes.Structure):
    """nvmlMemory_v2_t (bytes): `used` leaves out what the driver reserves, as
    nvidia-smi's memory.used does."""
    _fields_ = [
        ("version", c_uint),
        ("total", c_ulonglong),
        ("reserved", c_ulonglong),
        ("free", c_ulonglong),
        ("used", c_ulonglong),
    ]


# nvml.h's NVML_STRUCT_VERSION(Memory, 2).
NVML_MEMORY_V2 = ctypes.sizeof(NvmlMemoryV2) | (2 << 24)


class NvmlUtilization(ctypes.Structure):
    """nvmlUtilization_t: percent of the last sample period the card (gpu) and its
    memory controller (memory) were busy."""
    _fields_ = [
        ("gpu", c_uint),
        ("memory", c_uint),
    ]


_Device = c_void_p  # nvmlDevice_t: an opaque pointer
_EventSet = c_void_p  # nvmlEventSet_t: an opaque pointer


class NvmlEventData(ctypes.Structure):
    """nvmlEventData_t, as nvmlEventSetWait_v2 fills it: eventData is the XID
    for nvmlEventTypeXidCriticalError (999: one NVML does not know), else 0;
    the instance ids are 0xFFFFFFFF unless a MIG instance is to blame."""
    _fields_ = [
        ("device", _Device),
        ("eventType", c_ulonglong),
        ("eventData", c_ulonglong),
        ("gpuInstanceId", c_uint),
        ("computeInstanceId", c_uint),
    ]

# name: (argument types); every entry point returns nvmlReturn_t (an int).
_SIGNATURES = {
    "nvmlInit_v2": (),
    "nvmlShutdown": (),
    "nvmlSystemGetDriverVersion": (c_char_p, c_uint),
    "nvmlSystemGetCudaDriverVersion": (POINTER(c_int),),
    "nvmlDeviceGetCount_v2": (POINTER(c_uint),),
    "nvmlDeviceGetHandleByIndex_v2": (c_uint, POINTER(_Device)),
    "nvmlDeviceGetUUID": (_Device, c_char_p, c_uint),
    "nvmlDeviceGetName": (_Device, c_char_p, c_uint),
    "nvmlDeviceGetMinorNumber": (_Device, POINTER(c_uint)),
    "nvmlDeviceGetMemoryInfo": (_Device, POINTER(NvmlMemory)),
    "nvmlDeviceGetPciInfo_v3": (_Device, POINTER(NvmlPciInfo)),
    "nvmlDeviceGetMigMode": (_Device, POINTER(c_uint), POINTER(c_uint)),
    # The exporter's sample of a card (ocihook/nvml_sample.py).
    "nvmlDeviceGetUtilizationRates": (_Device, POINTER(NvmlUtilization)),
    "nvmlDeviceGetMemoryInfo_v2": (_Device, POINTER(NvmlMemoryV2)),
    "nvmlEventSetCreate": (POINTER(_EventSet),),
    "nvmlEventSetFree": (_EventSet,),
    "nvmlDeviceGetSupportedEventTypes": (_Device, POINTER(c_ulonglong)),
    "nvmlDeviceRegisterEvents": (_Device, c_ulonglong, _EventSet),
    "nvmlEventSetWait_v2": (_EventSet, POINTER(NvmlEventData), c_uint),
    # Where the cards sit (cdi/topology.py).
    "nvmlDeviceGetTopologyCommonAncestor": (_Device, _Device, POINTER(c_int)),
    "nvmlDeviceGetNvLinkState": (_Device, c_uint, POINTER(c_int)),
    "nvmlDeviceGetNvLinkRemotePciInfo_v2": (_Device, c_uint, POINTER(NvmlPciInfo)),
    "nvmlDeviceGetNumaNodeId": (_Device, POINTER(c_uint)),
    "nvmlDeviceGetCpuAffinity": (_Device, c_uint, POINTER(c_ulong)),
}


class NvmlError(Exception):
    """A call returned an nvmlReturn_t other than NVML_SUCCESS; str() is NVML's wording."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(code, text)
        self.code = code
        self.text = text

    def __str__(self) -> str:
        return self.text


class Nvml:
    """One loaded libnvidia-ml: typed calls that raise NvmlError on failure."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._lib = lib

    def error(self, code: int) -> NvmlError:
        return NvmlError(code, self._error_string(code))

    def _error_string(self, code: int) -> str:
        try:
            fn = self._lib["nvmlErrorString"]
        except AttributeError:
            fn = None
        if fn is not None:
            fn.argtypes = [c_int]
            fn.restype = c_char_p
            text = fn(code)
            if text:
                return text.decode(errors="replace")
        return _FALLBACK_STRINGS.get(code, f"NVML Error with code {code}")

    def call(self, name: str, *args: Any) -> None:
        # lib[name] is a fresh function object: its types are set on it alone,
        # never on a pointer that another caller of this library shares.
        try:
            fn = self._lib[name]
        except AttributeError:
            raise self.error(NVML_ERROR_FUNCTION_NOT_FOUND) from None
        fn.argtypes = list(_SIGNATURES[name])
        fn.restype = c_int
        rc = fn(*args)
        if rc != NVML_SUCCESS:
            raise self.error(rc)

    def _string(self, name: str, size: int, *lead: Any) -> str:
        buf = ctypes.create_string_buffer(size)
        self.call(name, *lead, buf, c_uint(size))
        return _decode(buf.value)

    # The entry points discovery uses, one method each.
    def init(self) -> None:
        self.call("nvmlInit_v2")

    def shutdown(self) -> None:
        self.call("nvmlShutdown")

    def driver_version(self) -> str:
        return self._string("nvmlSystemGetDriverVersion", NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE)

    def cuda_driver_version(self) -> int:
        v = c_int()
        self.call("nvmlSystemGetCudaDriverVersion", byref(v))
        return v.value

    def device_count(self) -> int:
        n = c_uint()
        self.call("nvmlDeviceGetCount_v2", byref(n))
        return n.value

    def handle(self, index: int) -> c_void_p:
        h = _Device()
        self.call("nvmlDeviceGetHandleByIndex_v2", c_uint(index), byref(h))
        return h

    def uuid(self, h: c_void_p) -> str:
        return self._string("nvmlDeviceGetUUID", NVML_DEVICE_UUID_V2_BUFFER_SIZE, h)

    def name(self, h: c_void_p) -> str:
        return self._string("nvmlDeviceGetName", NVML_DEVICE_NAME_V2_BUFFER_SIZE, h)

    def minor(self, h: c_void_p) -> int:
        m = c_uint()
        self.call("nvmlDeviceGetMinorNumber", h, byref(m))
        return m.value

    def memory(self, h: c_void_p) -> NvmlMemory:
        mem = NvmlMemory()
        self.call("nvmlDeviceGetMemoryInfo", h, byref(mem))
        return mem

    def pci_info(self, h: c_void_p) -> NvmlPciInfo:
        pci = NvmlPciInfo()
        self.call("nvmlDeviceGetPciInfo_v3", h, byref(pci))
        return pci

    def memory_v2(self, h: c_void_p) -> NvmlMemoryV2:
        mem = NvmlMemoryV2(version=NVML_MEMORY_V2)
        self.call("nvmlDeviceGetMemoryInfo_v2", h, byref(mem))
        return mem

    def utilization(self, h: c_void_p) -> NvmlUtilization:
        u = NvmlUtilization()
        self.call("nvmlDeviceGetUtilizationRates", h, byref(u))
        return u

    def mig_mode(self, h: c_void_p) -> Tuple[int, int]:
        current, pending = c_uint(), c_uint()
        self.call("nvmlDeviceGetMigMode", h, byref(current), byref(pending))
        return current.value, pending.value

    # Events: a set of (card, event types) registrations and a wait on it.
    def event_set_create(self) -> c_void_p:
        es = _EventSet()
        self.call("nvmlEventSetCreate", byref(es))
        return es

    def event_set_free(self, es: c_void_p) -> None:
        self.call("nvmlEventSetFree", es)

    def supported_event_types(self, h: c_void_p) -> int:
        mask = c_ulonglong()
        self.call("nvmlDeviceGetSupportedEventTypes", h, byref(mask))
        return mask.value

    def register_events(self, h: c_void_p, mask: int, es: c_void_p) -> None:
        self.call("nvmlDeviceRegisterEvents", h, c_ulonglong(mask), es)

    def event_wait(self, es: c_void_p, timeout_ms: int) -> Optional[NvmlEventData]:
        """The next event of the set, or None when none came within timeout_ms."""
        data = NvmlEventData()
        try:
            self.call("nvmlEventSetWait_v2", es, byref(data), c_uint(timeout_ms))
        except NvmlError as e:
            if e.code == NVML_ERROR_TIMEOUT:
                return None
            raise
        return data


# ---------------------------------------------------------------- discovery

def _decode(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _load(nvml_path: Optional[str]) -> Nvml:
    try:
        return Nvml(ctypes.CDLL(nvml_path or DEFAULT_LIBRARY))
    except OSError as e:
        if nvml_path is not None:
            raise DiscoveryError(f"cannot load NVML from {nvml_path}: {e}") from None
        raise DiscoveryError(
            f"NVML ({DEFAULT_LIBRARY}) did not start: "
            f"{_FALLBACK_STRINGS[NVML_ERROR_LIBRARY_NOT_FOUND]}; is the NVIDIA driver "
            "installed and loaded?") from None


def open_nvml(nvml_path: Optional[str] = None) -> Nvml:
    """NVML loaded and initialised, for a caller that keeps it (nvmlShutdown
    when done); DiscoveryError if it cannot start."""
    nvml = _load(nvml_path)
    try:
        nvml.init()
    except NvmlError as e:
        where = nvml_path or DEFAULT_LIBRARY
        raise DiscoveryError(f"NVML ({where}) did not start: {e}; is the NVIDIA driver "
                             "installed and loaded?") from None
    return nvml


def _mig_enabled(nvml: Nvml, handle: c_void_p) -> bool:
    try:
        current, _pending = nvml.mig_mode(handle)
    except NvmlError as e:
        if e.code == NVML_ERROR_NOT_SUPPORTED:
            return False  # a card without MIG support is never in MIG mode
        raise
    return bool(current)


def discover(nvml_path: Optional[str] = None, sys_root: str = "/sys") -> Inventory:
    """Ask NVML for the driver, every card and where the cards sit (sys_root: where
    the kernel's PCI devices are, for a NUMA node NVML does not tell); raise
    DiscoveryError if it cannot answer."""
    nvml = open_nvml(nvml_path)
    failed = True
    try:
        driver = nvml.driver_version()
        cuda = nvml.cuda_driver_version()
        gpus: List[Gpu] = []
        lost: List[str] = []
        for i in range(nvml.device_count()):
            h = nvml.handle(i)
            try:
                gpus.append(Gpu(
                    index=i,
                    uuid=nvml.uuid(h),
                    name=nvml.name(h),
                    minor=nvml.minor(h),
                    memory_mib=nvml.memory(h).total // MIB,
                    pci_bus_id=_decode(nvml.pci_info(h).busId),
                    mig=_mig_enabled(nvml, h),
                ))
            except NvmlError as e:
                if e.code != NVML_ERROR_GPU_IS_LOST:
                    raise DiscoveryError(f"NVML cannot describe GPU {i}: {e}") from None
                lost.append(f"GPU {i}")  # offer the healthy cards rather than none
        from cdi import topology  # it builds on this module

        topo = topology.discover(nvml, gpus, sys_root)
        failed = False
    except NvmlError as e:
        raise DiscoveryError(f"NVML query failed: {e}") from None
    finally:
        try:
            nvml.shutdown()
        except NvmlError as e:
            if not failed:  # never hide the error that brought us here
                raise DiscoveryError(f"NVML query failed: {e}") from None
    return Inventory(driver, f"{cuda // 1000}.{(cuda % 1000) // 10}", gpus, lost, topo)
