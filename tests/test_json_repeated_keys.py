"""One reading of a repeated key in config.json (docs/architecture.md, "One
reading of config.json"): an object that names a member twice means its last
value, as runc (Go's encoding/json) reads it and so as the container gets
it. gpuslice reads config.json with two parsers, the hook's own
(native/hook/common/json.c) and Jansson in gpuslice-runtime (loaded without
JSON_REJECT_DUPLICATES, which keeps the last value): each is checked here
against the same documents, so a change to either that picks another member
fails."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from fakehost import build_hook
from podman_harness import runc_bundle
from test_cdi_apply import KIND, Rig, spec
from test_hook import Node, rows


def repeated(first: object, last: object, key: str, **rest: object) -> bytes:
    """A JSON object that names key twice: first's value, then last's."""
    body = ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in rest.items())
    return (f'{{{body}, {json.dumps(key)}: {json.dumps(first)}, '
            f'{json.dumps(key)}: {json.dumps(last)}}}').encode()


def test_runc_runs_the_last_process(tmp_path: Path) -> None:
    """The fact the rule rests on, with the real runc."""
    bundle = tmp_path / "bundle"
    runc, config = runc_bundle(bundle)
    process = dict(config.pop("process"), terminal=False)
    first = dict(process, args=["echo", "first"])
    last = dict(process, args=["echo", "last"])
    (bundle / "config.json").write_bytes(repeated(first, last, "process", **config))
    res = subprocess.run([runc, "run", f"gs-rep-{tmp_path.name[-20:]}"], cwd=bundle,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["last"]


@pytest.mark.parametrize("asan", [False, True], ids=["plain", "asan"])
def test_the_wrapper_reads_the_last_process(tmp_path: Path, asan: bool) -> None:
    rig = Rig(tmp_path, asan)
    rig.write_spec("g.json", spec(KIND, {n: {"env": [f"G={n}"]} for n in ("0-4g", "1")}))
    res = rig.run(repeated({"env": ["PATH=/bin", "GPUSLICE=0-4g"]},
                           {"env": ["PATH=/bin", "GPUSLICE=1"]}, "process",
                           ociVersion="1.0.2", root={"path": "rootfs"}))
    assert res.code == 0, res.stderr
    assert res.config["annotations"]["gpuslice.io/applied"] == "gpuslice.io/gpu=1"
    assert "G=1" in res.config["process"]["env"]
    assert "G=0-4g" not in res.config["process"]["env"]


@pytest.mark.parametrize("asan", [False, True], ids=["plain", "asan"])
def test_the_hook_reads_the_last_annotations_and_name(tmp_path: Path, driver_root: Path,
                                                      fakedriver: Path, asan: bool) -> None:
    node = Node(tmp_path, driver_root, fakedriver)
    node.hook_path = build_hook(asan=asan)
    base = {"ociVersion": "1.0.2", "root": {"path": "rootfs"}}
    cases = {
        # The annotations object named twice: its last value.
        "objects": repeated({"nerdctl/name": "first"}, {"nerdctl/name": "last"},
                            "annotations", **base),
        # One annotation named twice inside it: its last value.
        "members": (b'{"ociVersion": "1.0.2", "root": {"path": "rootfs"}, "annotations": '
                    b'{"nerdctl/name": "first", "nerdctl/name": "last"}}'),
    }
    for cid, text in cases.items():
        bundle = node.bundle(cid)
        (bundle / "config.json").write_bytes(text)
        res = node.create(cid, "6g", bundle)
        assert res.returncode == 0, (cid, res.stderr)
        assert rows(node.db, "SELECT name FROM reservations WHERE container_id=?", cid) == \
            [("last",)], cid
        assert node.release(cid).returncode == 0
