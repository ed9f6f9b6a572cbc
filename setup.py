"""Builds the native parts with the package (gcc, make, libsqlite3's and Jansson's
headers; no CUDA toolkit): `pip install .` compiles libgpuslice.so, the
preloaded shim, and ships it with the shared headers that ocihook.cheader
reads (native/include/gpuslice/*.h) in ocihook/native/; it compiles gpuslice-hook, the OCI
hook, and gpuslice-runtime, the runtime wrapper (C: they run on every container
start), and installs them in <prefix>/bin, beside the `gpuslice` command. Metadata lives in pyproject.toml.
"""
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
SHIM = HERE / "native" / "shim"
HOOK = HERE / "native" / "hook"


class BuildWithShim(build_py):
    def run(self) -> None:
        super().run()
        subprocess.run(["make", "-s", "-C", str(SHIM)], check=True)
        dest = Path(self.build_lib) / "ocihook" / "native"
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy2(SHIM / "build" / "libgpuslice.so", dest / "libgpuslice.so")
        for header in sorted((HERE / "native" / "include" / "gpuslice").glob("*.h")):
            shutil.copy2(header, dest / header.name)


# Built before setup() names it. A data file, not a script: setuptools reads
# scripts as Python source. pip keeps its mode (executable) and puts <prefix>/bin
# files beside the `gpuslice` command, where the configuration looks for it.
subprocess.run(["make", "-s", "-C", str(HOOK)], check=True)
setup(cmdclass={"build_py": BuildWithShim},
      data_files=[("bin", [str((HOOK / "build" / name).relative_to(HERE))
                           for name in ("gpuslice-hook", "gpuslice-runtime")])])
