"""gpuslice-hook resize and `gpuslice resize`, on the fake driver without an engine.

The container's processes are tests/shim's cuprog with the shim preloaded and
the spec's environment, as test_hook.py runs them; the accountant is a real
SQLite file. A resize is checked as an admission is, a shrink below what the
processes hold is refused with the numbers, and bad input is one line with
nothing changed: not the row, not the events, not the region.
"""
from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path
from typing import List, Optional, Tuple

import pytest

from fakehost import build_hook, fake_gpu
from ocihook import cheader, region
from test_hook import REPO, Node, cuprog, err, rows, spec_env, with_profile

GIB = 1 << 30
CUPROG = REPO / "tests" / "shim" / "build-plain" / "cuprog"


@pytest.fixture
def node(tmp_path: Path, driver_root: Path, fakedriver: Path) -> Node:
    subprocess.run(["make", "-s", "-C", str(REPO / "tests" / "shim"), "VARIANT=plain"],
                   check=True)
    return Node(tmp_path, driver_root, fakedriver)


def resize(node: Node, cid: str, device: str, *figures: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(node.hook_path), "resize", "--id", cid, "--device", device,
                           *figures, "--database", str(node.db),
                           "--state-dir", str(node.state_dir)], capture_output=True, timeout=60)


def row(node: Node, cid: str) -> tuple:
    [r] = rows(node.db, "SELECT device, memory_mib, cores FROM reservations WHERE "
                        "container_id=?", cid)
    return r


def resize_events(node: Node) -> List[dict]:
    return [json.loads(d) for (d,) in
            rows(node.db, "SELECT detail FROM events WHERE kind='resize' ORDER BY id")]


def region_of(node: Node, cid: str) -> Path:
    return node.state_dir / "containers" / cid / "region"


def caps_of(path: Path) -> Tuple[int, int, int]:
    """Device 0's memory cap, compute cap and priority number as the file holds
    them, whether or not a process has seen the device yet."""
    ffi = cheader.ffi()
    r = ffi.cast("struct gpuslice_region *", ffi.from_buffer(path.read_bytes()))
    return r.devices[0].limit_bytes, r.devices[0].core_limit, r.devices[0].priority


def region_but_lock(path: Path) -> bytes:
    """The file's bytes less its mutex, whose inner words a lock and unlock move."""
    data = path.read_bytes()
    at = cheader.ffi().offsetof("struct gpuslice_region", "lock")
    return data[:at] + data[at + cheader.constant("GPUSLICE_LOCK_SIZE"):]


class Running:
    """cuprog as a running process of container cid: it runs ops, then waits
    for a file, then runs more; its lines as they come."""

    def __init__(self, node: Node, cid: str, device: str, before: List[str],
                 after: List[str]) -> None:
        self.go = node.tmp / f"go-{cid}"
        env = dict(os.environ, GPUSLICE_FAKE_GPUS=str(node.host.gpus_json),
                   LD_LIBRARY_PATH=str(node.fakedriver),
                   LD_PRELOAD=str(REPO / "native" / "shim" / "build" / "libgpuslice.so"),
                   GPUSLICE_STATE_DIR=str(node.state_dir / "containers" / cid),
                   GPUSLICE_CARD_DIR=str(node.state_dir / "cards"),
                   GPUSLICE_CONTEXT_RESERVE="0", **spec_env(node, device))
        self.proc = subprocess.Popen([str(CUPROG), "direct", "init", "pctx", "0", *before,
                                      "hold", "waitfile", str(self.go), *after],
                                     env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.lines: List[List[str]] = []
        while True:
            line = self.proc.stdout.readline()
            assert line, f"cuprog exited early: {self.proc.stderr.read()}"
            if line.strip() == "held":
                break
            self.lines.append(line.split())

    def finish(self) -> List[List[str]]:
        """Let it run its second half; all its lines."""
        self.go.touch()
        out, errs = self.proc.communicate(input="", timeout=60)
        assert self.proc.returncode == 0, errs
        return self.lines + [line.split() for line in out.splitlines() if line.strip()]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


@pytest.mark.parametrize("asan", [False, True], ids=["plain", "asan"])
def test_a_grow_lets_a_running_process_allocate_what_did_not_fit(node: Node, asan: bool) -> None:
    if asan:
        node.hook_path = build_hook(asan=True)
    assert node.create("c", "0-6g").returncode == 0
    p = Running(node, "c", "0-6g", ["alloc", "4G", "alloc", "4G", "info"],
                ["info", "alloc", "4G", "info"])
    try:
        assert p.lines[-3:] == [["alloc", "0"], ["alloc", "2"],  # OUT_OF_MEMORY under 6 GiB
                                ["info", "0", str(2 * GIB), str(6 * GIB)]]
        res = resize(node, "c", "0-6g", "--memory-mib", "10240")
        assert res.returncode == 0, res.stderr
        assert res.stdout.decode() == (f"resized c 0-6g: 10240 MiB, 0% (was 6144 MiB, 0%) on "
                                       f"{fake_gpu(0)['uuid']}\n")
        lines = p.finish()
    finally:
        p.stop()
    assert lines[-3:] == [["info", "0", str(6 * GIB), str(10 * GIB)], ["alloc", "0"],
                          ["info", "0", str(2 * GIB), str(10 * GIB)]]
    assert row(node, "c") == ("0-6g", 10240, 0)
    assert resize_events(node) == [{"cores": 0, "device": "0-6g", "memory_mib": 10240,
                                    "old_cores": 0, "old_memory_mib": 6144}]
    doc = json.loads(node.host.run("status", "--json").stdout)
    [c] = doc["cards"][0]["containers"]
    assert (c["id"], c["memory_mib"]) == ("c", 10240)


def test_a_new_process_with_the_specs_old_env_keeps_the_hosts_cap(node: Node) -> None:
    """The spec still says 6 GiB to every process the container starts; after a
    resize, the region's figure holds for them."""
    assert node.create("c", "0-6g").returncode == 0
    assert cuprog(node, "c", "0-6g", "init", "pctx", "0", "info")[-1] == \
        ["info", "0", str(6 * GIB), str(6 * GIB)]
    assert resize(node, "c", "0-6g", "--memory-mib", "8192").returncode == 0
    assert spec_env(node, "0-6g")["GPUSLICE_MEMORY_LIMIT"] == "6144MiB"
    out = cuprog(node, "c", "0-6g", "init", "pctx", "0", "info", "fill", "1G")
    assert out[-2:] == [["info", "0", str(8 * GIB), str(8 * GIB)], ["fill", "2", str(8 * GIB)]]
    assert region.read(str(region_of(node, "c"))).devices[0].limit_bytes == 8 * GIB


def test_the_accountants_caps_are_in_the_region_before_any_process(node: Node) -> None:
    """The hook writes the row's caps and priority at create, and a resize's
    new ones, before any process of the container has started."""
    with_profile(node, "{name: 2g-30, memory: 2GiB, cores: 30, priority: high}")
    assert node.create("c", "0-2g-30").returncode == 0
    assert region.read(str(region_of(node, "c"))).devices == []  # none seen by a process
    assert caps_of(region_of(node, "c")) == \
        (2 * GIB, 30, cheader.constant("GPUSLICE_PRIORITY_HIGH"))
    st = region_of(node, "c").stat()  # the container's user's, as its first process makes it
    assert (st.st_uid, st.st_gid, oct(st.st_mode & 0o777)) == (1000, 1000, "0o644")
    assert cuprog(node, "c", "0-2g-30", "init", "pctx", "0", "info")[-1] == \
        ["info", "0", str(2 * GIB), str(2 * GIB)]
    res = resize(node, "c", "0-2g-30", "--memory-mib", "4096", "--cores", "50")
    assert res.returncode == 0, res.stderr
    assert caps_of(region_of(node, "c")) == \
        (4 * GIB, 50, cheader.constant("GPUSLICE_PRIORITY_HIGH"))
    out = cuprog(node, "c", "0-2g-30", "init", "pctx", "0", "info")
    assert out[-1] == ["info", "0", str(4 * GIB), str(4 * GIB)]
    r = region.read(str(region_of(node, "c")))
    assert (r.devices[0].limit_bytes, r.devices[0].core_limit, r.devices[0].priority) == \
        (4 * GIB, 50, "high")
    assert row(node, "c") == ("0-2g-30", 4096, 50)


@pytest.mark.parametrize("asan", [False, True], ids=["plain", "asan"])
def test_a_shrink_below_what_the_processes_hold_is_refused_with_the_numbers(
        node: Node, asan: bool) -> None:
    if asan:
        node.hook_path = build_hook(asan=True)
    assert node.create("c" * 64, "0-6g").returncode == 0
    cid = "c" * 64
    p = Running(node, cid, "0-6g", ["alloc", "3G"], ["alloc", "1G", "info"])
    try:
        res = resize(node, cid, "0-6g", "--memory-mib", "2048")
        assert res.returncode == 1
        assert err(res) == ("gpuslice-hook: container cccccccccccc: 0-6g: container "
                            "cccccccccccc's processes hold 3072 MiB now, 2048 MiB asked; free "
                            "memory in it first or ask for at least that")
        assert row(node, cid) == ("0-6g", 6144, 0) and resize_events(node) == []
        assert region.read(str(region_of(node, cid))).devices[0].limit_bytes == 6 * GIB
        # To what it holds: allowed; nothing more fits.
        assert resize(node, cid, "0-6g", "--memory-mib", "3072").returncode == 0
        lines = p.finish()
    finally:
        p.stop()
    assert lines[-2:] == [["alloc", "2"], ["info", "0", "0", str(3 * GIB)]]
    assert row(node, cid) == ("0-6g", 3072, 0)


def test_a_grow_is_checked_against_the_card_as_an_admission_is(node: Node) -> None:
    with_profile(node, "{name: 2g-30, memory: 2GiB, cores: 30}")
    uuid = fake_gpu(0)["uuid"]
    for cid in ("a", "b"):
        assert node.create(cid, "0-6g").returncode == 0
    res = resize(node, "a", "0-6g", "--memory-mib", "12288")
    assert res.returncode == 1
    assert err(res) == (f"gpuslice-hook: container a: 0-6g: card 0 ({uuid}) has room for 10240 "
                        "MiB for this slice (6144 MiB of 16384 MiB held by others), 12288 MiB "
                        "asked; stop a container on it or ask for less")
    assert resize(node, "a", "0-6g", "--memory-mib", "10240").returncode == 0  # exactly full
    assert node.create("x", "0-2g-30").returncode == 1  # and the card is full for admissions
    assert node.release("b").returncode == 0
    for cid in ("b", "c"):
        assert node.create(cid, "0-2g-30").returncode == 0
    res = resize(node, "b", "0-2g-30", "--cores", "80")
    assert res.returncode == 1
    assert err(res) == (f"gpuslice-hook: container b: 0-2g-30: card 0 ({uuid}) has 70% of its "
                        "compute left for this slice, 80% asked; stop a capped container on it "
                        "or ask for less")
    assert resize(node, "b", "0-2g-30", "--cores", "70").returncode == 0
    # Out of service: a slice there may shrink, not grow.
    assert node.host.run("card", "disable", "0", "--reason", "test").returncode == 0
    res = resize(node, "b", "0-2g-30", "--memory-mib", "2176")
    assert res.returncode == 1
    line = err(res)
    assert line.startswith(f"gpuslice-hook: container b: 0-2g-30: card 0 ({uuid}) is out of "
                           "service (test (gpuslice card disable at ")
    assert line.endswith("); `gpuslice card enable 0` returns it; it can shrink, not grow")
    assert resize(node, "b", "0-2g-30", "--memory-mib", "1024").returncode == 0
    assert [(e["memory_mib"], e["cores"]) for e in resize_events(node)] == \
        [(10240, 0), (2048, 70), (1024, 70)]


@pytest.mark.parametrize("asan", [False, True], ids=["plain", "asan"])
def test_bad_input_is_one_line_and_changes_nothing(node: Node, asan: bool) -> None:
    if asan:
        node.hook_path = build_hook(asan=True)
    assert node.create("c", "0-6g").returncode == 0
    assert node.create("w", "1").returncode == 0
    assert node.create("two", "0-6g").returncode == 0
    assert node.create("two", "1-6g").returncode == 1  # card 1 is held whole
    assert node.create("two", "6g").returncode == 1
    with_profile(node, "{name: 1g, memory: 1GiB}")
    assert node.create("two", "0-1g").returncode == 0
    usage = ("usage: gpuslice-hook resize --database DB --state-dir DIR --id CID --device NAME "
             "[--memory-mib N] [--cores N]")
    cases = [
        (["--id", "nobody", "--device", "0-6g", "--cores", "1"], 2,
         "error: container nobody holds nothing; `gpuslice status` lists what is held"),
        (["--id", "c", "--device", "1-6g", "--cores", "1"], 2,
         "error: container c holds device 0-6g, not 1-6g; name that one"),
        (["--id", "w", "--device", "1", "--cores", "1"], 2,
         "error: container w holds 1 as a whole card, which has no slice to resize"),
        (["--id", "two", "--device", "0-6g", "--cores", "1"], 2,
         "error: container two holds 2 devices (0-1g, 0-6g): its processes see one cap for all "
         "of them, so only a container of one slice can be resized"),
        (["--id", "c", "--device", "0-6g"], 2,
         f"error: resize: --memory-mib N, --cores N or both are needed; {usage}"),
        (["--id", "c", "--device", "0-6g", "--cores", "101"], 2,
         'error: --cores "101" is not a whole number from 0 to 100'),
        (["--id", "c", "--device", "0-6g", "--memory-mib", "0"], 2,
         'error: --memory-mib "0" is not a whole number from 1 to 16777216'),
        (["--id", "../x", "--device", "0-6g", "--cores", "1"], 2, None),
        (["--id", "c", "--device", "0-6g", "--exclusive"], 2, None),
    ]
    before = rows(node.db, "SELECT * FROM reservations ORDER BY container_id, device")
    events = rows(node.db, "SELECT count(*) FROM events")
    made = region_but_lock(region_of(node, "c"))  # the hook's, at create
    for args, code, line in cases:
        res = subprocess.run([str(node.hook_path), "resize", *args, "--database", str(node.db),
                              "--state-dir", str(node.state_dir)], capture_output=True)
        assert res.returncode == code, (args, res.stderr)
        got = err(res)
        if line is not None:
            assert got == "gpuslice-hook: " + line, args
        assert rows(node.db, "SELECT * FROM reservations ORDER BY container_id, device") == \
            before, args
        assert rows(node.db, "SELECT count(*) FROM events") == events, args
    assert region_but_lock(region_of(node, "c")) == made
    assert cuprog(node, "c", "0-6g", "init", "pctx", "0", "info")[-1] == \
        ["info", "0", str(6 * GIB), str(6 * GIB)]


def test_a_region_a_tenant_made_otherwise_is_not_touched(node: Node, tmp_path: Path) -> None:
    assert node.create("c", "0-6g").returncode == 0
    folder = node.state_dir / "containers" / "c"
    target = tmp_path / "elsewhere"
    target.write_bytes(b"")
    cases = [("link", lambda p: p.symlink_to(target), "is a symbolic link, not a region"),
             ("fifo", lambda p: os.mkfifo(p), "is not a regular file of one link"),
             ("hardlink", lambda p: os.link(target, p), "is not a regular file of one link"),
             ("size", lambda p: p.write_bytes(b"x" * 100), "100 bytes, a region of this "
              "gpuslice has")]
    for name, make, words in cases:
        (folder / "region").unlink(missing_ok=True)  # the hook's, made at create
        make(folder / "region")
        res = resize(node, "c", "0-6g", "--memory-mib", "4096")
        assert res.returncode == 2, name
        assert words in err(res), name
        assert row(node, "c") == ("0-6g", 6144, 0), name
        assert target.read_bytes() == b"", name
        (folder / "region").unlink()
    assert resize_events(node) == []


def test_a_container_admitted_without_a_state_dir_changes_its_row_only(node: Node) -> None:
    res = subprocess.run([str(node.hook_path), "admit", "--id", "a", "--device", "0-6g",
                          "--memory-mib", "6144", "--database", str(node.db),
                          "--state-dir", str(node.state_dir)], capture_output=True)
    assert res.returncode == 0, res.stderr
    assert resize(node, "a", "0-6g", "--memory-mib", "2048").returncode == 0
    assert row(node, "a") == ("0-6g", 2048, 0)
    assert not (node.state_dir / "containers" / "a").exists()


def capacity_holds(node: Node, uuid: str) -> Optional[str]:
    [(held,)] = rows(node.db, "SELECT coalesce(sum(memory_mib), 0) FROM reservations WHERE "
                              "card_uuid=?", uuid)
    return None if held <= 16384 else f"{held} MiB held of 16384"


def test_racing_resizes_and_admissions_never_over_commit_the_card(node: Node) -> None:
    """Resizes of two slices up and down race admissions and releases of others
    on one card, round after round; the books never hold more than the card."""
    uuid = fake_gpu(0)["uuid"]
    for cid in ("r1", "r2"):
        assert node.create(cid, "0-6g").returncode == 0
    hook = [str(node.hook_path)]
    common = ["--database", str(node.db), "--state-dir", str(node.state_dir)]
    seen: List[str] = []

    def resizer(cid: str, sizes: List[int]) -> None:
        for mib in sizes:
            subprocess.run([*hook, "resize", "--id", cid, "--device", "0-6g", "--memory-mib",
                            str(mib), *common], capture_output=True, timeout=60)
            bad = capacity_holds(node, uuid)
            if bad:
                seen.append(bad)

    def admitter(n: int) -> None:
        for k in range(6):
            cid = f"a{n}-{k}"
            subprocess.run([*hook, "admit", "--id", cid, "--device", "0-6g", "--card", uuid,
                            "--memory-mib", "2048", *common], capture_output=True, timeout=60)
            bad = capacity_holds(node, uuid)
            if bad:
                seen.append(bad)
            if k % 2:
                subprocess.run([*hook, "release", "--id", cid, *common], capture_output=True,
                               timeout=60)

    threads = [threading.Thread(target=resizer, args=("r1", [1024, 8192, 2048, 10240] * 3)),
               threading.Thread(target=resizer, args=("r2", [8192, 1024, 10240, 2048] * 3))]
    threads += [threading.Thread(target=admitter, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [] and capacity_holds(node, uuid) is None
    assert len(resize_events(node)) > 0  # the race had resizes that went through
    # Each resize event's new size fitted what the others held at that moment:
    # the last one agrees with the row.
    for cid in ("r1", "r2"):
        [(last,)] = rows(node.db, "SELECT detail FROM events WHERE kind='resize' AND "
                                  "container_id=? ORDER BY id DESC LIMIT 1", cid) or \
            [(json.dumps({"memory_mib": 6144}),)]
        assert json.loads(last)["memory_mib"] == row(node, cid)[1]


# -- gpuslice resize: the CLI ------------------------------------------------------

def gpuslice(node: Node, *args: str) -> subprocess.CompletedProcess:
    return node.host.run(*args)


def test_the_cli_finds_the_container_by_id_prefix_or_name(node: Node) -> None:
    a, b = "abcd" + "1" * 60, "abce" + "2" * 60
    bundle = node.bundle("named", {"ociVersion": "1.0.2", "root": {"path": "rootfs"},
                                   "process": {"user": {"uid": 0, "gid": 0}},
                                   "annotations": {"nerdctl/name": "trainer"}})
    assert node.create(a, "0-6g", bundle=bundle).returncode == 0
    assert node.create(b, "1-6g").returncode == 0
    res = gpuslice(node, "resize", "trainer", "--memory", "8GiB")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("resized abcd11111111 0-6g: 8192 MiB, 0% (was 6144 MiB")
    assert gpuslice(node, "resize", "abce", "--cores", "40%").returncode == 0
    assert gpuslice(node, "resize", b, "--memory", "4g").returncode == 0
    doc = json.loads(gpuslice(node, "status", "--json").stdout)
    assert [(c["id"], c["memory_mib"], c["cores"]) for card in doc["cards"]
            for c in card["containers"]] == [(a, 8192, 0), (b, 4096, 40)]
    assert "8192 of 16384 MiB reserved" in gpuslice(node, "status").stdout


def test_the_cli_says_what_is_wrong_in_one_line_and_changes_nothing(node: Node) -> None:
    a, b = "abcd1" + "1" * 59, "abcd2" + "2" * 59
    for cid, name in ((a, "same"), (b, "same")):
        bundle = node.bundle(cid[:5], {"ociVersion": "1.0.2", "root": {"path": "rootfs"},
                                       "process": {"user": {"uid": 0, "gid": 0}},
                                       "annotations": {"nerdctl/name": name}})
        assert node.create(cid, "0-6g", bundle=bundle).returncode == 0
    before = rows(node.db, "SELECT * FROM reservations ORDER BY container_id")
    cases = [
        (["nobody", "--memory", "1g"], "container 'nobody' holds nothing: no id, id prefix or "
         "recorded name matches; `gpuslice status` lists what is held"),
        (["abc", "--memory", "1g"], "container 'abc' is under 4 characters; give at least 4 of "
         "its id, or its full id or name"),
        (["abcd", "--memory", "1g"], "container 'abcd' matches 2 containers (abcd11111111 (id "
         "prefix), abcd22222222 (id prefix)); name one by its full id (`gpuslice status` lists "
         "them)"),
        (["same", "--memory", "1g"], "container 'same' matches 2 containers (abcd11111111 "
         "(name), abcd22222222 (name)); name one by its full id (`gpuslice status` lists them)"),
        ([a, "--memory", "1000m"], "--memory: memory '1000m (1000 MiB)' is not a multiple of 128 "
         "MiB: write 896MiB or 1GiB"),
        ([a, "--memory", "lots"], "--memory: memory 'lots' is not a size; use e.g. 4GiB, "
         "4096MiB, 4g, 512m or plain bytes"),
        ([a, "--cores", "101"], "--cores: cores '101' is out of range; it must be 1 to 100 (0 "
         "or empty for no cap)"),
        ([a], "resize needs --memory SIZE, --cores N or both"),
    ]
    for args, line in cases:
        res = gpuslice(node, "resize", *args)
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1, (args, res.stderr)
        if line is not None:
            assert lines[0] == f"gpuslice: error: {line}", args
        assert rows(node.db, "SELECT * FROM reservations ORDER BY container_id") == before
    assert gpuslice(node, "resize", "abcd1", "--memory", "1g").returncode == 0
