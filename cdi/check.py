"""Is a spec on disk still true of this host?

A spec goes stale when the driver is upgraded (its files and version change),
when cards come or go, or when the configuration changes. The check compares
the spec on disk with the one the host would give now, and lists every host
path the old spec names that no longer exists.
"""
from __future__ import annotations

import os
from typing import List

from cdi.limits import DRIVER_VERSION_ENV
from cdi.spec import Spec


def host_paths(spec: Spec) -> List[str]:
    """Every host path a runtime would touch to apply the spec."""
    paths: List[str] = []
    for edits in [spec.edits] + [d.edits for d in spec.devices]:
        paths += [n.host_path or n.path for n in edits.device_nodes]
        paths += [m.host_path for m in edits.mounts]
        paths += [h.path for h in edits.hooks]
    return list(dict.fromkeys(paths))


def driver_version(spec: Spec) -> str:
    for entry in spec.edits.env:
        name, _, value = entry.partition("=")
        if name == DRIVER_VERSION_ENV:
            return value
    return ""


def problems(existing: Spec, current: Spec) -> List[str]:
    """Reasons the existing spec is stale; empty when it matches the host."""
    out: List[str] = []
    old_driver, new_driver = driver_version(existing), driver_version(current)
    if old_driver != new_driver:
        out.append(f"made for driver {old_driver or 'unknown'}, host has {new_driver}")
    still_needed = set(host_paths(current))
    for path in host_paths(existing):
        # A path the fresh spec names too is missing from the host, not from the
        # spec: regenerating cannot help, so missing_on_host() reports it instead.
        if not os.path.exists(path) and path not in still_needed:
            out.append(f"host path {path} does not exist")
    old_names = {d.name for d in existing.devices}
    new_names = {d.name for d in current.devices}
    for name in sorted(new_names - old_names):
        out.append(f"device {name} is missing from the spec")
    for name in sorted(old_names - new_names):
        out.append(f"device {name} no longer exists on this host")
    if not out and existing.to_dict() != current.to_dict():
        out.append("the spec's edits differ from what this host and configuration give now")
    return out


def missing_on_host(spec: Spec) -> List[str]:
    """Host paths the spec needs that do not exist (a part of gpuslice not installed)."""
    return [p for p in host_paths(spec) if not os.path.exists(p)]
