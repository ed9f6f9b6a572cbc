"""Health: `gpuslice health watch` against the fake NVML (XIDs, ECC errors and
a lost card injected through $GPUSLICE_FAKE_NVML_EVENTS), the accountant's
marks, real Podman refused on a card out of service and admitted again after
`gpuslice card enable`, and the operator's `gpuslice card disable|enable`.

Waits are bounded polls of the database. The bound is far past the watcher's
promise of 2 s, since a loaded CI machine may stall it for longer: a failure
says the mark never came, never that it came late (no test asserts a
duration).
"""
from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Dict, List

import pytest

from fakehost import Host, build_hook, fake_gpu
from podman_harness import podman_fixture

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from ocihook import accountant as acct  # noqa: E402

podman = podman_fixture()
REACT_S = 30.0  # a mark that has not come by now is not coming


class Watch:
    """`gpuslice health watch` running on a fake host, its log kept."""

    def __init__(self, host: Host, *args: str) -> None:
        self.events = host.tmp / "nvml-events"
        self.events.touch()
        env = dict(os.environ, GPUSLICE_FAKE_GPUS=str(host.gpus_json),
                   GPUSLICE_CONFIG=str(host.config), GPUSLICE_FAKE_NVML_EVENTS=str(self.events))
        env.pop("LD_LIBRARY_PATH", None)  # NVML from the driver root, as generate has it
        self.proc = subprocess.Popen(["gpuslice", "health", "watch", *args], env=env,
                                     stdin=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True)
        self.lines: List[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        assert until(lambda: any("health: watching" in ln for ln in self.lines)), self.lines

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def inject(self, line: str) -> None:
        with self.events.open("a") as f:
            f.write(line + "\n")

    def stop(self) -> List[str]:
        """SIGTERM; it must stop cleanly (exit 0, its last line says so)."""
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=30) == 0, self.lines
        self._reader.join(timeout=10)
        assert self.lines[-1] == "gpuslice: health: stopped", self.lines
        return self.lines


def until(pred: Callable[[], bool], seconds: float = REACT_S) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


def cards(host: Host) -> List[acct.Card]:
    a = acct.Accountant(str(host.tmp / "state.db"))
    try:
        return a.cards()
    finally:
        a.close()


def events(host: Host, kind: str) -> List[Dict]:
    a = acct.Accountant(str(host.tmp / "state.db"))
    try:
        return [dict(e, detail=json.loads(e["detail"]) if e["detail"] else {})
                for e in reversed(list(a.events(1000))) if e["kind"] == kind]
    finally:
        a.close()


def _host(tmp_path: Path, driver_root: Path, spec_dir: Path) -> Host:
    (tmp_path / "host").mkdir()
    h = Host(tmp_path / "host", driver_root,
             [fake_gpu(0, memory_mib=16384), fake_gpu(1, memory_mib=16384)],
             spec_dir=spec_dir, extra_config="  - {name: 6g, memory: 6GiB}\n")
    h.use_real_hook()
    res = h.run("cdi", "generate")
    assert res.returncode == 0, res.stderr
    return h


@pytest.fixture
def node(tmp_path: Path, driver_root: Path, fakedriver: Path, podman) -> Host:
    return _host(tmp_path, driver_root, podman.cdi_dir)


@pytest.fixture
def host(tmp_path: Path, driver_root: Path, fakedriver: Path) -> Host:
    return _host(tmp_path, driver_root, tmp_path / "cdi")


def start(podman, device: str, *extra: str):
    return podman.run(["sleep", "600"], devices=[f"gpuslice.io/gpu={device}"],
                      extra_args=["--detach", *extra], timeout=120)


def hook_line(stderr: str) -> str:
    [line] = [ln for ln in stderr.splitlines() if "gpuslice-hook:" in ln]
    return line[line.index("gpuslice-hook:"):]


def test_an_xid_takes_the_card_out_until_it_is_enabled(podman, node: Host) -> None:
    running = start(podman, "0-6g")
    assert running.returncode == 0, running.stderr
    cid = running.stdout.strip()
    watch = Watch(node)
    watch.inject("xid 0 79")
    assert until(lambda: not cards(node)[0].healthy), watch.lines
    card0 = cards(node)[0]
    assert card0.health_reason.startswith("XID 79 (GPU has fallen off the bus) at 20")
    assert card0.health_since is not None and cards(node)[1].healthy
    # The next slice there is refused, in one line naming the card, the
    # reason and the command that returns it.
    refused = start(podman, "0-6g")
    assert refused.returncode != 0
    assert re.fullmatch(r"gpuslice-hook: container [0-9a-f]{12}: " + re.escape(
        f"0-6g: card 0 ({card0.uuid}) is out of service ({card0.health_reason}); "
        "`gpuslice card enable 0` returns it"), hook_line(refused.stderr)), refused.stderr
    whole = start(podman, "0")
    assert whole.returncode != 0 and "is out of service (XID 79" in hook_line(whole.stderr)
    # A card-less slice goes to the card in service.
    placed = start(podman, "6g")
    assert placed.returncode == 0, placed.stderr
    # What ran there runs on, and is still on the books.
    info = json.loads(podman.podman(["inspect", cid], check=True).stdout)[0]
    assert info["State"]["Running"] is True
    res = node.run("card", "enable", "0")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        f"card 0 ({card0.uuid}) back in service (it was out: {card0.health_reason})",
        f"  left running: {cid[:12]} (0-6g)"]
    again = start(podman, "0-6g")
    assert again.returncode == 0, again.stderr
    assert [e["detail"] for e in events(node, "unhealthy")] == [
        {"cause": "xid", "reason": card0.health_reason, "xid": 79}]
    assert [(e["card_uuid"], e["detail"]) for e in events(node, "refuse")] == [
        (card0.uuid, {"device": "0-6g", "reason": "unhealthy"}),
        (card0.uuid, {"device": "0", "reason": "unhealthy"})]
    assert [e["detail"]["by"] for e in events(node, "healthy")] == ["operator"]
    watch.stop()


def test_an_applications_xid_leaves_the_card_in_service(host: Host) -> None:
    watch = Watch(host, "--ignore-xid", "94")
    for line in ("xid 0 13", "xid 0 31", "xid 0 43", "xid 0 45", "xid 0 68", "xid 0 109",
                 "xid 0 94", "sbe 0"):
        watch.inject(line)
    watch.inject("dbe 1")  # read after the others: once card 1 is out, they were seen
    assert until(lambda: not cards(host)[1].healthy), watch.lines
    assert cards(host)[1].health_reason.startswith("double-bit ECC error at ")
    assert cards(host)[0].healthy
    assert sum("an application's error; the card stays in service" in ln
               for ln in watch.lines) == 7
    assert [e["detail"]["cause"] for e in events(host, "unhealthy")] == ["ecc"]
    watch.stop()


def test_a_flood_of_application_xids_is_summarised(host: Host) -> None:
    """A tenant can fault on purpose as often as it likes: the journal gets the
    first lines of a minute for a card, then one line that counts the rest
    (said at the latest when the watcher stops), never one line per XID."""
    from ocihook import logsummary

    watch = Watch(host)
    rounds, per_round = 10, 60  # the fake NVML's event set holds 64: a round fits
    for r in range(rounds):
        with watch.events.open("a") as f:
            f.write("".join(f"xid 0 {13 if i % 2 else 31}\n" for i in range(per_round)))
            f.write("xid 1 79\n")  # read after the round: said for card 1 every time
        assert until(lambda: sum("XID 79" in ln for ln in watch.lines) == r + 1), \
            watch.lines[-5:]
    lines = watch.stop()
    said = [ln for ln in lines if "an application's error" in ln]
    assert len(said) == logsummary.BURST
    [summary] = [ln for ln in lines if "more application XIDs" in ln]
    n = rounds * per_round - logsummary.BURST
    assert summary == (f"gpuslice: health: card 0 {cards(host)[0].uuid}: {n} more application "
                       f"XIDs in 60 s (XID 13 \u00d7{n // 2}, 31 \u00d7{n // 2}); the card "
                       "stays in service")
    assert len(lines) < 2 * rounds + logsummary.BURST + 5, len(lines)
    assert cards(host)[0].healthy


def test_a_lost_card_is_marked_and_the_others_still_watched(host: Host) -> None:
    watch = Watch(host)
    watch.inject("lost 1")
    assert until(lambda: not cards(host)[1].healthy), watch.lines
    assert cards(host)[1].health_reason.startswith("GPU is lost (NVML_ERROR_GPU_IS_LOST) at ")
    # It marks the lost card, then registers the others in a new event set:
    # an XID injected in between reached no set and was gone (as NVML's own
    # would be), and this test failed once in five full runs. Inject once the
    # new set watches.
    assert until(lambda: sum("health: watching" in ln for ln in watch.lines) >= 2), watch.lines
    watch.inject("xid 0 48")
    assert until(lambda: not cards(host)[0].healthy), watch.lines
    assert cards(host)[0].health_reason.startswith("XID 48 (double-bit ECC error) at ")
    # A second XID on a card out of service keeps the first reason.
    first = cards(host)[0].health_reason
    watch.inject("xid 0 79")
    watch.inject("dbe 0")
    assert until(lambda: sum("out of service already" in ln for ln in watch.lines) >= 2)
    assert cards(host)[0].health_reason == first
    lines = watch.stop()
    assert sum("health: watching" in ln for ln in lines) >= 2  # it started again without 1
    # `gpuslice cdi generate` keeps the watcher's marks.
    assert host.run("cdi", "generate").returncode == 0
    assert [c.healthy for c in cards(host)] == [False, False]


def test_the_watcher_waits_for_a_driver_and_says_why(tmp_path: Path, host: Host) -> None:
    """No driver in the driver root: one line, however often it retries, and it
    still stops when told (--for)."""
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(host.config.read_text().replace(f"driver_root: {host.driver_root}",
                                                   f"driver_root: {tmp_path}"))
    env = dict(os.environ, GPUSLICE_CONFIG=str(cfg))
    proc = subprocess.Popen(["gpuslice", "health", "watch", "--for", "3"], env=env,
                            stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    lines = err.splitlines()
    assert lines == [f"gpuslice: health: driver root {tmp_path} has no ld cache "
                     f"({tmp_path}/etc/ld.so.cache); it holds no usable driver; retrying every "
                     "2 s", "gpuslice: health: stopped"]


def test_a_database_it_cannot_use_is_one_line_and_a_retry(tmp_path: Path, host: Host) -> None:
    other = tmp_path / "other.db"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE notes (t TEXT)")
    db.commit()
    db.close()
    cfg = tmp_path / "other.yaml"
    cfg.write_text(host.config.read_text().replace(f"database: {host.tmp / 'state.db'}",
                                                   f"database: {other}"))
    env = dict(os.environ, GPUSLICE_CONFIG=str(cfg), GPUSLICE_FAKE_GPUS=str(host.gpus_json))
    env.pop("LD_LIBRARY_PATH", None)
    res = subprocess.run(["gpuslice", "health", "watch", "--for", "5"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stderr.splitlines() == [
        f"gpuslice: health: {other}: holds tables that are not gpuslice's; refusing to touch "
        "it (check the configuration key database); retrying every 2 s",
        "gpuslice: health: stopped"]


def test_operator_disables_and_enables_a_card(host: Host) -> None:
    hook = build_hook()
    db, state = str(host.tmp / "state.db"), str(host.tmp / "state")
    uuid0 = cards(host)[0].uuid
    held = subprocess.run([str(hook), "admit", "--id", "job1", "--device", "0-6g", "--card",
                           uuid0, "--memory-mib", "6144", "--cores", "0", "--database", db,
                           "--state-dir", state], capture_output=True, text=True)
    assert held.returncode == 0, held.stderr
    res = host.run("card", "disable", "0", "--reason", "fan replacement")
    assert res.returncode == 0, res.stderr
    reason = cards(host)[0].health_reason
    assert reason.startswith("fan replacement (gpuslice card disable at 20")
    assert res.stdout.splitlines() == [
        f"card 0 ({uuid0}) out of service: {reason}; new containers are refused there, "
        "`gpuslice card enable 0` returns it", "  left running: job1 (0-6g)"]
    assert "out of service already" in host.run("card", "disable", uuid0, "--reason",
                                                 "again").stdout
    assert cards(host)[0].health_reason == reason
    refused = subprocess.run([str(hook), "admit", "--id", "job2", "--device", "6g",
                              "--memory-mib", "6144", "--cores", "0", "--database", db,
                              "--state-dir", state, "--card", uuid0], capture_output=True,
                             text=True)
    assert refused.returncode == 1 and f"is out of service ({reason})" in refused.stderr
    assert host.run("card", "enable", "1").stdout.strip() == \
        f"card 1 ({cards(host)[1].uuid}) is in service already; nothing changed"
    doc = json.loads(host.run("status", "--json").stdout)
    assert [(c["healthy"], c["health_reason"], c["health_since"] is not None)
            for c in doc["cards"]] == [(False, reason, True), (True, "", False)]
    assert "OUT OF SERVICE: fan replacement" in host.run("status").stdout
    assert host.run("card", "enable", "0").returncode == 0
    assert cards(host)[0].healthy
    assert [e["detail"]["cause"] for e in events(host, "unhealthy")] == ["operator"]


@pytest.mark.parametrize("asan", [False, True], ids=["plain", "asan"])
def test_both_out_of_service_card_less_says_why(host: Host, asan: bool) -> None:
    hook = build_hook(asan=asan)  # the refusal's event, its strings, under ASan too
    for i in ("0", "1"):
        assert host.run("card", "disable", i, "--reason", f"r{i}").returncode == 0
    c = cards(host)
    admit = lambda cid, mib: subprocess.run(  # noqa: E731 - both cards, as a card-less 6g
        [str(hook), "admit", "--id", cid, "--device", "6g", "--memory-mib", str(mib), "--cores",
         "0", "--database", str(host.tmp / "state.db"), "--state-dir", str(host.tmp / "state"),
         "--card", c[0].uuid, "--card", c[1].uuid], capture_output=True, text=True)
    res = admit("j", 6144)
    assert res.returncode == 1
    assert res.stderr.strip() == (
        f"gpuslice-hook: container j: 6g: no card is in service: card 0 ({c[0].uuid}) is out "
        f"of service ({c[0].health_reason}); `gpuslice card enable 0` returns it; card 1 "
        f"({c[1].uuid}) is out of service ({c[1].health_reason}); `gpuslice card enable 1` "
        "returns it")
    # One card back: it is the one placed on; the other is named as out.
    assert host.run("card", "enable", "1").returncode == 0
    res = admit("big", 32768)
    assert res.returncode == 1
    assert res.stderr.strip().startswith("gpuslice-hook: container big: no card has room; the "
                                         f"likeliest: 6g: card 1 ({c[1].uuid}) has 16384 MiB")
    assert res.stderr.strip().endswith("; out of service: card 0")


@pytest.mark.parametrize("args,message", [
    (["enable", "7"], "gpuslice: error: card '7': the accountant knows no such card (by index "
                      "or UUID; its cards: 0, 1)"),
    (["disable", "GPU-nope", "--reason", "x"], "gpuslice: error: card 'GPU-nope': the "
     "accountant knows no such card (by index or UUID; its cards: 0, 1)"),
    (["disable", "0", "--reason", "two\nlines"], "gpuslice: error: --reason 'two\\nlines': "
     "must be one line of 1 to 200 characters without control characters"),
    (["disable", "0", "--reason", " "], "gpuslice: error: --reason ' ': must be one line of "
     "1 to 200 characters without control characters"),
])
def test_bad_card_or_reason_is_one_line(host: Host, args: List[str], message: str) -> None:
    res = host.run("card", *args)
    assert (res.returncode, res.stderr.splitlines(), res.stdout) == (2, [message], "")
    assert all(c.healthy for c in cards(host))
