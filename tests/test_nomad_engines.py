"""gpuslice-nomad-device with real engines: a reservation made through the
plugin (HashiCorp's go-plugin client, tests/nomad_harness.py) and a
container started by hand race for a card's last room; and the task's
container, started as Nomad's docker driver starts it (`runtime =
"gpuslice"`, the Reserve's env, device nodes and mounts), takes over the
plugin's reservation instead of being admitted a second time.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest

from fakehost import Host, fake_gpu
from nomad_harness import REPO, PluginClient, build_client, plugin_command
from podman_harness import podman_fixture
from test_hook import rows
from test_nomad_device import groups, ids, next_fingerprint_where
from daemons import Dockerd
from test_runtime_e2e import Node, dockerd_set_up, node, wait_until  # noqa: F401 (a fixture)

podman = podman_fixture()


@pytest.fixture
def docker(node: Node) -> Iterator[Dockerd]:
    """test_runtime_e2e's dockerd, its runtime's CDI cache tool importing this tree."""
    d = dockerd_set_up(node, dict(node.env, PYTHONPATH=str(REPO)))
    try:
        yield d
    finally:
        d.stop()


@pytest.fixture(scope="module")
def nomad_client() -> Path:
    return build_client()


def plugin(nomad_client: Path, folder: Path, config: Path) -> PluginClient:
    c = PluginClient(nomad_client, plugin_command(folder), folder / "client.log")
    assert c(f'setconfig {{"config": "{config}", "fingerprint_period": "200ms"}}') == {}
    return c


@pytest.fixture
def small(tmp_path: Path, driver_root: Path, fakedriver: Path, podman) -> Host:
    """One 8 GiB card: room for two 4g slices; the spec where podman reads it."""
    (tmp_path / "host").mkdir()
    h = Host(tmp_path / "host", driver_root, [fake_gpu(0, memory_mib=8192)],
             spec_dir=podman.cdi_dir)
    h.use_real_hook()
    res = h.run("cdi", "generate")
    assert res.returncode == 0, res.stderr
    return h


def admit_by_hand(host: Host, cid: str, card: str) -> None:
    import subprocess

    res = subprocess.run([str(host.hook), "admit", "--id", cid, "--device", "0-4g", "--card",
                          card, "--memory-mib", "4096", "--cores", "0", "--database",
                          str(host.tmp / "state.db"), "--state-dir", str(host.tmp / "state")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr


def test_plugin_and_podman_race_for_the_last_room(nomad_client: Path, small: Host,
                                                  podman) -> None:
    db = small.tmp / "state.db"
    [(card,)] = rows(db, "SELECT uuid FROM cards")
    admit_by_hand(small, "by-hand", card)  # one 4g left
    c = plugin(nomad_client, small.tmp, small.config)
    try:
        fp = groups(next_fingerprint_where(c, lambda g: len(ids(g["4g"], 0)) == 1))
        winners: List[str] = []
        # The plugin's answer is quicker than podman's start: later rounds hold
        # it back a little, so that either may come first at the database.
        for delay in (0.0, 0.3, 0.8):
            [iid] = ids(fp["4g"], 0)
            go = threading.Barrier(2)

            def reserve() -> Dict[str, Any]:
                go.wait()
                time.sleep(delay)
                return c(f"reserve {iid}")

            def start() -> Any:
                go.wait()
                return podman.run(["sleep", "600"], devices=["gpuslice.io/gpu=0-4g"],
                                  extra_args=["--detach"], timeout=120)

            with ThreadPoolExecutor(2) as pool:
                r, p = pool.submit(reserve), pool.submit(start)
                reserved, started = r.result(), p.result()
            plugin_won, podman_won = "container_res" in reserved, started.returncode == 0
            assert plugin_won != podman_won, (reserved, started.stderr[-300:])
            held = rows(db, "SELECT container_id FROM reservations WHERE container_id != "
                        "'by-hand'")
            assert len(held) == 1 and rows(db, "SELECT sum(memory_mib) FROM reservations") \
                == [(8192,)]
            if plugin_won:
                winners.append("plugin")
                assert "0-4g: card 0 (" in started.stderr and "0 MiB free" in started.stderr
                assert small.run("release", held[0][0]).returncode == 0
            else:
                winners.append("podman")
                assert reserved["code"] in ("ResourceExhausted", "NotFound"), reserved
                cid = started.stdout.strip()
                assert held == [(cid,)]
                assert podman.podman(["stop", "--time", "0", cid], timeout=120).returncode == 0
                assert wait_until(lambda: len(rows(db, "SELECT 1 FROM reservations")) == 1)
            fp = groups(next_fingerprint_where(c, lambda g: len(ids(g["4g"], 0)) == 1
                                               and iid not in ids(g["4g"], 0)))
        assert len(winners) == 3, winners
    finally:
        c.close()


def nomad_docker_args(res: Dict[str, Any]) -> List[str]:
    """What Nomad's docker driver gives docker for a ContainerReservation: its
    env, its devices (host:task:permissions) and its mounts as binds."""
    args: List[str] = []
    for k, v in sorted(res["envs"].items()):
        args += ["-e", f"{k}={v}"]
    for d in res.get("devices", []):
        args += ["--device", f"{d['host_path']}:{d['task_path']}:{d['permissions']}"]
    for m in res.get("mounts", []):
        args += ["-v", f"{m['host_path']}:{m['task_path']}" + (":ro" if m.get("read_only") else "")]
    return args


def test_the_task_container_takes_the_reservation_over(nomad_client: Path, node: Node,
                                                       docker) -> None:
    db = node.host.tmp / "state.db"
    c = plugin(nomad_client, node.tmp, node.host.config)
    try:
        fp = groups(c("fingerprint"))
        res = c(f"reserve {ids(fp['4g'], 0)[0]}")["container_res"]
        token = res["envs"]["GPUSLICE_CLAIM"]
        [(card,)] = rows(db, "SELECT card_uuid FROM reservations")
        for i in range(3):  # card 0 full: only a takeover can start the task now
            cid = f"by-hand-{i}"
            import subprocess

            assert subprocess.run([str(node.host.hook), "admit", "--id", cid, "--device", "0-4g",
                                   "--card", card, "--memory-mib", "4096", "--cores", "0",
                                   "--database", str(db), "--state-dir",
                                   str(node.host.tmp / "state")],
                                  capture_output=True, timeout=60).returncode == 0
        run = docker.docker(["run", "--network", "none", "--runtime", "gpuslice", "--detach",
                             *nomad_docker_args(res), docker.IMAGE, "sleep", "600"])
        assert run.returncode == 0, run.stderr
        cid = run.stdout.strip()
        assert sorted(rows(db, "SELECT container_id, device, memory_mib FROM reservations")) \
            == sorted([("by-hand-0", "0-4g", 4096), ("by-hand-1", "0-4g", 4096),
                       ("by-hand-2", "0-4g", 4096), (cid, "0-4g", 4096)])
        assert rows(db, "SELECT json_extract(detail, '$.taken') FROM events WHERE kind='claim' "
                    "AND container_id=?", cid) == [(1,)]
        seen = docker.docker(["exec", cid, "sh", "-c",
                              "env | grep ^GPUSLICE_ | sort; [ -c /dev/nvidia0 ] && echo node"])
        assert seen.returncode == 0, seen.stderr
        assert f"GPUSLICE_CLAIM={token}" in seen.stdout.split()
        assert "GPUSLICE_MEMORY_LIMIT=4096MiB" in seen.stdout.split()
        assert "node" in seen.stdout.split()
        assert docker.docker(["rm", "-f", cid]).returncode == 0
        assert wait_until(lambda: len(rows(db, "SELECT 1 FROM reservations")) == 3)
    finally:
        c.close()
