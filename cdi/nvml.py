"""GPU discovery through NVML (pynvml): what cards there are and what they are.

NVML is loaded from the driver root's own ld cache when the driver lives
somewhere other than ``/``, so that a spec for /run/nvidia/driver describes
that driver, not whatever libnvidia-ml.so.1 the host happens to resolve.
"""
from __future__ import annotations
from typing import List, NamedTuple, Optional

MIB = 1024 * 1024


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


def _decode(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _load(nvml_path: Optional[str]) -> object:
    import pynvml

    if nvml_path is not None and pynvml.nvmlLib is None:
        from ctypes import CDLL

        try:
            pynvml.nvmlLib = CDLL(nvml_path)
        except OSError as e:
            raise DiscoveryError(f"cannot load NVML from {nvml_path}: {e}") from None
    return pynvml


def _mig_enabled(pynvml: object, handle: object) -> bool:
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(handle)  # type: ignore[attr-defined]
    except pynvml.NVMLError_NotSupported:  # type: ignore[attr-defined]
        return False  # a card without MIG support is never in MIG mode
    return bool(current)


def discover(nvml_path: Optional[str] = None) -> Inventory:
    """Ask NVML for the driver and every card; raise DiscoveryError if it cannot answer."""
    pynvml = _load(nvml_path)
    try:
        pynvml.nvmlInit()  # type: ignore[attr-defined]
    except pynvml.NVMLError as e:  # type: ignore[attr-defined]
        where = nvml_path or "libnvidia-ml.so.1"
        raise DiscoveryError(f"NVML ({where}) did not start: {e}; is the NVIDIA driver "
                             "installed and loaded?") from None
    try:
        driver = _decode(pynvml.nvmlSystemGetDriverVersion())  # type: ignore[attr-defined]
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()  # type: ignore[attr-defined]
        gpus: List[Gpu] = []
        lost: List[str] = []
        for i in range(pynvml.nvmlDeviceGetCount()):  # type: ignore[attr-defined]
            h = pynvml.nvmlDeviceGetHandleByIndex(i)  # type: ignore[attr-defined]
            try:
                gpus.append(Gpu(
                    index=i,
                    uuid=_decode(pynvml.nvmlDeviceGetUUID(h)),  # type: ignore[attr-defined]
                    name=_decode(pynvml.nvmlDeviceGetName(h)),  # type: ignore[attr-defined]
                    minor=pynvml.nvmlDeviceGetMinorNumber(h),  # type: ignore[attr-defined]
                    memory_mib=pynvml.nvmlDeviceGetMemoryInfo(h).total // MIB,  # type: ignore[attr-defined]
                    pci_bus_id=_decode(pynvml.nvmlDeviceGetPciInfo(h).busId),  # type: ignore[attr-defined]
                    mig=_mig_enabled(pynvml, h),
                ))
            except pynvml.NVMLError_GpuIsLost:  # type: ignore[attr-defined]
                lost.append(f"GPU {i}")  # offer the healthy cards rather than none
            except pynvml.NVMLError as e:  # type: ignore[attr-defined]
                raise DiscoveryError(f"NVML cannot describe GPU {i}: {e}") from None
    except pynvml.NVMLError as e:  # type: ignore[attr-defined]
        raise DiscoveryError(f"NVML query failed: {e}") from None
    finally:
        pynvml.nvmlShutdown()  # type: ignore[attr-defined]
    return Inventory(driver, f"{cuda // 1000}.{(cuda % 1000) // 10}", gpus, lost)
