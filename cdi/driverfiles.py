"""Driver-file discovery: the libraries, tools and firmware a CUDA container needs.

Libraries come from the driver root's own ld cache, read directly (no
``ldconfig -p``), so a driver root other than ``/`` works. Each is mounted at
its soname path (``libcuda.so.1``), not at the versioned file it links to:
bind mounts follow the link when the container starts, so the spec names no
file that a driver upgrade removes.
"""
from __future__ import annotations

import os
from typing import Dict, List

from cdi.hostpaths import inside, under
from cdi.ldcache import LdCacheError, native_libraries, read_ld_cache
from cdi.nvml import DiscoveryError
from cdi.spec import Mount

MOUNT_OPTIONS = ["ro", "nosuid", "nodev", "bind"]

# Compute and management libraries of the driver (sonames without version).
LIBRARIES = (
    "libcuda.so", "libcudadebugger.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so",
    "libnvidia-nvvm.so", "libnvidia-cfg.so", "libnvidia-opencl.so", "libnvidia-gpucomp.so",
    "libnvidia-allocator.so", "libnvidia-pkcs11.so", "libnvidia-pkcs11-openssl3.so",
)
REQUIRED_LIBRARIES = ("libcuda.so", "libnvidia-ml.so")
BINARIES = (
    "nvidia-smi", "nvidia-debugdump", "nvidia-persistenced",
    "nvidia-cuda-mps-control", "nvidia-cuda-mps-server",
)
BINARY_DIRS = ("/usr/bin", "/usr/sbin", "/bin", "/sbin", "/usr/local/bin", "/usr/local/nvidia/bin")
FIRMWARE_DIRS = ("/lib/firmware/nvidia", "/usr/lib/firmware/nvidia")


def _base(soname: str) -> str:
    return soname.split(".so", 1)[0] + ".so"


def ld_cache_path(driver_root: str) -> str:
    return under(driver_root, "/etc/ld.so.cache")


def driver_libraries(driver_root: str) -> Dict[str, str]:
    """soname -> host path of each driver library in the driver root's ld cache."""
    cache = ld_cache_path(driver_root)
    try:
        libs = native_libraries(read_ld_cache(cache))
    except FileNotFoundError:
        raise DiscoveryError(f"driver root {driver_root} has no ld cache ({cache}); "
                             "it holds no usable driver") from None
    except LdCacheError as e:
        raise DiscoveryError(str(e)) from None
    # Unversioned names (libcuda.so) are links for the linker at build time,
    # which some driver installs list in the cache too; programs load sonames.
    found = {soname: under(driver_root, path) for soname, path in libs.items()
             if _base(soname) in LIBRARIES and soname != _base(soname)
             and os.path.exists(under(driver_root, path))}
    missing = [lib for lib in REQUIRED_LIBRARIES if not any(_base(s) == lib for s in found)]
    if missing:
        raise DiscoveryError(f"driver root {driver_root} holds no NVIDIA driver: "
                             f"{' and '.join(m + '.*' for m in missing)} not found in its ld "
                             f"cache {cache}")
    return found


def _mount(driver_root: str, host_path: str) -> Mount:
    return Mount(host_path=host_path, container_path=inside(driver_root, host_path),
                 options=list(MOUNT_OPTIONS))


def library_mounts(driver_root: str) -> List[Mount]:
    libs = driver_libraries(driver_root)
    return [_mount(driver_root, libs[s]) for s in sorted(libs)]


def binary_mounts(driver_root: str) -> List[Mount]:
    mounts: List[Mount] = []
    seen = set()
    for name in BINARIES:
        for d in BINARY_DIRS:
            host = under(driver_root, f"{d}/{name}")
            if os.path.isfile(host) and os.access(host, os.X_OK):
                real = os.path.realpath(host)
                if real not in seen:  # /bin and /usr/bin are one folder on merged-/usr hosts
                    seen.add(real)
                    mounts.append(_mount(driver_root, host))
                break
    return mounts


def firmware_mounts(driver_root: str, driver_version: str) -> List[Mount]:
    """The GSP firmware folder of this driver version, if the root has one."""
    seen = set()
    mounts = []
    for d in FIRMWARE_DIRS:
        host = under(driver_root, f"{d}/{driver_version}")
        if os.path.isdir(host):
            real = os.path.realpath(host)
            if real not in seen:
                seen.add(real)
                mounts.append(_mount(driver_root, host))
    return mounts


def nvml_library(driver_root: str) -> str:
    """Host path of the driver root's libnvidia-ml.so.1, for loading NVML from it."""
    libs = driver_libraries(driver_root)
    for soname in ("libnvidia-ml.so.1",) + tuple(sorted(libs)):
        if soname in libs and _base(soname) == "libnvidia-ml.so":
            return libs[soname]
    raise DiscoveryError(f"driver root {driver_root} has no libnvidia-ml.so.1")
