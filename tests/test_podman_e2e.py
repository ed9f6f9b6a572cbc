"""End to end: a spec from `gpuslice cdi generate`, applied by real Podman with runc.

Fake GPUs come from JSON, device nodes are made with mknod in a temporary dev
root, the driver root holds real ELF libraries and our fake NVML; Podman reads
the spec from the test's own CDI folder and runs a busybox container.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from cdi.generate import HOOK_ENV_PATH
from fakehost import DRIVER_VERSION, LIBDIR, NVIDIA_MAJOR, Host, fake_gpu
from podman_harness import podman_fixture

podman = podman_fixture()
SHIM_MARKER = "not a real shim: marks the mount"

# Inside the container: each device node with type and numbers, the env, and
# what the driver mounts hold.
PROBE = r"""
for n in /dev/nvidia0 /dev/nvidia1 /dev/nvidiactl /dev/nvidia-uvm /dev/nvidia-uvm-tools; do
  if [ -c "$n" ]; then echo "node $n $(stat -c '%t:%T' "$n")"; else echo "node $n absent"; fi
done
env | sed 's/^/env /'
for f in LIBDIR/libcuda.so.1 LIBDIR/libnvidia-ml.so.1 LIBDIR/libnvidia-ptxjitcompiler.so.1 \
         /lib/firmware/nvidia/VERSION/gsp_ga10x.bin; do
  if [ -f "$f" ]; then echo "file $f"; else echo "file $f absent"; fi
done
echo "smi $(/usr/bin/nvidia-smi)"
if touch LIBDIR/libcuda.so.1 2>/dev/null; then echo "libs writable"; else echo "libs read-only"; fi
if [ -f /usr/lib/gpuslice/libgpuslice.so ]; then echo "shim $(cat /usr/lib/gpuslice/libgpuslice.so)"; fi
if [ -d /run/gpuslice/cards ]; then
  if touch /run/gpuslice/cards/probe 2>/dev/null; then echo "cards writable"; else echo "cards read-only"; fi
fi
""".replace("LIBDIR", LIBDIR).replace("VERSION", DRIVER_VERSION)


def probe(podman, device: str):
    res = podman.run(["sh", "-c", PROBE], devices=[f"gpuslice.io/gpu={device}"])
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    nodes = dict(line.split(" ", 2)[1:] for line in lines if line.startswith("node "))
    env = dict(line[4:].split("=", 1) for line in lines if line.startswith("env "))
    return lines, nodes, env


@pytest.fixture
def host(tmp_path: Path, driver_root: Path, fakedriver: Path, podman) -> Host:
    (tmp_path / "host").mkdir()
    gpus = [fake_gpu(0, memory_mib=16384), fake_gpu(1, memory_mib=16384)]
    h = Host(tmp_path / "host", driver_root, gpus, spec_dir=podman.cdi_dir)
    h.shim.write_text(SHIM_MARKER)
    # The hook records its arguments (argv[0] aside: a shell script sees its
    # own path there), its env, and the OCI state it gets on stdin.
    log = tmp_path / "hook-log"
    log.mkdir()
    h.hook.write_text(f'#!/bin/sh\nn=$(/bin/date +%s%N)\necho "$@" > {log}/$n.args\n'
                      f'/bin/cat > {log}/$n.state\n/usr/bin/env > {log}/$n.env\n')
    h.hook_log = log
    res = h.run("cdi", "generate")
    assert res.returncode == 0, res.stderr
    assert (podman.cdi_dir / "gpuslice.yaml").exists()
    return h


def hook_calls(host: Host):
    calls = []
    for args in sorted(host.hook_log.glob("*.args")):
        state = json.loads(args.with_suffix(".state").read_text())
        env = args.with_suffix(".env").read_text().split()
        calls.append((args.read_text().split(), state, env))
    return calls


def test_whole_card(podman, host):
    lines, nodes, env = probe(podman, "0")
    assert nodes["/dev/nvidia0"] == f"{NVIDIA_MAJOR:x}:0"
    assert nodes["/dev/nvidia1"] == "absent"  # card 1 is not this container's
    assert nodes["/dev/nvidiactl"] == f"{NVIDIA_MAJOR:x}:ff"
    assert nodes["/dev/nvidia-uvm"] != "absent" and nodes["/dev/nvidia-uvm-tools"] != "absent"
    assert env["GPUSLICE_DRIVER_VERSION"] == DRIVER_VERSION
    assert "GPUSLICE_MEMORY_LIMIT" not in env and "LD_PRELOAD" not in env
    assert not [line for line in lines if line.startswith("file") and line.endswith("absent")]
    assert "smi fake nvidia-smi" in lines
    assert "libs read-only" in lines
    assert not [line for line in lines if line.startswith("shim")]
    calls = hook_calls(host)
    # Each hook gets the args the spec gives it: the request and the books.
    assert [c[0] for c in calls] == [host.spec_hook("0")[1:], host.spec_hook("0", "poststop")[1:]]
    assert calls[0][0][:6] == ["create", "--device", "0", "--card", fake_gpu(0)["uuid"],
                               "--exclusive"]
    create_state = calls[0][1]
    assert create_state["status"] == "creating" and create_state["id"]
    assert create_state["bundle"].startswith("/")  # where the hook will read config.json
    assert calls[1][1]["id"] == create_state["id"] and calls[1][1]["status"] == "stopped"
    assert [e for e in calls[0][2] if e.startswith("PATH=")] == [HOOK_ENV_PATH]


def test_slice_of_one_card(podman, host):
    lines, nodes, env = probe(podman, "1-4g-30")
    assert nodes["/dev/nvidia1"] == f"{NVIDIA_MAJOR:x}:1"
    assert nodes["/dev/nvidia0"] == "absent"
    assert env["GPUSLICE_MEMORY_LIMIT"] == "4096MiB"
    assert env["GPUSLICE_CORE_LIMIT"] == "30"
    assert env["LD_PRELOAD"] == "/usr/lib/gpuslice/libgpuslice.so"
    assert f"shim {SHIM_MARKER}" in lines
    assert "cards writable" in lines  # the host's card files, shared by the card's tenants
    assert "smi fake nvidia-smi" in lines
    assert [c[0][:9] for c in hook_calls(host)][0] == [
        "create", "--device", "1-4g-30", "--card", fake_gpu(1)["uuid"], "--memory-mib", "4096",
        "--cores", "30"]
    assert [c[0][0] for c in hook_calls(host)] == ["create", "release"]


def test_cardless_profile_and_all(podman, host):
    _, nodes, env = probe(podman, "4g")
    assert nodes["/dev/nvidia0"] != "absent" and nodes["/dev/nvidia1"] != "absent"
    assert env["GPUSLICE_MEMORY_LIMIT"] == "4096MiB" and "GPUSLICE_CORE_LIMIT" not in env
    _, nodes, env = probe(podman, "all")
    assert nodes["/dev/nvidia0"] != "absent" and nodes["/dev/nvidia1"] != "absent"
    assert "GPUSLICE_MEMORY_LIMIT" not in env


def test_uuid_device_and_unknown_device(podman, host):
    _, nodes, _ = probe(podman, fake_gpu(1)["uuid"])
    assert nodes["/dev/nvidia1"] != "absent" and nodes["/dev/nvidia0"] == "absent"
    res = podman.run(["true"], devices=["gpuslice.io/gpu=0-32g"])  # 32g > the 16 GiB card
    assert res.returncode != 0
    assert "gpuslice.io/gpu=0-32g" in res.stderr
