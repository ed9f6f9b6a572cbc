"""`gpuslice top`: driven in a real terminal (tmux: start it, read the screen,
change the node, see the screen follow, send `q`), `--once` checked line by
line for the scene's values, and the share of the card between two frames."""
from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from exporter_node import GIB, MIB, Node
from fakehost import fake_gpu
from test_exporter import A, scene

from ocihook import top


@pytest.fixture
def node(tmp_path: Path, driver_root: Path, fakedriver: Path) -> Node:
    gpus = [fake_gpu(0, memory_mib=16384, memory_used_mib=3000, utilization_pct=45),
            fake_gpu(1, memory_mib=16384)]
    n = Node(tmp_path, driver_root, gpus)
    scene(n)
    return n


def once(node: Node) -> list:
    res = subprocess.run(["gpuslice", "top", "--once"], env=node.env(), capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stdout.splitlines()


def test_once_prints_the_scene(node: Node) -> None:
    u0, u1 = node.gpus[0]["uuid"], node.gpus[1]["uuid"]
    lines = once(node)
    assert lines[0].startswith("gpuslice top  ") and lines[0].endswith("q: quit")
    assert "2 cards, 3 containers" in lines[0]
    assert lines[1:] == [
        f"card 0  NVIDIA H200  {u0}  busy 45%",
        "  memory 3000 MiB used of 16384, 8192 reserved; compute 30% reserved; healthy",
        top.HEADER.rstrip(),
        "  aaaaaaaaaaaa -          4g-30        1536/4096    0%/30%     0% high",
        "    pid 17                                  1536",
        "  bbbbbbbbbbbb -          4g            768/4096    no cap      - normal",
        "    pid 5                                    768",
        f"card 1  NVIDIA H200  {u1}  busy 0%",
        "  memory 0 MiB used of 16384, 16384 reserved; compute 0% reserved; healthy",
        top.HEADER.rstrip(),
        "  cccccccccccc -          whole          0/16384    no cap      - normal",
    ]
    assert max(len(line) for line in lines) <= 80


def test_card_share_and_sleep_between_two_frames(node: Node) -> None:
    """What the limiter charged between two frames, over the time between them."""
    u0 = node.gpus[0]["uuid"]
    source = top.Source(str(node.state_dir), str(node.db), str(node.host.driver_root))
    first = source.take()
    node.region(A, [(u0, 4 * GIB, 1536 * MIB, 30, 2_800_000_000, 1_200_000_000)],
                [(17, {0: {"alloc": 1024 * MIB, "context": 512 * MIB}})])
    second = source.take()
    second.taken = first.taken + 2.0  # 0.3 s of card time, 0.7 s asleep, in 2 s
    [row] = [line for line in top.frame(second, first) if line.startswith("  aaaa")]
    assert row == "  aaaaaaaaaaaa -          4g-30        1536/4096   15%/30%    35% high"


def test_unhealthy_card_and_unreadable_region_are_said(node: Node) -> None:
    import sqlite3

    db = sqlite3.connect(node.db)
    with db:
        db.execute("UPDATE cards SET healthy=0, health_reason='XID 79: fallen off the bus' "
                   "WHERE idx=0")
    db.close()
    (node.state_dir / "containers" / A / "region").write_bytes(b"short")
    lines = once(node)
    assert "  memory 3000 MiB used of 16384, 8192 reserved; compute 30% reserved; UNHEALTHY" \
        in lines
    assert "  out of service: XID 79: fallen off the bus" in lines
    row = lines.index("  aaaaaaaaaaaa -          4g-30           ?/4096     -/30%      - high")
    assert lines[row + 1].startswith(f"    region UNREADABLE: {node.state_dir}/containers/{A}/"
                                     "region: 5 bytes, a region has")


def test_without_a_terminal_says_to_use_once(node: Node) -> None:
    res = subprocess.run(["gpuslice", "top"], env=node.env(), capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 2
    assert res.stderr == ("gpuslice: error: gpuslice top: standard output is not a terminal; "
                          "use `gpuslice top --once` in scripts\n")


class Tmux:
    """A tmux server of its own (-L), one 80x24 window running a command."""

    def __init__(self, name: str, command: str) -> None:
        self.tmux = shutil.which("tmux")
        assert self.tmux, "tmux missing: install.sh --with-tests installs it"
        self.name = name
        self.cmd("-f", "/dev/null", "new-session", "-d", "-x", "80", "-y", "24", command)

    def cmd(self, *args: str) -> str:
        return subprocess.run([self.tmux, "-L", self.name, *args], check=True,
                              capture_output=True, text=True, timeout=30).stdout

    def screen(self) -> str:
        return self.cmd("capture-pane", "-p")

    def wait_for(self, text: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if text in screen:
                return screen
            assert time.monotonic() < deadline, f"{text!r} not on the screen:\n{screen}"
            time.sleep(0.1)

    def stop(self) -> None:
        subprocess.run([self.tmux, "-L", self.name, "kill-server"], capture_output=True,
                       timeout=30)


def test_live_in_tmux_follows_the_node_and_q_quits(node: Node, tmp_path: Path) -> None:
    import shlex

    u0 = node.gpus[0]["uuid"]
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in node.env().items()
                   if k in ("GPUSLICE_CONFIG", "GPUSLICE_FAKE_GPUS", "PATH", "PYTHONPATH"))
    term = Tmux(f"gstop-{tmp_path.name}",
                f"env {env} gpuslice top; echo \"top exited $?\"; sleep 60")
    try:
        screen = term.wait_for("aaaaaaaaaaaa")
        assert "card 0  NVIDIA H200" in screen and "busy 45%" in screen
        assert "1536/4096" in screen and " high" in screen
        assert all(len(line) <= 80 for line in screen.splitlines())
        # The next frames follow what the container holds.
        node.region(A, [(u0, 4 * GIB, 2048 * MIB, 30, 2_500_000_000, 500_000_000)],
                    [(17, {0: {"alloc": 2048 * MIB}})])
        term.wait_for("2048/4096")
        term.cmd("send-keys", "q")
        term.wait_for("top exited 0")
    finally:
        term.stop()
