"""Builds libgpuslice.so with the package: `pip install .` compiles the shim
(gcc and make, no CUDA toolkit) and ships it, with the shared-region header
that ocihook.region reads, in ocihook/native/. Metadata lives in pyproject.toml.
"""
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
SHIM = HERE / "native" / "shim"


class BuildWithShim(build_py):
    def run(self) -> None:
        super().run()
        subprocess.run(["make", "-s", "-C", str(SHIM)], check=True)
        dest = Path(self.build_lib) / "ocihook" / "native"
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy2(SHIM / "build" / "libgpuslice.so", dest / "libgpuslice.so")
        shutil.copy2(SHIM / "include" / "gpuslice" / "region.h", dest / "region.h")


setup(cmdclass={"build_py": BuildWithShim})
