"""End to end with real Podman (runc) on the fake driver: a slice of a card
in MPS mode gets NVIDIA's MPS client env, its card's pipe folder at
/run/nvidia-mps and its shm folder at /dev/shm, and no pacer cap; while the
card's daemon is down the hook refuses it with the line that says how to
start it. The fake runs no MPS: the daemon is tests/fakempsd's stand-in,
started by `gpuslice mps start` as an operator would.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from fakehost import Host, podman_host
from podman_harness import podman_fixture

podman = podman_fixture()
FAKE_MPS = Path(__file__).resolve().parent / "fakempsd"


@pytest.fixture
def node(tmp_path: Path, driver_root: Path, fakedriver: Path, podman) -> Host:
    return podman_host(tmp_path, driver_root, podman,
                       "  - {name: 6g-50, memory: 6GiB, cores: 50}\ncard_modes: {0: mps}\n")


def test_an_mps_slice_in_podman(podman, node: Host) -> None:
    device = ["gpuslice.io/gpu=0-6g-50"]
    down = podman.run(["true"], devices=device)
    assert down.returncode != 0
    assert "MPS control daemon is not running; start it: `gpuslice mps start 0`" in down.stderr
    path = f"{FAKE_MPS}:{os.environ['PATH']}"
    started = node.run("mps", "start", "0", path=path)
    assert started.returncode == 0, started.stderr
    try:
        shm = node.tmp / "state" / "mps"
        [uuid_dir] = list(shm.iterdir())
        (uuid_dir / "shm" / "from-the-host").write_text("x")
        res = podman.run(["sh", "-c", "env; ls /run/nvidia-mps /dev/shm"], devices=device)
        assert res.returncode == 0, res.stderr
        out = res.stdout.splitlines()
        assert "CUDA_MPS_PIPE_DIRECTORY=/run/nvidia-mps" in out
        assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50" in out
        assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=6144M" in out
        assert "GPUSLICE_MEMORY_LIMIT=6144MiB" in out
        assert not any(ln.startswith("GPUSLICE_CORE_LIMIT=") for ln in out)
        assert "control" in out  # the daemon's pipe, seen inside
        assert "from-the-host" in out  # the card's shm folder is its /dev/shm
        assert "fake-mps-daemon" in out  # what the daemon left in its /dev/shm
    finally:
        assert node.run("mps", "stop", "0", path=path).returncode == 0
    again = podman.run(["true"], devices=device)
    assert again.returncode != 0 and "gpuslice mps start 0" in again.stderr
