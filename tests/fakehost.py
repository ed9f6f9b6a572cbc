"""A fake NVIDIA host on disk: a driver root, a dev root and a sysfs root.

The driver root holds real ELF libraries named as the driver's are, listed in
an ld cache made by the real ldconfig; its libnvidia-ml.so.1 is our fake NVML,
so discovery loads NVML from the driver root exactly as it would on a host
whose driver lives under /run/nvidia/driver. Device nodes are real character
devices made with mknod.
"""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Iterable

DRIVER_VERSION = "580.95.05"
LIBDIR = "/usr/lib/x86_64-linux-gnu"
NVIDIA_MAJOR = 195
UVM_MAJOR = 510
# Libraries of the fake driver other than NVML: empty shared objects with the
# driver's sonames are enough for discovery and for bind mounts.
OTHER_LIBRARIES = ("libcuda.so.1", "libnvidia-ptxjitcompiler.so.1", "libnvidia-nvvm.so.4",
                   "libcudadebugger.so.1")
UNRELATED_LIBRARY = "libunrelated.so.2"


def _shared_object(dest: Path, soname: str) -> None:
    src = dest.with_suffix(".c")
    src.write_text("int gpuslice_fake_symbol(void) { return 0; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(dest), str(src)],
                   check=True)
    src.unlink()


def make_driver_root(root: Path, fakedriver_build: Path, version: str = DRIVER_VERSION) -> Path:
    libdir = root / LIBDIR.lstrip("/")
    libdir.mkdir(parents=True)
    for soname in OTHER_LIBRARIES + (UNRELATED_LIBRARY,):
        base = soname.split(".so", 1)[0]
        _shared_object(libdir / f"{base}.so.{version}", soname)
    shutil.copy(fakedriver_build / "libnvidia-ml.so.1", libdir / f"libnvidia-ml.so.{version}")
    # An unversioned name in the cache, as real driver installs have them
    # (seen on the H200 host: libcuda.so, libnvidia-ml.so, ...).
    _shared_object(libdir / "libnvidia-cfg.so", "libnvidia-cfg.so")
    (root / "etc").mkdir()
    (root / "etc" / "ld.so.conf").write_text(LIBDIR + "\n")
    subprocess.run(["ldconfig", "-r", str(root)], check=True)
    bindir = root / "usr" / "bin"
    bindir.mkdir(parents=True)
    smi = bindir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho fake nvidia-smi\n")
    smi.chmod(0o755)
    firmware = root / "lib" / "firmware" / "nvidia" / version
    firmware.mkdir(parents=True)
    (firmware / "gsp_ga10x.bin").write_bytes(b"\0" * 64)
    return root


def mknod_char(path: Path, major: int, minor: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))


def make_dev_root(root: Path, minors: Iterable[int], control: bool = True,
                  uvm: bool = True) -> Path:
    (root / "dev").mkdir(parents=True, exist_ok=True)
    for minor in minors:
        mknod_char(root / "dev" / f"nvidia{minor}", NVIDIA_MAJOR, minor)
    if control:
        mknod_char(root / "dev" / "nvidiactl", NVIDIA_MAJOR, 255)
    if uvm:
        mknod_char(root / "dev" / "nvidia-uvm", UVM_MAJOR, 0)
        mknod_char(root / "dev" / "nvidia-uvm-tools", UVM_MAJOR, 1)
    return root
