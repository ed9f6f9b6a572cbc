"""Which spec defines a fully qualified CDI device, across the spec dirs.

The folders are read in order of increasing priority (the CDI default is
/etc/cdi, then /var/run/cdi): a device defined in a later folder hides the
same device in an earlier one; the same device in two files of one folder is
a conflict, and the device cannot be used (as the reference library rules).
Files that are not valid specs are skipped, as runtimes skip them; their
errors are kept for messages.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Sequence, Tuple

from cdi import names
from cdi.spec import Device, Spec, SpecError
from cdi.specfile import read_spec, spec_files

# The CDI default, which Podman, Docker and containerd read when they are
# told no other folders.
DEFAULT_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")


class ResolveError(ValueError):
    """A requested device that cannot be injected; one line for the user."""


@dataclass(frozen=True)
class Found:
    spec: Spec
    device: Device
    path: str


@dataclass
class Registry:
    devices: Dict[str, Found] = field(default_factory=dict)
    conflicts: Dict[str, List[str]] = field(default_factory=dict)
    errors: List[str] = field(default_factory=list)

    @classmethod
    def load(cls, folders: Sequence[str]) -> "Registry":
        reg = cls()
        for folder in folders:
            here: Dict[str, Found] = {}
            clash: Dict[str, List[str]] = {}
            for path in spec_files([folder]):
                try:
                    spec = read_spec(path)
                except SpecError as e:
                    reg.errors.append(str(e))
                    continue
                for dev in spec.devices:
                    name = names.qualified(spec.kind, dev.name)
                    if name in here:
                        clash.setdefault(name, [here[name].path]).append(path)
                    here[name] = Found(spec, dev, path)
            for name, found in here.items():  # a later folder hides an earlier one
                reg.devices[name] = found
                reg.conflicts.pop(name, None)
            reg.conflicts.update(clash)
        return reg

    def resolve(self, requested: Sequence[str]) -> List[Tuple[Spec, Device]]:
        """(spec, device) for each name, in order, each once; ResolveError names the first
        that is unknown or in conflict, and what the same kind offers."""
        out: List[Tuple[Spec, Device]] = []
        seen = set()
        for name in requested:
            if name in seen:
                continue
            seen.add(name)
            try:
                kind, _ = names.parse_qualified(name)
            except names.CdiNameError as e:
                raise ResolveError(str(e)) from None
            if name in self.conflicts:
                raise ResolveError(f"CDI device {name} is defined by more than one spec of "
                                   f"the same priority ({', '.join(self.conflicts[name])}); "
                                   "remove one")
            found = self.devices.get(name)
            if found is None:
                offered = sorted(n.partition("=")[2] for n in self.devices
                                 if n.partition("=")[0] == kind)
                have = (f"{kind} offers: {', '.join(offered)}" if offered else
                        f"no spec offers kind {kind}")
                invalid = f"; invalid spec files skipped: {'; '.join(self.errors)}" \
                    if self.errors else ""
                raise ResolveError(f"unknown CDI device {name}; {have}{invalid}")
            out.append((found.spec, found.device))
        return out
