"""Paths on the host under an alternative root (driver root, dev root).

A spec names host paths; when the driver or /dev lives under another root
(a driver container's /run/nvidia/driver, a test's temporary folder), the
host path is that root joined with the path the container sees.
"""
from __future__ import annotations

import os


def under(root: str, path: str) -> str:
    """``path`` (absolute, as the container sees it) on the host under ``root``."""
    if root in ("", "/"):
        return path
    return os.path.join(root, path.lstrip("/"))


def inside(root: str, host_path: str) -> str:
    """The inverse of under(): the container-side path of a host path below ``root``."""
    if root in ("", "/"):
        return host_path
    rel = os.path.relpath(host_path, root)
    return "/" + rel
