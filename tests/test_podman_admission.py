"""End to end: real Podman with runc runs the real gpuslice-hook, which admits
containers against the accountant (a real SQLite file) and releases them.

The spec comes from `gpuslice cdi generate`, which also tells the accountant
which (fake) cards there are. The hook runs as runc runs it: a
createContainer hook in the container's mount namespace, the OCI state on
stdin, and a poststop hook after the container is gone.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from fakehost import Host, fake_gpu, podman_host
from podman_harness import podman_fixture

podman = podman_fixture()


@pytest.fixture
def node(tmp_path: Path, driver_root: Path, fakedriver: Path, podman) -> Host:
    return podman_host(tmp_path, driver_root, podman, "  - {name: 6g, memory: 6GiB}\n")


def status(node: Host) -> dict:
    res = node.run("status", "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def start(podman, device: str):
    return podman.run(["sleep", "600"], devices=[f"gpuslice.io/gpu={device}"],
                      extra_args=["--detach"], timeout=120)


def test_third_6g_refused_until_one_stops(podman, node: Host) -> None:
    first, second = start(podman, "0-6g"), start(podman, "0-6g")
    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    third = start(podman, "0-6g")
    assert third.returncode != 0
    assert "0-6g: card 0 (GPU-" in third.stderr
    assert "4096 MiB free of 16384 MiB, 6144 MiB asked; stop a container" in third.stderr
    held = status(node)["cards"][0]
    assert held["reserved_mib"] == 12288 and len(held["containers"]) == 2
    assert {c["runtime"] for c in held["containers"]} == {"runc"}
    # Each admitted container has its state dir.
    for r in (first, second):
        assert (node.tmp / "state" / "containers" / r.stdout.strip()).is_dir()
    # Stop one: its poststop gives the slice back, the third now starts.
    stop = podman.podman(["stop", "--time", "0", first.stdout.strip()], timeout=120)
    assert stop.returncode == 0, stop.stderr
    for _ in range(100):  # --rm removes it (and runs poststop) just after stop returns
        if len(status(node)["cards"][0]["containers"]) == 1:
            break
        time.sleep(0.1)
    assert not (node.tmp / "state" / "containers" / first.stdout.strip()).exists()
    third = start(podman, "0-6g")
    assert third.returncode == 0, third.stderr
    ids = sorted(c["id"] for c in status(node)["cards"][0]["containers"])
    assert ids == sorted([second.stdout.strip(), third.stdout.strip()])


def test_killed_container_is_reclaimed_at_next_admission(podman, node: Host) -> None:
    a, b = start(podman, "0-6g"), start(podman, "0-6g")
    assert a.returncode == 0 and b.returncode == 0, (a.stderr, b.stderr)
    # kill -9 of the container's process and of its conmon: no poststop comes.
    info = json.loads(podman.podman(["inspect", a.stdout.strip()], check=True).stdout)[0]
    pid, conmon = info["State"]["Pid"], info["State"]["ConmonPid"]
    os.kill(conmon, 9)
    os.kill(pid, 9)
    for _ in range(100):
        if not os.path.exists(f"/proc/{pid}"):
            break
        time.sleep(0.05)
    held = status(node)["cards"][0]
    assert len(held["containers"]) == 2  # still on the books
    c = start(podman, "0-6g")
    assert c.returncode == 0, c.stderr
    ids = sorted(k["id"] for k in status(node)["cards"][0]["containers"])
    assert ids == sorted([b.stdout.strip(), c.stdout.strip()])


@pytest.fixture
def node20(tmp_path: Path, driver_root: Path, fakedriver: Path, podman) -> Host:
    (tmp_path / "host").mkdir()
    h = Host(tmp_path / "host", driver_root, [fake_gpu(0, memory_mib=20480)],
             spec_dir=podman.cdi_dir, extra_config="  - {name: 1g, memory: 1GiB}\n")
    h.use_real_hook()
    assert h.run("cdi", "generate").returncode == 0
    return h


def test_thirty_at_once_where_twenty_fit(podman, node20: Host) -> None:
    from concurrent.futures import ThreadPoolExecutor

    for round_ in range(3):
        with ThreadPoolExecutor(30) as pool:
            results = list(pool.map(lambda _: start(podman, "0-1g"), range(30)))
        ok = [r for r in results if r.returncode == 0]
        refused = [r for r in results if r.returncode != 0]
        assert len(ok) == 20, [r.stderr[-300:] for r in refused]
        assert all("0 MiB free of 20480 MiB, 1024 MiB asked" in r.stderr for r in refused), \
            [r.stderr[-300:] for r in refused]
        card = status(node20)["cards"][0]
        assert card["reserved_mib"] == 20480 and card["unreserved_mib"] == 0
        assert sorted(c["id"] for c in card["containers"]) == \
            sorted(r.stdout.strip() for r in ok)
        ids = [r.stdout.strip() for r in ok]
        rm = podman.podman(["rm", "--force", "--time", "0", *ids], timeout=300)
        assert rm.returncode == 0, rm.stderr
        for _ in range(200):
            if not status(node20)["cards"][0]["containers"]:
                break
            time.sleep(0.1)
        assert status(node20)["cards"][0]["reserved_mib"] == 0, round_


def test_container_sees_its_state_dir_and_the_card_files(podman, node: Host) -> None:
    res = podman.run(["sh", "-c", "cat /run/gpuslice/placement; touch /run/gpuslice/cards/probe && "
                      "echo cards writable; echo region > /run/gpuslice/region && echo state "
                      "writable"], devices=["gpuslice.io/gpu=6g"])
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == f"0 {fake_gpu(0)['uuid']}"
    assert lines[1:] == ["cards writable", "state writable"]
    # The card files are the host's; the container's folder is gone with it.
    assert (node.tmp / "state" / "cards" / "probe").exists()
    assert not list((node.tmp / "state" / "containers").iterdir())


@pytest.fixture
def node_hi(tmp_path: Path, driver_root: Path, fakedriver: Path, podman) -> Host:
    return podman_host(tmp_path, driver_root, podman,
                       "  - {name: 2g-50-hi, memory: 2GiB, cores: 50, priority: high}\n"
                       "  - {name: 2g, memory: 2GiB}\n")


def environ(podman, cid: str) -> dict:
    """The environment the container's process runs with, read from the host."""
    info = json.loads(podman.podman(["inspect", cid], check=True).stdout)[0]
    raw = Path(f"/proc/{info['State']['Pid']}/environ").read_bytes()
    return dict(e.split("=", 1) for e in raw.decode().split("\0") if "=" in e)


def test_priority_reaches_the_container_and_the_books(podman, node_hi: Host) -> None:
    hi, plain = start(podman, "0-2g-50-hi"), start(podman, "0-2g")
    assert hi.returncode == 0, hi.stderr
    assert plain.returncode == 0, plain.stderr
    assert environ(podman, hi.stdout.strip())["GPUSLICE_PRIORITY"] == "high"
    assert environ(podman, plain.stdout.strip())["GPUSLICE_PRIORITY"] == "normal"
    held = {c["id"]: (c["device"], c["cores"], c["priority"])
            for c in status(node_hi)["cards"][0]["containers"]}
    assert held == {hi.stdout.strip(): ("0-2g-50-hi", 50, "high"),
                    plain.stdout.strip(): ("0-2g", 0, "normal")}
    # Seen from inside, as a program there reads it.
    res = podman.run(["sh", "-c", "echo $GPUSLICE_PRIORITY"],
                     devices=["gpuslice.io/gpu=2g-50-hi"])
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "high"


def test_the_specs_priority_replaces_the_containers_own(podman, node_hi: Host) -> None:
    """Podman 4.3 applies a CDI device's env after the container's own (-e): a
    variable of the same name is replaced, so a tenant cannot claim high
    priority on a normal slice through its environment at start."""
    probe = ["sh", "-c", "env | grep '^GPUSLICE_PRIORITY='"]
    claim = {"GPUSLICE_PRIORITY": "high"}
    alone = podman.run(probe, env=claim)  # no device: -e reaches the container as given
    assert alone.returncode == 0, alone.stderr
    assert alone.stdout.splitlines() == ["GPUSLICE_PRIORITY=high"]
    for device in ("0-2g", "2g"):
        res = podman.run(probe, devices=[f"gpuslice.io/gpu={device}"], env=claim)
        assert res.returncode == 0, res.stderr
        assert res.stdout.splitlines() == ["GPUSLICE_PRIORITY=normal"], device


def test_the_containers_name_is_recorded_when_the_engine_gives_one(podman, node: Host) -> None:
    """Podman 4.3 puts no name in config.json (its annotations were read: none
    names the container), so its containers are recorded with none; an
    annotation an engine would set (containerd's CRI) passed by podman is read."""
    from ocihook import accountant

    plain = start(podman, "0-6g")
    assert plain.returncode == 0, plain.stderr
    named = podman.run(["sleep", "600"], devices=["gpuslice.io/gpu=0-6g"],
                       extra_args=["--detach", "--annotation",
                                   "io.kubernetes.cri.container-name=trainer"], timeout=120)
    assert named.returncode == 0, named.stderr
    a = accountant.Accountant(str(node.tmp / "state.db"))
    try:
        names = {r.container_id: r.name for u in a.usage() for r in u.reservations}
    finally:
        a.close()
    assert names == {plain.stdout.strip(): "", named.stdout.strip(): "trainer"}
