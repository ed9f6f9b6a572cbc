"""The audit table of native/shim/README.md against the shim and the drivers.

Every hooked driver function is in the table, every row that says the shim
charges, releases, tracks or shows is hooked and names a test that exists,
and every export of the fake driver in the memory families (MEMORY_API) is
accounted for. The same check against the real libcuda.so.1 runs on a GPU
host (tests/gpu/check_memory_paths.py).
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest

import memory_paths as mp

GPU_CHECK = mp.REPO / "tests" / "gpu" / "check_memory_paths.py"
sys.path.insert(0, str(GPU_CHECK.parent))
import check_memory_paths as gpu  # noqa: E402  (imports nothing of the GPU's at load)


def test_the_table_agrees_with_the_shims_hooks() -> None:
    rows = mp.table()
    assert len(rows) > 30
    assert mp.problems(rows, mp.hooks(), mp.launch_rows()) == []


def test_every_memory_export_of_the_fake_driver_is_accounted_for(fakedriver: Path) -> None:
    dyn = subprocess.run(["readelf", "-W", "--dyn-syms", str(fakedriver / "libcuda.so.1")],
                         capture_output=True, text=True, check=True).stdout
    exports = [line.split()[-1] for line in dyn.splitlines()
               if " FUNC " in line and " GLOBAL " in line and " UND " not in line]
    assert len([e for e in exports if mp.MEMORY_API.match(e)]) > 40
    assert mp.unaccounted(exports, mp.table()) == []


def test_every_gpu_path_the_table_names_is_checked_on_the_gpu() -> None:
    named = {label.strip() for r in mp.table()
             for part in re.findall(r"GPU: ([^;|]+)", r.tests) for label in part.split(",")}
    checked = set(re.findall(r'^\s+"([^"]+)": ', GPU_CHECK.read_text(), re.M))
    assert named and named <= checked, sorted(named - checked)


def test_the_check_finds_what_is_missing(tmp_path: Path) -> None:
    """Each rule can fail: a hook left out, a row claiming a hook that is not
    one, a name outside the memory families, an unknown test, a new export."""
    text = mp.README.read_text()
    rows = mp.table()
    hooked = mp.hooks()
    launches = mp.launch_rows()
    # A hook missing from the table.
    without = tmp_path / "without.md"
    without.write_text(text.replace("| `cuGraphExecDestroy` |", "| `cuGraphExecDestroyX` |"))
    found = mp.problems(mp.table(without), hooked, launches)
    assert any(p.startswith("cuGraphExecDestroy: hooked") for p in found), found
    # A row that says charged but is not hooked, and a test that does not exist.
    fake = rows + [mp.Row(["cuMemAllocTwice"], "charged", "**charged**",
                          "`tests/test_shim.py::test_no_such_test`")]
    found = mp.problems(fake, hooked, launches)
    assert any("does not hook it" in p for p in found)
    assert any("test_no_such_test does not exist" in p for p in found)
    assert any(p.startswith("cuFoo") for p in mp.problems(
        rows + [mp.Row(["cuFoo"], "none", "**none**", "—")], hooked, launches))
    # Exports: a new family member is caught; per-thread variants of rows the
    # shim does not hook are accounted for, of hooked ones they are not.
    assert mp.unaccounted(["cuMemAllocQuantum", "cuMemcpy", "cuGraphicsMapResources_ptsz"],
                          rows) == ["cuMemAllocQuantum"]
    assert mp.unaccounted(["cuMemAlloc_v2_ptds"], rows) == ["cuMemAlloc_v2_ptds"]


@pytest.fixture(scope="module")
def gpu_cuprog(fakedriver: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """cuprog as the GPU check builds it (gcc alone), here against the fake driver."""
    subprocess.run(["make", "-s", "-C", str(mp.REPO / "native" / "shim")], check=True)
    out = tmp_path_factory.mktemp("gpu-cuprog") / "cuprog"
    res = gpu.build_cuprog(fakedriver / "libcuda.so.1", out)
    assert res.returncode == 0, res.stderr
    return out


# The module path loads PTX, which only a real driver compiles.
FAKE_PATHS = [name for name in gpu.PATHS if name != "module"]


@pytest.mark.parametrize("name", FAKE_PATHS)
def test_the_gpu_checks_paths_on_the_fake_driver(gpu_cuprog: Path, fake_env, tmp_path: Path,
                                                 name: str) -> None:
    """Each path of the GPU check, on the fake card (whose 140 GiB would
    take anything): the codes it expects come from the shim's cap."""
    ops, op, want, extra = gpu.PATHS[name]
    procs = tmp_path / "procs"
    procs.mkdir()
    env: Dict[str, str] = dict(fake_env(1), LD_PRELOAD=str(gpu.SHIM),
                               GPUSLICE_MEMORY_LIMIT=str(gpu.CAP),
                               GPUSLICE_STATE_DIR=str(tmp_path / "state"),
                               GPUSLICE_FAKE_PROCS=str(procs), **extra)
    env.pop("GPUSLICE_MEMORY_LIMIT_0", None)
    res = subprocess.run([str(gpu_cuprog), "dlsym", "init", "pctx", "0", *ops, "resident", "0",
                          "hold"], env=env, input="", capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    rows = [line.split() for line in res.stdout.splitlines()]
    assert [int(r[1]) for r in rows if r[0] == op] == want, res.stdout
    resident = [int(r[2]) for r in rows if r[0] == "resident"]
    assert resident and 0 < resident[0] <= gpu.CAP, res.stdout
