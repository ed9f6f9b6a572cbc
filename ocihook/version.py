"""gpuslice's version: pyproject.toml's, as the installed package's metadata
holds it. `gpuslice --version` and the exporter's gpuslice_build_info read it
here; gpuslice-hook and gpuslice-runtime get the same string from
native/hook/Makefile, which reads pyproject.toml (version.mk)."""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version as _metadata_version


def version() -> str:
    """The installed version, or "unknown" when run from a tree that was never
    installed (pip install -e . makes the metadata)."""
    try:
        return _metadata_version("gpuslice")
    except PackageNotFoundError:
        return "unknown"
