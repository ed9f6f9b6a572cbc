"""End to end: `gpuslice resize` of a container real Podman (runc) runs, on the fake driver.

The container runs tests/shim's cuprog under the real libgpuslice.so, which
the spec preloads; the fake libcuda and the host's C library are bound in
read-only (the busybox root has neither). The hook admits the container
and mounts its state dir; `gpuslice resize` changes its slice while cuprog
waits for a file, and cuprog's next cuMemGetInfo and allocation see it.
Resizes race Podman's own admissions on one card, and the books never hold
more than the card.
"""
from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path
from typing import List, Sequence

import pytest

from fakehost import Host, fake_gpu
from podman_harness import podman_fixture

REPO = Path(__file__).resolve().parent.parent
GIB = 1 << 30
LIBC_DIR = "/usr/lib/x86_64-linux-gnu"
podman = podman_fixture()


@pytest.fixture
def node(tmp_path: Path, driver_root: Path, fakedriver: Path, podman) -> Host:
    subprocess.run(["make", "-s", "-C", str(REPO / "tests" / "shim"), "VARIANT=plain"],
                   check=True)
    (tmp_path / "host").mkdir()
    h = Host(tmp_path / "host", driver_root, [fake_gpu(0, memory_mib=16384)],
             spec_dir=podman.cdi_dir, extra_config="  - {name: 6g, memory: 6GiB}\n"
                                                   "  - {name: 2g, memory: 2GiB}\n")
    h.use_real_hook()
    shim = REPO / "native" / "shim" / "build" / "libgpuslice.so"
    h.config.write_text(h.config.read_text().replace(f"shim_path: {h.shim}",
                                                     f"shim_path: {shim}"))
    h.fakedriver = fakedriver  # type: ignore[attr-defined]
    res = h.run("cdi", "generate")
    assert res.returncode == 0, res.stderr
    return h


def cuda_args(node: Host, go: Path) -> List[str]:
    """podman run options: the C library, the fake driver and cuprog, read-only."""
    fake = node.fakedriver  # type: ignore[attr-defined]
    build = REPO / "tests" / "shim" / "build-plain"
    return ["-v", f"{LIBC_DIR}:/lib/x86_64-linux-gnu:ro", "-v", "/lib64:/lib64:ro",
            "-v", f"{fake}:/fake:ro", "-v", f"{build}:/prog:ro",
            "-v", f"{node.gpus_json}:/gpus.json:ro", "-v", f"{go.parent}:/go",
            "--env", "LD_LIBRARY_PATH=/fake", "--env", "GPUSLICE_FAKE_GPUS=/gpus.json",
            "--env", "GPUSLICE_CONTEXT_RESERVE=0"]


def status(node: Host) -> dict:
    res = node.run("status", "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def held_mib(node: Host) -> int:
    return status(node)["cards"][0]["reserved_mib"]


class Container:
    """A detached container running cuprog: ops, then it waits for /go/<name>, then
    more; its lines go to /go/<name>.out (podman run --rm takes its log with it)."""

    def __init__(self, podman, node: Host, name: str, device: str, before: List[str],
                 after: List[str], extra: Sequence[str] = ()) -> None:
        self.podman, self.name = podman, name
        self.go = node.tmp / "go" / name
        self.go.parent.mkdir(exist_ok=True)
        self.out = self.go.with_suffix(".out")
        ops = " ".join(["init", "pctx", "0", *before, "waitfile", f"/go/{name}", *after])
        res = podman.run(["sh", "-c", f"/prog/cuprog direct {ops} > /go/{name}.out"],
                         devices=[f"gpuslice.io/gpu={device}"],
                         extra_args=["--detach", "--name", name, *cuda_args(node, self.go),
                                     *extra],
                         timeout=120)
        assert res.returncode == 0, res.stderr
        self.id = res.stdout.strip()

    def output(self) -> List[List[str]]:
        text = self.out.read_text() if self.out.exists() else ""
        return [line.split() for line in text.splitlines() if line.strip()]

    def wait_for(self, lines: int) -> List[List[str]]:
        for _ in range(600):
            out = self.output()
            if len(out) >= lines:
                return out
            time.sleep(0.05)
        raise AssertionError(f"{self.name} said {self.output()}")

    def finish(self) -> List[List[str]]:
        self.go.touch()
        res = self.podman.podman(["wait", self.name], timeout=120)
        # wait may find it gone already (--rm): then the output says how it ended
        assert res.stdout.strip() in ("0", ""), (res.stdout, res.stderr, self.output())
        return self.output()


def test_grow_then_shrink_refused_of_a_running_container(podman, node: Host) -> None:
    c = Container(podman, node, "trainer", "0-6g", ["alloc", "3G", "alloc", "4G", "info"],
                  ["info", "alloc", "4G", "info"])
    assert c.wait_for(5)[2:] == [["alloc", "0"], ["alloc", "2"],  # OUT_OF_MEMORY under 6 GiB
                                 ["info", "0", str(3 * GIB), str(6 * GIB)]]
    # By the name Podman gave it? Podman 4.3 records none: by an id prefix.
    res = node.run("resize", c.id[:8], "--memory", "10GiB")
    assert res.returncode == 0, res.stderr
    assert f"resized {c.id[:12]} 0-6g: 10240 MiB" in res.stdout
    res = node.run("resize", c.id, "--memory", "2GiB")
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert lines == [f"gpuslice-hook: container {c.id[:12]}: 0-6g: container {c.id[:12]}'s "
                     "processes hold 3072 MiB now, 2048 MiB asked; free memory in it first or "
                     "ask for at least that"]
    assert held_mib(node) == 10240
    [k] = status(node)["cards"][0]["containers"]
    assert (k["id"], k["memory_mib"]) == (c.id, 10240)
    assert "10240 of 16384 MiB reserved" in node.run("status").stdout
    out = c.finish()
    assert out[5:] == [["info", "0", str(7 * GIB), str(10 * GIB)], ["alloc", "0"],
                       ["info", "0", str(3 * GIB), str(10 * GIB)]]
    for _ in range(100):  # the poststop gives it back just after the container is gone
        if held_mib(node) == 0:
            break
        time.sleep(0.1)
    assert held_mib(node) == 0


def test_bad_input_is_one_line_and_changes_nothing(podman, node: Host) -> None:
    c = Container(podman, node, "idle", "0-6g", [], [])
    before = status(node)
    for args, words in [
            ([c.id, "--memory", "5000m"], "is not a multiple of 128 MiB"),
            ([c.id, "--cores", "x"], "is not a whole percent"),
            (["zzzzzz", "--memory", "4g"], "holds nothing"),
            ([c.id], "needs --memory SIZE, --cores N or both")]:
        res = node.run("resize", *args)
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1 and words in lines[0], (args, res.stderr)
    assert status(node) == before
    c.finish()


def test_racing_resizes_and_admissions_never_over_commit_the_card(podman, node: Host) -> None:
    """A running container grows and shrinks while Podman starts 2g containers
    on the same card, round after round: what the books hold never passes the
    card, and each refusal says so."""
    c = Container(podman, node, "grower", "0-6g", [], [])
    seen: List[int] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen.append(held_mib(node))

    def resizer() -> None:
        for mib in ("12GiB", "2GiB", "10GiB", "4GiB") * 2:
            node.run("resize", c.id, "--memory", mib)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for _ in range(2):
            threads = [threading.Thread(target=resizer)]
            results: List[subprocess.CompletedProcess] = []
            threads += [threading.Thread(target=lambda: results.append(
                podman.run(["true"], devices=["gpuslice.io/gpu=0-2g"], timeout=120)))
                for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for r in results:
                assert r.returncode == 0 or "MiB asked" in r.stderr, r.stderr
    finally:
        stop.set()
        watcher.join()
    assert seen and max(seen) <= 16384
    db = node.tmp / "state.db"
    import sqlite3

    conn = sqlite3.connect(db)
    try:
        resizes = conn.execute("SELECT count(*) FROM events WHERE kind='resize'").fetchone()[0]
    finally:
        conn.close()
    assert resizes > 0
    c.finish()
