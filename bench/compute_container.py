"""Tenants of the compute benches in runc containers made by gpuslice-runtime.

Made the way tests/gpu makes them (tests/gpu/check_runtime.py): a bundle
whose root binds the host's /usr, /etc and /opt read-only (PyTorch lives in
/opt), run by `gpuslice-runtime run` over runc on a node of the bench's own
(its configuration, spec, database and state in a folder of the bench's).
The container asks for its slice with GPUSLICE=<device>; the spec and the
hook give it the rest (the shim, the card folder, its cap or its MPS share
and the MPS pipes), as they give any container. Inside, bench/ is bound
read-only at /bench and the tenant's folder of bench/compute_run.py (its
phases in, its result and nothing else out) read-write at /out.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import IO, Dict, List

import compute_run as cr
from compute_run import Tenant

sys.path.insert(0, str(cr.REPO / "tests" / "gpu"))
import check_runtime  # noqa: E402  (tests/gpu: how the checks make containers)

BENCH_IN = "/bench"
FOLDER_IN = "/out"
ID_PREFIX = "gpuslice-bench-"
# Passed into the container where set: what the shim decides, for a run looked into.
PASSED = ("GPUSLICE_LOG",)


def tenant_spec(spec: dict, t: Tenant, cmd: List[str], folder: Path) -> dict:
    """The bundle's config.json for tenant t running cmd, from the checks' spec
    (check_runtime.bundle_config)."""
    assert t.device, f"tenant {t.key} names no device"
    env = ["PYTHONUNBUFFERED=1", *(f"{k}={v}" for k, v in sorted(t.env.items())),
           *(f"{k}={os.environ[k]}" for k in PASSED if k in os.environ)]
    return check_runtime.slice_process(spec, cmd, t.device,
                                       [(cr.HERE, BENCH_IN, "ro"), (folder, FOLDER_IN, "rw")],
                                       env)


def container_id(t: Tenant) -> str:
    return ID_PREFIX + t.key


class Containers(cr.Launcher):
    """Starts each tenant in a container of the stack's node; remove() deletes them all."""
    bench = BENCH_IN

    def __init__(self, stack: check_runtime.Stack, bundles: Path) -> None:
        self.stack = stack
        self.bundles = bundles
        self.python = check_runtime.torch_python()
        self.ids: List[str] = []

    def seen(self, folder: Path) -> str:
        return FOLDER_IN

    def start(self, t: Tenant, cmd: List[str], env: Dict[str, str], folder: Path,
              log: IO[str]) -> subprocess.Popen:
        # env (a plain process's) is not the container's: the spec and the hook give that.
        cid = container_id(t)
        self.ids.append(cid)
        return check_runtime.start_container(
            self.stack, self.bundles / t.key, cid,
            lambda spec: tenant_spec(spec, t, cmd, folder), stdout=log, stderr=subprocess.STDOUT)

    def remove(self) -> None:
        """Delete every container started (runc run ends its own as its process exits; one
        whose runc was killed stays, and holds its slice, until deleted)."""
        for cid in self.ids:
            subprocess.run([self.stack.runc, "delete", "-f", cid], capture_output=True)
        self.ids.clear()
