"""A card in MPS mode (configuration card_modes): its spec, its admission and
its daemon, on the fake driver.

Two fake 16 GiB cards, card 0 in MPS mode. The spec gives a slice of card 0
NVIDIA's MPS client env and its card's pipes and /dev/shm; the hook admits
it only while the card's control daemon is up (its pipe under the state
dir), never whole, at most 48 containers, SM shares adding up to
cores_limit; `gpuslice mps start|stop|status` run tests/fakempsd's stand-in
for nvidia-cuda-mps-control, which records what it was given.
"""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Dict, List

import pytest

from fakehost import Host, devices, fake_gpu
from ocihook import cheader

REPO = Path(__file__).resolve().parent.parent
FAKE_MPS = REPO / "tests" / "fakempsd"
GIB = 1024
MPS_PROFILES = "  - {name: 6g-50, memory: 6GiB, cores: 50}\n  - {name: 2g-10, memory: 2GiB, cores: 10}\n"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mount namespaces need root")


class MpsNode:
    """Host with card 0 in MPS mode, the real hook, the fake MPS daemon on PATH."""

    def __init__(self, tmp: Path, driver_root: Path, modes: str = "card_modes: {0: mps}\n"):
        (tmp / "host").mkdir()
        self.tmp = tmp
        self.host = Host(tmp / "host", driver_root,
                         [fake_gpu(0, memory_mib=16 * GIB), fake_gpu(1, memory_mib=16 * GIB)],
                         extra_config=MPS_PROFILES + modes)
        self.hook_path = self.host.use_real_hook()
        self.state_dir = self.host.tmp / "state"
        self.record = tmp / "mps.jsonl"
        self.uuid0 = fake_gpu(0)["uuid"]
        res = self.host.run("cdi", "generate")
        assert res.returncode == 0, res.stderr

    def path(self) -> str:
        return f"{FAKE_MPS}:{os.environ['PATH']}"

    def mps(self, *args: str, path: str = "") -> subprocess.CompletedProcess:
        os.environ["FAKE_MPS_RECORD"] = str(self.record)
        try:
            return self.host.run("mps", *args, path=path or self.path())
        finally:
            del os.environ["FAKE_MPS_RECORD"]

    def pipe_dir(self) -> Path:
        return self.state_dir / "mps" / self.uuid0 / "pipe"

    def create(self, cid: str, device: str) -> subprocess.CompletedProcess:
        b = self.tmp / f"b-{cid}"
        (b / "rootfs").mkdir(parents=True, exist_ok=True)
        (b / "config.json").write_text(json.dumps(
            {"ociVersion": "1.0.2", "root": {"path": "rootfs"},
             "process": {"user": {"uid": 0, "gid": 0}}}))
        state = {"ociVersion": "1.0.2", "id": cid, "status": "creating", "bundle": str(b)}
        return subprocess.run(["unshare", "--mount", "--propagation", "private",
                               str(self.hook_path), *self.host.spec_hook(device)[1:]],
                              input=json.dumps(state).encode(), capture_output=True, timeout=60)

    def admit(self, cid: str, device: str) -> subprocess.CompletedProcess:
        """The accountant alone, with the request the spec gives device."""
        args = self.host.spec_hook(device)[1:]
        args = [a for a in args if a != "create"]
        drop = args.index("--preload")
        args = args[:drop] + args[drop + 2:]
        return subprocess.run([str(self.hook_path), "admit", "--id", cid, *args],
                              capture_output=True, text=True, timeout=60)

    def fake_daemon_up(self) -> None:
        """The pipe alone, as the hook looks for it (no process: the CLI's look differs)."""
        self.pipe_dir().mkdir(parents=True, exist_ok=True)
        os.mkfifo(self.pipe_dir() / "control")


@pytest.fixture
def node(tmp_path: Path, driver_root: Path, fakedriver: Path) -> MpsNode:
    return MpsNode(tmp_path, driver_root)


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


def env_of(edits: Dict) -> Dict[str, str]:
    return dict(e.split("=", 1) for e in edits.get("env", []))


# -- the spec ------------------------------------------------------------------

def test_an_mps_slice_carries_the_mps_env_and_mounts_and_no_pacer_cap(node: MpsNode) -> None:
    devs = devices(node.host.spec())
    env = env_of(devs["0-6g-50"])
    assert env[cheader.string("GPUSLICE_ENV_MPS_PIPE_DIRECTORY")] == "/run/nvidia-mps"
    assert env[cheader.string("GPUSLICE_ENV_MPS_ACTIVE_THREAD_PERCENTAGE")] == "50"
    assert env[cheader.string("GPUSLICE_ENV_MPS_PINNED_DEVICE_MEM_LIMIT")] == "0=6144M"
    assert env[cheader.string("GPUSLICE_ENV_MEMORY_LIMIT")] == "6144MiB"
    assert cheader.string("GPUSLICE_ENV_CORE_LIMIT") not in env
    mounts = {m["containerPath"]: m["hostPath"] for m in devs["0-6g-50"]["mounts"]}
    mps = node.state_dir / "mps" / node.uuid0
    assert mounts["/run/nvidia-mps"] == str(mps / "pipe")
    assert mounts["/dev/shm"] == str(mps / "shm")
    assert "--mps" in devs["0-6g-50"]["hooks"][0]["args"]
    # Card 1 is in time mode: the pacer's cap, no MPS.
    env1 = env_of(devs["1-6g-50"])
    assert env1[cheader.string("GPUSLICE_ENV_CORE_LIMIT")] == "50"
    assert not any(k.startswith("CUDA_MPS") for k in env1)
    assert "--mps" not in devs["1-6g-50"]["hooks"][0]["args"]
    assert "/dev/shm" not in {m["containerPath"] for m in devs["1-6g-50"]["mounts"]}


def test_card_less_slices_and_gangs_leave_the_mps_card_out(node: MpsNode) -> None:
    devs = devices(node.host.spec())
    nodes = [n["path"] for n in devs["6g-50"]["deviceNodes"]]
    assert nodes == ["/dev/nvidia1"]
    assert "2x6g-50" not in devs  # one time card: no gang
    assert "0" in devs  # offered whole, refused by the hook while in MPS mode


def test_a_slice_without_a_share_gets_all_sms(node: MpsNode) -> None:
    env = env_of(devices(node.host.spec())["0-4g"])
    assert cheader.string("GPUSLICE_ENV_MPS_ACTIVE_THREAD_PERCENTAGE") not in env
    assert env[cheader.string("GPUSLICE_ENV_MPS_PINNED_DEVICE_MEM_LIMIT")] == "0=4096M"


def test_the_accountant_records_the_mode(node: MpsNode) -> None:
    db = sqlite3.connect(node.host.tmp / "state.db")
    assert db.execute("SELECT idx, mode FROM cards ORDER BY idx").fetchall() == [
        (0, "mps"), (1, "time")]


def test_a_mode_for_a_card_nvml_does_not_list_is_a_warning(tmp_path: Path, driver_root: Path,
                                                           fakedriver: Path) -> None:
    n = MpsNode(tmp_path, driver_root, modes="card_modes: {0: mps, 7: mps}\n")
    res = n.host.run("cdi", "generate")
    assert res.returncode == 0
    assert "card_modes names card 7, which NVML does not list: ignored" in res.stderr


# -- admission -----------------------------------------------------------------

def test_a_slice_while_the_daemon_is_down_is_refused_saying_how_to_start_it(node: MpsNode
                                                                           ) -> None:
    res = node.admit("c1", "0-6g-50")
    assert res.returncode == 1
    line = one_line(res.stderr)
    assert "card 0" in line and "MPS control daemon is not running" in line
    assert "gpuslice mps start 0" in line and "gpuslice-mps@0" in line
    node.fake_daemon_up()
    assert node.admit("c1", "0-6g-50").returncode == 0


@needs_root
def test_create_on_an_mps_card_gives_the_pacer_no_cap(node: MpsNode) -> None:
    from test_resize_hook import caps_of

    node.fake_daemon_up()
    for cid, device, cores in (("c1", "0-6g-50", 0), ("c2", "1-6g-50", 50)):
        res = node.create(cid, device)
        assert res.returncode == 0, res.stderr
        # On the MPS card MPS's SM share holds, not card time.
        limit, core_limit, _ = caps_of(node.state_dir / "containers" / cid / "region")
        assert (limit, core_limit) == (6 * GIB << 20, cores)


def test_a_whole_mps_card_is_refused(node: MpsNode) -> None:
    node.fake_daemon_up()
    res = node.admit("w", "0")
    assert res.returncode == 1
    line = one_line(res.stderr)
    assert "card 0" in line and "is in MPS mode" in line and "ask for a slice of it" in line


def test_sm_shares_add_up_to_cores_limit(node: MpsNode) -> None:
    node.fake_daemon_up()
    assert node.admit("a", "0-6g-50").returncode == 0
    assert node.admit("b", "0-6g-50").returncode == 0
    res = node.admit("c", "0-2g-10")
    assert res.returncode == 1
    assert "0% of its compute left, 10% asked" in one_line(res.stderr)


def test_48_clients_and_no_more(node: MpsNode) -> None:
    node.fake_daemon_up()
    db = sqlite3.connect(node.host.tmp / "state.db")
    # 47 held (memory aside: the client bound comes first), then one by the hook.
    db.executemany("INSERT INTO reservations(container_id, device, card_uuid, memory_mib, "
                   "cores, exclusive, runtime, created) VALUES (?, '0-4g', ?, 1, 0, 0, '', 0)",
                   [(f"x{i:02d}", node.uuid0) for i in range(47)])
    db.commit()
    assert node.admit("last", "0-4g").returncode == 0
    res = node.admit("one-more", "0-4g")
    assert res.returncode == 1
    line = one_line(res.stderr)
    assert f"has {cheader.constant('GPUSLICE_MPS_MAX_CLIENTS')} containers" in line
    assert "the most its MPS server takes" in line


def test_a_stale_spec_meets_the_cards_mode(tmp_path: Path, driver_root: Path,
                                           fakedriver: Path) -> None:
    n = MpsNode(tmp_path, driver_root)
    n.fake_daemon_up()
    # The spec of now, then the card goes back to time mode with no one on it.
    n.host.config.write_text(n.host.config.read_text().replace("card_modes: {0: mps}", ""))
    db = n.host.tmp / "state.db"
    res = n.host.run("cdi", "generate", "--output", str(tmp_path / "other.yaml"))
    assert res.returncode == 0, res.stderr
    assert sqlite3.connect(db).execute("SELECT mode FROM cards WHERE idx=0").fetchone() == (
        "time",)
    res = n.admit("c1", "0-6g-50")  # the old spec's --mps
    assert res.returncode == 1
    assert "is in time mode and this is a slice of it in MPS mode" in one_line(res.stderr)


def test_changing_the_mode_under_containers_is_refused_listing_them(node: MpsNode) -> None:
    node.fake_daemon_up()
    assert node.admit("container-one-long-id", "0-6g-50").returncode == 0
    node.host.config.write_text(node.host.config.read_text().replace("{0: mps}", "{0: time}"))
    spec = node.host.spec_dir / "gpuslice.yaml"
    before = spec.read_text()
    res = node.host.run("cdi", "generate")
    assert res.returncode == 1
    # One error line (the warnings of a generate come before it).
    line = one_line("\n".join(ln for ln in res.stderr.splitlines()
                              if not ln.startswith("gpuslice: warning:")))
    assert "card 0" in line and "cannot change from mode mps to time" in line
    assert "container-on" in line and "the spec was not written" in line
    assert spec.read_text() == before


def test_resize_on_an_mps_card_is_refused(node: MpsNode) -> None:
    node.fake_daemon_up()
    assert node.admit("r1", "0-6g-50").returncode == 0
    res = subprocess.run([str(node.hook_path), "resize", "--id", "r1", "--device", "0-6g-50",
                          "--memory-mib", "4096", *node.host.spec_hook("0", "poststop")[2:]],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 1
    assert "is in MPS mode, where a slice's SM share" in one_line(res.stderr)


# -- the daemon ----------------------------------------------------------------

def records(node: MpsNode) -> List[Dict]:
    return [json.loads(ln) for ln in node.record.read_text().splitlines()]


@needs_root
def test_start_status_stop_run_the_control_daemon(node: MpsNode) -> None:
    res = node.mps("status")
    assert res.returncode == 1
    assert "daemon down" in res.stdout and "gpuslice mps start 0" in res.stdout
    res = node.mps("start")
    assert res.returncode == 0, res.stderr
    assert "card 0" in res.stdout and "MPS control daemon started" in res.stdout
    mps = node.state_dir / "mps" / node.uuid0
    [daemon] = records(node)
    assert daemon["args"] == ["-d"]
    assert daemon["env"] == {"CUDA_VISIBLE_DEVICES": node.uuid0,
                             "CUDA_MPS_PIPE_DIRECTORY": str(mps / "pipe"),
                             "CUDA_MPS_LOG_DIRECTORY": str(mps / "log")}
    # Its /dev/shm was the card's shm folder, not the host's.
    assert (mps / "shm" / "fake-mps-daemon").exists()
    assert (mps / "pipe" / "control").exists()
    res = node.mps("status", "0")
    assert res.returncode == 0 and "daemon up (pid" in res.stdout
    assert "already" in node.mps("start", "0").stdout
    assert node.admit("c1", "0-6g-50").returncode == 0
    res = node.mps("stop", "0")
    assert res.returncode == 0, res.stderr
    assert "MPS control daemon stopped" in res.stdout and "c1" in res.stdout
    assert [r["role"] for r in records(node)] == ["daemon", "client"]
    assert not (mps / "pipe" / "control").exists()
    assert node.admit("c2", "0-6g-50").returncode == 1  # refused at once


@needs_root
def test_start_clears_a_pipe_left_by_a_dead_daemon(node: MpsNode) -> None:
    node.fake_daemon_up()  # a pipe, no process
    res = node.mps("status")
    assert res.returncode == 1 and "daemon gone but its pipe is left" in res.stdout
    res = node.mps("start", "0")
    assert res.returncode == 0, res.stderr
    assert "started" in res.stdout
    assert node.mps("stop").returncode == 0


def look_alike_running() -> bool:
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if (proc / "cmdline").read_bytes().startswith(b"nvidia-cuda-mps-control\0"):
                return True
        except OSError:
            continue  # gone meanwhile
    return False


@needs_root
def test_a_look_alike_in_another_pid_namespace_is_no_daemon(node: MpsNode) -> None:
    # A container's process may call itself nvidia-cuda-mps-control and carry
    # the card's pipe folder in its env; with a pipe left behind, it must not
    # pass for the card's daemon (start would then refuse to start one).
    node.fake_daemon_up()
    code = ("import os; os.execve('/bin/sleep', ['nvidia-cuda-mps-control', '60'], "
            f"{{'CUDA_MPS_PIPE_DIRECTORY': {str(node.pipe_dir())!r}}})")
    fake = subprocess.Popen(["unshare", "--pid", "--fork", "python3", "-c", code])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not look_alike_running():
            time.sleep(0.05)
        assert look_alike_running()
        res = node.mps("status", "0")
        assert res.returncode == 1 and "daemon gone but its pipe is left" in res.stdout, res.stdout
        res = node.mps("start", "0")
        assert res.returncode == 0 and "started" in res.stdout, res.stdout + res.stderr
        assert node.mps("stop", "0").returncode == 0
    finally:
        fake.kill()
        fake.wait(timeout=30)


def test_without_the_binary_one_line_exit_2(node: MpsNode) -> None:
    bin_dir = os.path.dirname(shutil.which("gpuslice") or "")
    res = node.mps("start", path=f"{bin_dir}:/usr/bin:/bin")
    assert res.returncode == 2
    line = one_line(res.stderr)
    assert "nvidia-cuda-mps-control is not installed" in line


def test_a_state_dir_under_dev_shm_is_refused_before_the_daemon_runs(node: MpsNode) -> None:
    # The daemon's namespace mounts the card's shm folder over /dev/shm, which
    # hid a pipe folder below it: the real daemon exited 1 with no word (H200).
    under = Path(tempfile.mkdtemp(prefix="gpuslice-test-", dir="/dev/shm"))
    try:
        cfg = node.host.config
        cfg.write_text(cfg.read_text().replace(f"state_dir: {node.state_dir}",
                                               f"state_dir: {under}"))
        res = node.mps("start", "0")
        assert res.returncode == 2, res.stderr
        line = one_line(res.stderr)
        assert f"state_dir {under} lies under /dev/shm" in line and "outside /dev/shm" in line
        assert not node.record.exists()  # no daemon was run
    finally:
        shutil.rmtree(under)


def test_a_card_in_time_mode_has_no_daemon(node: MpsNode) -> None:
    res = node.mps("start", "1")
    assert res.returncode == 2
    assert "card 1" in one_line(res.stderr) and "set card_modes: {1: mps}" in res.stderr
    res = node.mps("start", "9")
    assert res.returncode == 2 and "knows no such card" in one_line(res.stderr)


def test_no_card_in_mps_mode(tmp_path: Path, driver_root: Path, fakedriver: Path) -> None:
    n = MpsNode(tmp_path, driver_root, modes="")
    res = n.mps("status")
    assert res.returncode == 2 and "no card is in MPS mode" in one_line(res.stderr)


# -- what the readers say --------------------------------------------------------

def test_cdi_list_status_top_and_the_exporter_say_the_mode(node: MpsNode) -> None:
    listed = node.host.run("cdi", "list").stdout.splitlines()
    assert "gpuslice.io/gpu=0-6g-50  (mode mps: its compute cap is an SM share)" in listed
    assert "gpuslice.io/gpu=1-6g-50" in listed
    doc = json.loads(node.host.run("status", "--json").stdout)
    assert [(c["index"], c["mode"]) for c in doc["cards"]] == [(0, "mps"), (1, "time")]
    text = node.host.run("status").stdout
    assert text.count("(mode mps: SM shares)") == 1  # card 0's line; time is the default
    top = node.host.run("top", "--once").stdout
    assert top.count("(mps: SM shares)") == 1


def test_the_exporter_has_a_mode_info_metric(node: MpsNode) -> None:
    from prometheus_client import generate_latest

    from ocihook import exporter

    collector = exporter.NodeCollector(str(node.state_dir), str(node.host.tmp / "state.db"),
                                       None)
    text = generate_latest(exporter.registry(collector)).decode()
    lines = [ln for ln in text.splitlines() if ln.startswith("gpuslice_card_mode_info{")]
    assert len(lines) == 2
    assert any('index="0"' in ln and 'mode="mps"' in ln for ln in lines)
    assert any('index="1"' in ln and 'mode="time"' in ln for ln in lines)


# -- the unit ------------------------------------------------------------------

UNIT = REPO / "packaging" / "systemd" / "gpuslice-mps@.service"


def test_the_unit_runs_the_cli_for_its_instance_card(node: MpsNode) -> None:
    """What systemd would run for gpuslice-mps@0, run here with the stand-in."""
    lines = dict(ln.split("=", 1) for ln in UNIT.read_text().splitlines()
                 if "=" in ln and not ln.startswith("#"))
    assert lines["Type"] == "oneshot" and lines["RemainAfterExit"] == "yes"
    for key, verb in (("ExecStart", "start"), ("ExecStop", "stop")):
        argv = lines[key].replace("%i", "0").split()
        assert argv[:3] == ["/usr/bin/gpuslice", "mps", verb]
        if os.geteuid() == 0:
            res = node.mps(verb, *argv[3:])
            assert res.returncode == 0, res.stderr
    for name in ("gpuslice.install",):
        assert "gpuslice-mps@.service" in (REPO / "packaging" / "deb" / "debian" / name).read_text()
    assert "gpuslice-mps@.service" in (REPO / "packaging" / "rpm" / "gpuslice.spec").read_text()


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="no systemd-analyze")
def test_systemd_reads_the_unit(tmp_path: Path) -> None:
    unit = tmp_path / "gpuslice-mps@0.service"
    unit.write_text(UNIT.read_text())
    res = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                         text=True, timeout=60)
    # A command missing on this machine is the one complaint it may make.
    problems = [ln for ln in res.stderr.splitlines()
                if ln.strip() and "/usr/bin/gpuslice" not in ln and "man:" not in ln]
    assert problems == [], res.stderr
