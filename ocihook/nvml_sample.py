"""What NVML says about each card now: memory total and used, utilization.

For the long-lived readers (the exporter, `gpuslice top`): NVML is loaded
and started once (from the configuration's driver root, as `gpuslice cdi
generate` loads it) and asked again at every sample; cards are found by
UUID, the key the accountant uses. A host without a driver, or a card NVML
cannot answer for, gives no sample for it: the caller shows what it has.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

from cdi import nvml


@dataclass(frozen=True)
class CardSample:
    uuid: str
    total_bytes: int
    used_bytes: int
    utilization: Optional[float]  # 0-1, the share of the last sample period the card was busy


class Sampler:
    """One started NVML. `problem` says why there is none (then sample() is empty)."""

    def __init__(self, driver_root: str = "/") -> None:
        self.problem: Optional[str] = None
        self._nvml: Optional[nvml._Nvml] = None
        self._handles: Dict[str, object] = {}
        self._v2 = True
        try:
            from cdi import driverfiles

            path = driverfiles.nvml_library(driver_root) if driver_root != "/" else None
            lib = nvml._load(path)
            lib.init()
            self._nvml = lib
        except (nvml.DiscoveryError, nvml.NvmlError, OSError) as e:
            self.problem = f"NVML did not start: {e}"

    def _find(self) -> None:
        assert self._nvml is not None
        self._handles = {}
        for i in range(self._nvml.device_count()):
            h = self._nvml.handle(i)
            self._handles[self._nvml.uuid(h)] = h

    def sample(self) -> Dict[str, CardSample]:
        """By UUID, every card NVML answers for now."""
        if self._nvml is None:
            return {}
        out: Dict[str, CardSample] = {}
        try:
            if not self._handles:
                self._find()
        except nvml.NvmlError as e:
            self.problem = f"NVML cannot list the cards: {e}"
            return {}
        for uuid, h in self._handles.items():
            try:
                mem = self._memory(h)
            except nvml.NvmlError:
                continue  # fallen off the bus, say: no sample rather than a stale one
            try:
                busy: Optional[float] = self._nvml.utilization(h).gpu / 100  # type: ignore[arg-type]
            except nvml.NvmlError:
                busy = None  # not supported on this card (or by this driver)
            out[uuid] = CardSample(uuid, mem.total, mem.used, busy)
        return out

    def _memory(self, h: object) -> "nvml.NvmlMemoryV2 | nvml.NvmlMemory":
        """v2 where the driver has it: its `used` is nvidia-smi's memory.used (v1's
        also counts what the driver reserves)."""
        assert self._nvml is not None
        if self._v2:
            try:
                return self._nvml.memory_v2(h)  # type: ignore[arg-type]
            except nvml.NvmlError as e:
                if e.code not in (nvml.NVML_ERROR_FUNCTION_NOT_FOUND,
                                  nvml.NVML_ERROR_NOT_SUPPORTED,
                                  nvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH):
                    raise
                self._v2 = False  # an older driver: v1 from now on
        return self._nvml.memory(h)  # type: ignore[arg-type]

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.shutdown()
            except nvml.NvmlError:
                pass  # going away anyway
            self._nvml = None
