"""gpuslice-runtime's own behaviour (native/hook/runtime/), with a
recording stand-in for runc and for the CDI cache tool: what is passed
through, byte for byte; where the bundle is found; when the cache tool runs;
what a failure says, on stderr and in runc's JSON log; the lookups of the
real runtime. What it applies is in test_cdi_apply.py, the real engines in
test_runtime_e2e.py.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from fakehost import build_runtime


class Rig:
    def __init__(self, tmp: Path, asan: bool) -> None:
        self.tmp = tmp
        self.wrapper = build_runtime(asan)
        self.calls = tmp / "calls"
        self.calls.mkdir()
        # The stand-in runtime records its argv (one per line) and cwd.
        self.runc = tmp / "fake-runc"
        self.runc.write_text(f'#!/bin/sh\n{{ pwd; for a in "$@"; do echo "$a"; done; }} '
                             f'> {self.calls}/runc\nexit 7\n')
        self.runc.chmod(0o755)
        # The stand-in cache tool records its argv and writes CACHE: every
        # device asked for below, with one env edit. Untrusted, so that each
        # request runs the tool again.
        self.cache = tmp / "cache.json"
        self.cache_doc = tmp / "cache-doc.json"
        self.cache_doc.write_text(json.dumps({
            "version": 1, "trusted": False, "env": {}, "inputs": [], "kind": "gpuslice.io/gpu",
            "specs": [{}], "conflicts": {}, "offers": {}, "errors": [],
            "devices": {name: {"spec": 0, "edits": {"env": ["APPLIED=1"]}}
                        for name in ("gpuslice.io/gpu=0-4g", "gpuslice.io/gpu=4g",
                                     "v.com/c=1")}}))
        self.tool = tmp / "fake-cache-tool"
        self.set_tool(0)
        self.bundle = tmp / "bundle"
        self.bundle.mkdir()

    def set_tool(self, code: int, say: str = "", write: bool = True) -> None:
        self.tool.write_text(
            f'#!/bin/sh\necho "$@" > {self.calls}/tool\n'
            + (f'cp {self.cache_doc} "$2"\n' if write else "")
            + (f"printf '%s\\n' {shlex.quote(say)} >&2\n" if say else "") + f"exit {code}\n")
        self.tool.chmod(0o755)

    def config(self, doc: object) -> bytes:
        data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
        (self.bundle / "config.json").write_bytes(data)
        return data

    def run(self, args: List[str], env: Optional[Dict[str, str]] = None,
            own: bool = True, cwd: Optional[Path] = None) -> subprocess.CompletedProcess:
        for f in self.calls.iterdir():
            f.unlink()
        pre = ["--gpuslice-runtime", str(self.runc), "--gpuslice-cache-tool", str(self.tool)] \
            if own else []
        env = dict(env if env is not None else os.environ, GPUSLICE_CDI_CACHE=str(self.cache))
        return subprocess.run([str(self.wrapper), *pre, *args], capture_output=True, text=True,
                              env=env, cwd=str(cwd or self.tmp), timeout=60)

    def runc_argv(self) -> Optional[List[str]]:
        path = self.calls / "runc"
        return path.read_text().splitlines()[1:] if path.exists() else None

    def tool_ran(self) -> Optional[str]:
        path = self.calls / "tool"
        return path.read_text().strip() if path.exists() else None

    def applied(self) -> bool:
        return "APPLIED=1" in json.loads((self.bundle / "config.json").read_text())[
            "process"]["env"]


@pytest.fixture(params=[False, True], ids=["plain", "asan"])
def rig(tmp_path: Path, request: pytest.FixtureRequest) -> Rig:
    """Each test runs the plain build and the ASan/UBSan one (an error there aborts
    it with a report, so the test sees a wrong status)."""
    return Rig(tmp_path, request.param)


ASKS = {"process": {"env": ["PATH=/bin", "GPUSLICE=0-4g"]}}
ASKS_NOTHING = {"process": {"env": ["PATH=/bin", "GPUSLICE_MEMORY_LIMIT=1g", "GPUSLICEX=1"]},
                "annotations": {"io.other/x": "1"}}


def test_other_commands_pass_through_unchanged(rig: Rig) -> None:
    for args in (["state", "c1"], ["--root", "/r", "--log", "/l", "kill", "c1", "KILL"],
                 ["delete", "--force", "c1"], ["--version"], ["start", "c1"]):
        res = rig.run(args)
        assert res.returncode == 7, res.stderr  # the stand-in's status: it was exec'ed
        assert rig.runc_argv() == args  # our own options gone, the rest as given
        assert rig.tool_ran() is None


def test_no_request_leaves_config_alone(rig: Rig) -> None:
    # An array at the top whose elements look like members (F3: their keys were
    # read uninitialised; tests/test_fuzz.py replays it under MemorySanitizer).
    for doc in (ASKS_NOTHING, b"not json at all", b"[1, 2]", b'["x", {"process": 1}, 3]',
                b'["process", {"env": ["GPUSLICE=1"]}]'):
        before = rig.config(doc)
        res = rig.run(["create", "--bundle", str(rig.bundle), "c1"])
        assert res.returncode == 7 and rig.tool_ran() is None, res.stderr
        assert (rig.bundle / "config.json").read_bytes() == before
    (rig.bundle / "config.json").unlink()  # missing: runc's to report
    assert rig.run(["create", "-b", str(rig.bundle), "c1"]).returncode == 7


@pytest.mark.parametrize("spelling", [
    ["--bundle", "B"], ["--bundle=B"], ["-b", "B"], ["-b=B"], ["-bundle", "B"]])
def test_bundle_spellings(rig: Rig, spelling: List[str]) -> None:
    rig.config(ASKS)
    args = ["--log", "/dev/null", "create", "--pid-file", "/p", *[
        a.replace("B", str(rig.bundle)) for a in spelling], "--console-socket", "/s", "c1"]
    res = rig.run(args)
    assert res.returncode == 7, res.stderr
    assert rig.tool_ran() == f"--output {rig.cache}" and rig.applied()
    assert rig.runc_argv() == args


def test_bundle_defaults_to_the_current_folder_and_run_counts(rig: Rig) -> None:
    rig.config({"annotations": {"cdi.k8s.io/x": "v.com/c=1"}})
    res = rig.run(["run", "--detach", "c1"], cwd=rig.bundle)
    assert res.returncode == 7 and rig.tool_ran() == f"--output {rig.cache}", res.stderr
    rig.config({"process": {"env": []}, "annotations": {"gpuslice.io/request": "4g"}})
    assert rig.run(["create", "c2"], cwd=rig.bundle).returncode == 7
    assert rig.tool_ran() == f"--output {rig.cache}" and rig.applied()


def test_a_refused_request_never_reaches_runc_and_is_logged(rig: Rig) -> None:
    rig.config({"process": {"env": ["GPUSLICE=0-99g"]}})
    log = rig.tmp / "runc.log"
    res = rig.run(["--log", str(log), "--log-format", "json", "create", "--bundle",
                   str(rig.bundle), "c1"])
    line = ("gpuslice-runtime: error: unknown CDI device gpuslice.io/gpu=0-99g; "
            "no spec offers kind gpuslice.io/gpu")
    assert res.returncode == 1 and res.stderr == line + "\n"
    assert rig.runc_argv() is None
    entry = json.loads(log.read_text().splitlines()[-1])
    assert entry["level"] == "error" and entry["msg"] == line


def test_a_failing_cache_tool_is_reported_and_logged(rig: Rig) -> None:
    rig.config(ASKS)
    log = rig.tmp / "runc.log"
    rig.set_tool(2, "gpuslice-cdi-cache: error: /etc/gpuslice/config.yaml: bad", write=False)
    res = rig.run(["--log", str(log), "--log-format", "json", "create", "--bundle",
                   str(rig.bundle), "c1"])
    assert res.returncode == 1 and rig.runc_argv() is None
    assert res.stderr == "gpuslice-cdi-cache: error: /etc/gpuslice/config.yaml: bad\n"
    assert json.loads(log.read_text().splitlines()[-1])["msg"] == \
        "gpuslice-cdi-cache: error: /etc/gpuslice/config.yaml: bad"
    # The tool's last line goes into the log as a JSON string, whatever it holds.
    rig.set_tool(2, 'gpuslice-cdi-cache: error: a "quoted" \\path\twith a tab', write=False)
    rig.run(["--log", str(log), "--log-format", "json", "create", "--bundle", str(rig.bundle),
             "c1"])
    assert json.loads(log.read_text().splitlines()[-1])["msg"] == \
        'gpuslice-cdi-cache: error: a "quoted" \\path\twith a tab'
    rig.set_tool(3, write=False)  # fails without a word
    res = rig.run(["create", "--bundle", str(rig.bundle), "c1"])
    assert res.returncode == 1 and "said nothing" in res.stderr and rig.runc_argv() is None
    rig.set_tool(0, write=False)  # says it made the cache, but there is none
    res = rig.run(["create", "--bundle", str(rig.bundle), "c1"])
    assert res.returncode == 1 and rig.runc_argv() is None
    assert res.stderr == (f"gpuslice-runtime: error: the CDI cache {rig.cache} is missing after "
                          f"{rig.tool} made it\n")


def test_lookups_and_their_errors(rig: Rig) -> None:
    rig.config(ASKS_NOTHING)
    env = dict(os.environ, PATH=str(rig.tmp / "nothing"))
    res = rig.run(["state", "c1"], env=env, own=False)
    assert res.returncode == 2
    assert "no runc in PATH" in res.stderr and "--gpuslice-runtime PATH" in res.stderr
    res = rig.run(["state", "c1"], env=dict(env, GPUSLICE_RUNTIME_BINARY=str(rig.runc)),
                  own=False)
    assert res.returncode == 7 and rig.runc_argv() == ["state", "c1"]
    # A runc in PATH that is the wrapper itself is passed over, never exec'ed for ever.
    (rig.tmp / "bin1").mkdir()
    (rig.tmp / "bin2").mkdir()
    os.symlink(rig.wrapper, rig.tmp / "bin1" / "runc")
    os.symlink(rig.runc, rig.tmp / "bin2" / "runc")
    res = rig.run(["state", "c1"], env=dict(os.environ, PATH=f"{rig.tmp}/bin1:{rig.tmp}/bin2"),
                  own=False)
    assert res.returncode == 7 and rig.runc_argv() == ["state", "c1"]
    res = rig.run(["--gpuslice-runtime", str(rig.wrapper), "state", "c1"], own=False)
    assert res.returncode == 2
    res = rig.run(["--gpuslice-runtime"], own=False)
    assert res.returncode == 2 and "--gpuslice-runtime" in res.stderr


def test_its_own_errors_are_one_line(rig: Rig) -> None:
    """A path that holds a newline (from the caller's arguments or environment) is
    named with the newline escaped, on stderr and in the JSON log."""
    rig.config(ASKS_NOTHING)
    log = rig.tmp / "runc.log"
    res = rig.run(["--gpuslice-runtime", str(rig.tmp / "no\nrunc"), "--log", str(log),
                   "--log-format", "json", "state", "c1"], own=False)
    line = f"gpuslice-runtime: error: cannot run the real runtime {rig.tmp}/no\\nrunc: No such " \
           "file or directory"
    assert res.returncode == 2 and res.stderr == line + "\n"
    assert json.loads(log.read_text().splitlines()[-1])["msg"] == line
