"""Which cdiVersion a spec needs, and whether the one it declares is enough.

We write the lowest version that the features used need, so that older
runtimes accept our specs: Podman 4.3 (Debian 12) knows versions up to 0.5.0.
The table follows the CDI specification's changelog.
"""
from __future__ import annotations

from typing import Callable, List, Tuple

from cdi.spec import ContainerEdits, Spec, SpecError

KNOWN_VERSIONS = ("0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
EARLIEST = "0.3.0"


def _key(v: str) -> Tuple[int, ...]:
    return tuple(int(p) for p in v.split("."))


def _all_edits(spec: Spec) -> List[ContainerEdits]:
    return [spec.edits] + [d.edits for d in spec.devices]


def _needs_040(spec: Spec) -> bool:
    return any(m.type for e in _all_edits(spec) for m in e.mounts)


def _needs_050(spec: Spec) -> bool:
    if any(d.name and not d.name[0].isalpha() for d in spec.devices):
        return True
    return any(n.host_path for e in _all_edits(spec) for n in e.device_nodes)


def _needs_060(spec: Spec) -> bool:
    if spec.annotations or any(d.annotations for d in spec.devices):
        return True
    return "." in spec.kind.partition("/")[2]


def _needs_070(spec: Spec) -> bool:
    return any(e.intel_rdt is not None or e.additional_gids for e in _all_edits(spec))


def _needs_110(spec: Spec) -> bool:
    for e in _all_edits(spec):
        rdt = e.intel_rdt or {}
        if e.net_devices or "schemata" in rdt or rdt.get("enableMonitoring"):
            return True
    return False


_REQUIREMENTS: List[Tuple[str, Callable[[Spec], bool]]] = [
    ("1.1.0", _needs_110),
    ("0.7.0", _needs_070),
    ("0.6.0", _needs_060),
    ("0.5.0", _needs_050),
    ("0.4.0", _needs_040),
]


def minimum_version(spec: Spec) -> str:
    """The lowest cdiVersion whose features cover everything the spec uses."""
    for ver, needed in _REQUIREMENTS:
        if needed(spec):
            return ver
    return EARLIEST


def check_declared(spec: Spec) -> None:
    """Refuse an unknown cdiVersion, or one below what the spec's features need."""
    if spec.version not in KNOWN_VERSIONS:
        raise SpecError(f"{spec.kind}: cdiVersion {spec.version!r} is not a known CDI version "
                        f"({', '.join(KNOWN_VERSIONS)})")
    need = minimum_version(spec)
    if _key(spec.version) < _key(need):
        raise SpecError(f"{spec.kind}: cdiVersion {spec.version} is too low; the features "
                        f"this spec uses need at least {need}")
