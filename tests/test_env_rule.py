"""One env entry a name (issue 27; docs/architecture.md, "One env entry a
name"): when config.json's process.env holds a name twice, the last entry
is the one the container's process gets (runc sets each entry in turn:
checked here with the real runc), so it is the one the hook reads
(GPUSLICE_CLAIM), gpuslice-runtime reads (GPUSLICE) and the shim reads (its
limits, GPUSLICE_LOG); a CDI env edit sets its name wholly, leaving no
other entry of it behind."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from podman_harness import runc_bundle
from test_cdi_apply import KIND, Rig, applied, base_config, spec
from test_shim import GIB, PROGS_DIR, Shim, Variant, results, value_of

MIB = 1 << 20


def test_runc_gives_the_process_the_last_entry(tmp_path: Path) -> None:
    """The fact the rule rests on."""
    bundle = tmp_path / "bundle"
    runc, config = runc_bundle(bundle)
    config["process"].update(terminal=False, args=["sh", "-c", "env | grep ^WHO="],
                             env=["PATH=/bin", "WHO=a", "WHO=b"])
    (bundle / "config.json").write_text(json.dumps(config))
    res = subprocess.run([runc, "run", f"gs-env-{tmp_path.name[-20:]}"], cwd=bundle,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["WHO=b"]


@pytest.fixture(params=[False, True], ids=["plain", "asan"])
def rig(tmp_path: Path, request: pytest.FixtureRequest) -> Rig:
    return Rig(tmp_path, request.param)


def test_a_cdi_env_edit_leaves_one_entry_of_its_name(rig: Rig) -> None:
    config = base_config()
    config["process"]["env"] = ["WHO=a", "PATH=/bin", "WHO=b", "X=1", "WHO=c"]
    c = applied(rig, {"env": ["WHO=spec", "NEW=1"]}, config)
    assert c["process"]["env"] == ["WHO=spec", "PATH=/bin", "X=1", "NEW=1"]


def test_the_wrapper_reads_the_last_gpuslice_entry(rig: Rig) -> None:
    rig.write_spec("g.json", spec(KIND, {n: {"env": [f"G={n}"]} for n in ("0-4g", "1")}))
    res = rig.run({"process": {"env": ["PATH=/bin", "GPUSLICE=0-4g", "GPUSLICE=1"]}})
    assert res.code == 0, res.stderr
    assert res.config["annotations"]["gpuslice.io/applied"] == "gpuslice.io/gpu=1"
    assert "G=1" in res.config["process"]["env"] and "G=0-4g" not in res.config["process"]["env"]


# The shim: a process whose environment holds a name twice (an execve with a
# list of entries, as a runtime that passes them on as they are would make).
EXECVE = ("import ctypes, json, sys\n"
          "argv, envp = json.loads(sys.argv[1]), json.loads(sys.argv[2])\n"
          "arr = lambda l: (ctypes.c_char_p * (len(l) + 1))(*[x.encode() for x in l], None)\n"
          "ctypes.CDLL(None).execve(argv[0].encode(), arr(argv), arr(envp))\n"
          "sys.exit(127)\n")


def run_with_entries(argv: List[str], entries: List[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", EXECVE, json.dumps(argv), json.dumps(entries)],
                          capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def plain(fakedriver: Path) -> Variant:
    v = Variant("plain")
    subprocess.run(["make", "-s", "-C", str(PROGS_DIR), "VARIANT=plain"], check=True)
    return v


def test_the_shim_reads_the_last_entry(plain: Variant, fake_env, tmp_path: Path) -> None:
    # Each order in a state dir of its own: the region the first run makes
    # holds its caps for every later process.
    for state, entries, want in (("state", ["1GiB", "512MiB"], 512 * MIB),
                                 ("state2", ["512MiB", "1GiB"], GIB)):
        shim = Shim(plain, fake_env(2), tmp_path / state)
        base = [f"{k}={v}" for k, v in shim.env.items()
                if not k.startswith("GPUSLICE_MEMORY_LIMIT")]
        res = run_with_entries(shim.argv("direct", "init", "total", "0"),
                               base + [f"GPUSLICE_MEMORY_LIMIT_0={e}" for e in entries])
        assert res.returncode == 0, res.stderr
        assert value_of(results(res), "total", 0) == [0, want]
