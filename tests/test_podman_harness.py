"""The Podman harness applies a hand-written CDI spec from the test's own folder.

These tests run real podman + runc (installed by .ci/run); they never skip.
"""
from __future__ import annotations

import json
import os
import stat
import subprocess
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from podman_harness import CDI_MOUNT_POINT, Podman, busybox_rootfs, podman_fixture

KIND = "gpuslice.io/gpu"
MAJOR, MINOR = 195, 0

podman = podman_fixture()


def make_char_dev(path: Path, major: int = MAJOR, minor: int = MINOR) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(major, minor))
    return path


def write_hook(path: Path) -> Path:
    """A hook that saves its stdin (the OCI state) to $HOOK_OUT and its env next to it.

    runc gives a hook only the env the spec lists (no PATH): absolute paths only.
    """
    path.write_text('#!/bin/sh\n/bin/cat > "$HOOK_OUT"\n/usr/bin/env > "$HOOK_OUT.env"\n')
    path.chmod(0o755)
    return path


def write_spec(spec_dir: Path, devices: List[Dict[str, Any]],
               edits: Optional[Dict[str, Any]] = None, name: str = "gpuslice.json") -> Path:
    spec: Dict[str, Any] = {"cdiVersion": "0.5.0", "kind": KIND, "devices": devices}
    if edits:
        spec["containerEdits"] = edits
    path = spec_dir / name
    path.write_text(json.dumps(spec, indent=2))
    return path


@pytest.fixture
def setup(podman: Podman, tmp_path: Path) -> Dict[str, Any]:
    """A spec with device "0": node, env, ro bind mount, createContainer + poststop hooks."""
    node = make_char_dev(tmp_path / "devroot" / "nvidia0")
    info = tmp_path / "host" / "info.txt"
    info.parent.mkdir()
    info.write_text("slice=0 memory=1024MiB\n")
    (tmp_path / "hooks").mkdir()
    hook = write_hook(tmp_path / "hooks" / "save-state.sh")
    out = tmp_path / "hook-out"
    out.mkdir()
    device = {
        "name": "0",
        "containerEdits": {
            "deviceNodes": [{"path": "/dev/nvidia0", "hostPath": str(node)}],
            "env": ["GPUSLICE_TEST_SLICE=0", "GPUSLICE_TEST_MEMORY=1024"],
            "mounts": [{
                "hostPath": str(info),
                "containerPath": "/etc/gpuslice/info.txt",
                "options": ["ro", "nosuid", "nodev", "bind"],
            }],
            "hooks": [
                {"hookName": "createContainer", "path": str(hook),
                 "args": ["save-state.sh", "createContainer"],
                 "env": ["HOOK_OUT=%s" % (out / "createContainer.json")]},
                {"hookName": "poststop", "path": str(hook),
                 "args": ["save-state.sh", "poststop"],
                 "env": ["HOOK_OUT=%s" % (out / "poststop.json")]},
            ],
        },
    }
    spec = write_spec(podman.cdi_dir, [device])
    return {"node": node, "info": info, "out": out, "spec": spec}


def wait_for(path: Path, seconds: float = 10) -> Path:
    deadline = time.monotonic() + seconds
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert path.exists(), "%s was not written" % path
    return path


def test_busybox_rootfs(tmp_path: Path) -> None:
    root = busybox_rootfs(tmp_path / "rootfs")
    bb = root / "bin" / "busybox"
    assert bb.is_file() and os.access(bb, os.X_OK)
    for applet in ("sh", "cat", "ls", "env", "stat", "mount", "test", "grep", "sleep"):
        link = root / "bin" / applet
        assert link.is_symlink(), applet
        assert os.readlink(link) == "busybox", applet  # relative: valid inside the container
    res = subprocess.run([str(root / "bin" / "sh"), "-c", "echo ok"], capture_output=True, text=True)
    assert (res.returncode, res.stdout) == (0, "ok\n")
    assert busybox_rootfs(root) == root  # reusable


def test_plain_run_and_isolated_state(podman: Podman) -> None:
    res = podman.run(["sh", "-c", "echo out; echo err >&2; echo $A; exit 3"], env={"A": "b c"})
    assert res.returncode == 3, res.stderr
    assert res.stdout == "out\nb c\n"
    assert res.stderr == "err\n"
    assert res.container_id and len(res.container_id) == 64
    info = json.loads(podman.podman(["info", "--format", "json"], check=True).stdout)
    assert info["store"]["graphRoot"] == str(podman.root)
    assert info["store"]["runRoot"] == str(podman.runroot)
    assert info["store"]["graphDriverName"] == "vfs"
    assert info["host"]["ociRuntime"]["name"] == "runc"
    assert info["host"]["cgroupManager"] == "cgroupfs"
    assert podman.containers() == []  # --rm removed it


def test_cdi_device_node(podman: Podman, setup: Dict[str, Any]) -> None:
    res = podman.run(["stat", "-c", "%F|%t|%T", "/dev/nvidia0"], devices=[KIND + "=0"])
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "character special file|%x|%x" % (MAJOR, MINOR)
    # without the device the node is absent
    res = podman.run(["test", "-e", "/dev/nvidia0"])
    assert res.returncode == 1, res.stderr


def test_cdi_env(podman: Podman, setup: Dict[str, Any]) -> None:
    res = podman.run(["env"], devices=[KIND + "=0"], env={"OTHER": "1"})
    assert res.returncode == 0, res.stderr
    env = dict(line.split("=", 1) for line in res.stdout.splitlines() if "=" in line)
    assert env["GPUSLICE_TEST_SLICE"] == "0"
    assert env["GPUSLICE_TEST_MEMORY"] == "1024"
    assert env["OTHER"] == "1"


def test_cdi_readonly_bind_mount(podman: Podman, setup: Dict[str, Any]) -> None:
    script = ("cat /etc/gpuslice/info.txt; "
              "if echo x >> /etc/gpuslice/info.txt; then echo WRITABLE; fi; "
              "grep ' /etc/gpuslice/info.txt ' /proc/mounts")
    res = podman.run(["sh", "-c", script], devices=[KIND + "=0"])
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "slice=0 memory=1024MiB"
    assert "WRITABLE" not in res.stdout
    assert lines[1].split()[3].split(",")[0] == "ro", lines
    assert setup["info"].read_text() == "slice=0 memory=1024MiB\n"


def test_cdi_hooks_get_oci_state(podman: Podman, setup: Dict[str, Any]) -> None:
    res = podman.run(["true"], devices=[KIND + "=0"])
    assert res.returncode == 0, res.stderr
    assert res.container_id
    out: Path = setup["out"]
    create = json.loads(wait_for(out / "createContainer.json").read_text())
    poststop = json.loads(wait_for(out / "poststop.json").read_text())
    for state in (create, poststop):
        assert state["id"] == res.container_id
        assert state["bundle"].startswith(str(podman.root))
        assert state["annotations"]["io.container.manager"] == "libpod"
    assert create["status"] == "creating"
    assert poststop["status"] == "stopped"
    # a hook gets only the env its spec entry lists (runc: not even PATH)
    env = (out / "createContainer.json.env").read_text().splitlines()
    assert "HOOK_OUT=%s" % (out / "createContainer.json") in env
    assert not any(line.startswith("PATH=") for line in env), env


def test_unknown_cdi_device_fails_naming_it(podman: Podman, setup: Dict[str, Any]) -> None:
    res = podman.run(["true"], devices=[KIND + "=7"])
    assert res.returncode != 0
    assert KIND + "=7" in res.stderr
    assert not (setup["out"] / "createContainer.json").exists()


def test_each_podman_sees_only_its_own_specs(tmp_path: Path) -> None:
    a = Podman(tmp_path / "a")
    b = Podman(tmp_path / "b")
    try:
        write_spec(a.cdi_dir, [{"name": "0", "containerEdits": {"env": ["WHO=a"]}}])
        write_spec(b.cdi_dir, [{"name": "0", "containerEdits": {"env": ["WHO=b"]}},
                               {"name": "1", "containerEdits": {"env": ["WHO=b1"]}}])
        assert a.run(["sh", "-c", "echo $WHO"], devices=[KIND + "=0"]).stdout == "a\n"
        assert b.run(["sh", "-c", "echo $WHO"], devices=[KIND + "=0"]).stdout == "b\n"
        res = a.run(["true"], devices=[KIND + "=1"])
        assert res.returncode != 0 and KIND + "=1" in res.stderr
    finally:
        a.cleanup()
        b.cleanup()
    # the host's CDI folder is untouched by the bind mounts
    assert not (Path(CDI_MOUNT_POINT) / "gpuslice.json").exists()


def test_several_spec_dirs_yaml_and_json(tmp_path: Path) -> None:
    d1, d2 = tmp_path / "specs1", tmp_path / "specs2"
    d1.mkdir()
    d2.mkdir()
    write_spec(d1, [{"name": "0", "containerEdits": {"env": ["ONE=1"]}}], name="one.json")
    (d2 / "two.yaml").write_text(
        'cdiVersion: "0.5.0"\n'
        "kind: example.com/nic\n"
        "devices:\n"
        "  - name: eth\n"
        "    containerEdits:\n"
        "      env: [\"TWO=2\"]\n")
    p = Podman(tmp_path / "p", [d1, d2])
    try:
        res = p.run(["sh", "-c", "echo $ONE$TWO"], devices=[KIND + "=0", "example.com/nic=eth"])
        assert res.returncode == 0, res.stderr
        assert res.stdout == "12\n"
    finally:
        p.cleanup()


def test_timeout_kills_and_removes_container(podman: Podman) -> None:
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        podman.run(["sleep", "60"], timeout=2)
    assert time.monotonic() - t0 < 30
    assert podman.containers() == []


def test_cleanup_removes_leftover_containers(podman: Podman) -> None:
    argv = podman.run_command(["sleep", "60"], name="leftover")
    argv.insert(argv.index("--rm"), "--detach")
    argv.remove("--rm")
    res = podman.podman(argv[argv.index("run"):], check=True)
    assert res.returncode == 0, res.stderr
    assert [c["Names"] for c in podman.containers()] == [["leftover"]]
    podman.cleanup()
    assert podman.containers() == []
