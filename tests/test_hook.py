"""gpuslice-hook create / release, run as the runtime runs it: OCI state on stdin.

The cards come from the fake NVML; the accountant is a real SQLite file. Bad
input (written by whoever built the container) must exit 2 with one line and
change nothing: no reservation, no state dir.
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import sqlite3
import subprocess
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from fakehost import Host, build_hook, fake_gpu, shim_holder
from ocihook import accountant as acct

REPO = Path(__file__).resolve().parent.parent
GIB_MIB = 1024


def make_bundle(b: Path, config: Optional[Dict] = None) -> Path:
    """An OCI bundle at b: a rootfs and config.json (a plain one by default)."""
    b.mkdir(exist_ok=True)
    (b / "rootfs").mkdir(exist_ok=True)
    (b / "config.json").write_text(json.dumps(
        config if config is not None else
        {"ociVersion": "1.0.2", "root": {"path": "rootfs"},
         "process": {"user": {"uid": 1000, "gid": 1000}}}))
    return b


class Node:
    """A host: two fake 16 GiB cards, a spec from `gpuslice cdi generate` whose
    hooks name this tree's gpuslice-hook, a tmp database and state dir. The
    hook is run with the args the spec gives it, as the runtime runs it."""

    def __init__(self, tmp: Path, driver_root: Path, fakedriver: Path) -> None:
        (tmp / "host").mkdir()
        self.tmp = tmp
        self.fakedriver = fakedriver
        self.host = Host(tmp / "host", driver_root,
                         [fake_gpu(0, memory_mib=16 * GIB_MIB), fake_gpu(1, memory_mib=16 * GIB_MIB)],
                         extra_config="  - {name: 6g, memory: 6GiB}\n")
        self.db = self.host.tmp / "state.db"
        self.state_dir = self.host.tmp / "state"
        self.config = self.host.config
        self.hook_path = self.host.use_real_hook()
        self.generate()

    def generate(self) -> None:
        res = self.host.run("cdi", "generate")
        assert res.returncode == 0, res.stderr

    def bundle(self, name: str = "bundle", config: Optional[Dict] = None) -> Path:
        return make_bundle(self.tmp / name, config)

    def hook(self, args: List[str], state: object) -> subprocess.CompletedProcess:
        stdin = state if isinstance(state, bytes) else json.dumps(state).encode()
        # A private mount namespace, as runc gives the hook: its bind mounts
        # go away with it.
        return subprocess.run(["unshare", "--mount", "--propagation", "private",
                               str(self.hook_path), *args], input=stdin, capture_output=True,
                              timeout=60)

    def create_args(self, device: str) -> List[str]:
        return self.host.spec_hook(device)[1:]

    def create(self, cid: str, device: str, bundle: Optional[Path] = None,
               pid: Optional[int] = None) -> subprocess.CompletedProcess:
        state = {"ociVersion": "1.0.2", "id": cid, "status": "creating",
                 "bundle": str(bundle or self.bundle())}
        if pid:
            state["pid"] = pid
        return self.hook(self.create_args(device), state)

    def release(self, cid: str) -> subprocess.CompletedProcess:
        return self.hook(self.host.spec_hook("0", "poststop")[1:],
                         {"ociVersion": "1.0.2", "id": cid, "status": "stopped",
                          "bundle": str(self.bundle())})

    def held(self) -> Dict[str, List[str]]:
        from ocihook import accountant as acct

        a = acct.Accountant(str(self.db))
        try:
            return {u.card.uuid: sorted(r.container_id for r in u.reservations)
                    for u in a.usage()}
        finally:
            a.close()


@pytest.fixture
def node(tmp_path: Path, driver_root: Path, fakedriver: Path) -> Node:
    return Node(tmp_path, driver_root, fakedriver)


def err(res: subprocess.CompletedProcess) -> str:
    lines = res.stderr.decode().strip().splitlines()
    assert len(lines) == 1, res.stderr
    return lines[0]


def test_three_6g_on_one_card_two_run_third_refused_until_one_stops(node: Node) -> None:
    for cid in ("c1", "c2"):
        res = node.create(cid, "0-6g")
        assert res.returncode == 0, res.stderr
        d = node.state_dir / "containers" / cid
        assert not (d / "placement").exists()  # a card named by the device: nothing to place
        st = d.stat()
        if os.geteuid() == 0:
            assert (st.st_uid, st.st_gid) == (1000, 1000)  # the container's user writes there
    res = node.create("c3", "0-6g")
    assert res.returncode == 1
    line = err(res)
    assert line.startswith("gpuslice-hook: container c3: 0-6g: card 0 (GPU-")
    assert "4096 MiB free of 16384 MiB, 6144 MiB asked; stop a container" in line
    assert not (node.state_dir / "containers" / "c3").exists()
    assert node.release("c1").returncode == 0
    assert not (node.state_dir / "containers" / "c1").exists()
    assert node.create("c3", "0-6g").returncode == 0
    assert node.held()[fake_gpu(0)["uuid"]] == ["c2", "c3"]


def test_the_spec_tells_the_hook_the_request(node: Node) -> None:
    """The hook reads no configuration: its args carry the request and where things
    are; the admission policy is the accountant's, not the device's."""
    common = ["--database", str(node.db), "--state-dir", str(node.state_dir)]
    policy = ["--preload", "env"]
    uuid0, uuid1 = fake_gpu(0)["uuid"], fake_gpu(1)["uuid"]
    assert node.create_args("0-6g") == ["create", "--device", "0-6g", "--card", uuid0,
                                        "--memory-mib", "6144", "--cores", "0",
                                        "--priority", "normal", *common, *policy]
    assert node.create_args("4g-30") == ["create", "--device", "4g-30", "--memory-mib", "4096",
                                         "--cores", "30", "--priority", "normal", *common,
                                         *policy]
    assert node.create_args("1")[3:6] == ["--card", uuid1, "--exclusive"]
    assert node.create_args("all")[3:8] == ["--card", uuid0, "--card", uuid1, "--exclusive"]
    assert node.host.spec_hook("0-6g", "poststop") == ["gpuslice-hook", "release", *common]


def test_cardless_profile_is_placed_and_whole_card_excludes(node: Node) -> None:
    assert node.create("w", "1").returncode == 0  # card 1 whole
    for cid in ("a", "b"):
        assert node.create(cid, "4g-30").returncode == 0
        # Placed by the accountant: the card it picked, for the shim.
        card = (node.state_dir / "containers" / cid / "placement").read_text()
        assert card == f"0 {fake_gpu(0)['uuid']}\n"
    held = node.held()
    assert held[fake_gpu(0)["uuid"]] == ["a", "b"] and held[fake_gpu(1)["uuid"]] == ["w"]
    res = node.create("s", "1-6g")
    assert res.returncode == 1 and "held whole by w" in err(res)


def test_a_card_the_accountant_does_not_know(node: Node) -> None:
    """A spec older than the last card change names a card the books lack."""
    args = node.create_args("0")
    unknown = "GPU-00000000-0000-0000-0000-000000000000"
    args[args.index(fake_gpu(0)["uuid"])] = unknown
    res = node.hook(args, {"ociVersion": "1.0.2", "id": "u", "status": "creating",
                           "bundle": str(node.bundle())})
    assert res.returncode == 1
    assert f"card {unknown} is not known to the accountant; run `gpuslice cdi generate`" \
        in err(res)


def test_dead_container_reclaimed_at_next_admission(node: Node) -> None:
    child = subprocess.Popen(["sleep", "60"])
    assert node.create("victim", "0-6g", pid=child.pid).returncode == 0
    assert node.create("c2", "0-6g", pid=os.getpid()).returncode == 0
    assert node.create("c3", "0-6g").returncode == 1
    child.kill()  # kill -9 of the container: its poststop never comes
    child.wait()
    assert (node.state_dir / "containers" / "victim").is_dir()
    assert node.create("c3", "0-6g").returncode == 0
    assert node.held()[fake_gpu(0)["uuid"]] == ["c2", "c3"]
    # Its folder went with its reservation: nothing is left for gc to miss.
    assert not (node.state_dir / "containers" / "victim").exists()
    assert (node.state_dir / "containers" / "c2").is_dir()


ID_RULE = "is not 1-128 letters, digits, '_', '.', '-' starting with a letter or digit"
BY_RUNTIME = "; is this run by an OCI runtime?"


def hostile_cases(node: Node) -> List[tuple]:
    """(name, state on stdin, the whole line the hook must print after "error: ")."""
    good = node.bundle()
    not_dir = node.tmp / "file"
    not_dir.write_text("x")
    link = node.tmp / "linked-bundle"
    link.symlink_to(good)
    evil = node.tmp / "evil"
    evil.mkdir()
    (evil / "config.json").symlink_to("/etc/passwd")
    huge = node.tmp / "huge"
    huge.mkdir()
    with open(huge / "config.json", "wb") as f:
        f.write(b'{"x": "' + b"a" * (50 * 1024 * 1024) + b'"}')
    baduser = node.bundle("baduser", {"process": {"user": {"uid": -1, "gid": 0}}})
    process = node.bundle("process", {"process": 1})
    array = node.bundle("array", ["x", {"process": 1}, 3])
    # A bundle whose name holds a newline (F7): every message stays one line.
    newline = node.bundle("new\nline")
    (newline / "config.json").write_bytes(b'{\n "a": 1\n "b": 2}')
    state = {"ociVersion": "1.0.2", "status": "creating", "bundle": str(good)}
    long_id = "x" * 300 + "/"
    return [
        ("garbage stdin", b"\x00\xffnot json at all",
         "the OCI state on stdin is not JSON: expected UTF-8, not byte 0xff, at line 1, "
         "column 2 (byte offset 1)" + BY_RUNTIME),
        ("a list", [1, 2], "the OCI state on stdin is not a JSON object: [1, 2]" + BY_RUNTIME),
        ("no id", state, 'the OCI state on stdin has no "id" (the container\'s)' + BY_RUNTIME),
        ("id with ../", dict(state, id="../../etc"),
         f'container id "../../etc" in the OCI state {ID_RULE}'),
        ("id with /", dict(state, id="a/b"), f'container id "a/b" in the OCI state {ID_RULE}'),
        # Named by its JSON text, at most 256 bytes of it.
        ("id too long", dict(state, id=long_id),
         f'container id "{"x" * 255}... in the OCI state {ID_RULE}'),
        ("id with a line separator",
         json.dumps(dict(state, id="a\u2028b"), ensure_ascii=False).encode(),
         f'container id "a\\u2028b" in the OCI state {ID_RULE}'),
        ("id a number", b'{"id":\n  7, "bundle": "/"}',
         f"container id 7 in the OCI state {ID_RULE}"),
        ("relative bundle", dict(state, id="c", bundle="bundle"),
         'bundle "bundle" in the OCI state is not an absolute path'),
        ("bundle missing", dict(state, id="c", bundle=str(node.tmp / "no\nsuch")),
         f"bundle {node.tmp}/no\\nsuch: No such file or directory"),
        ("bundle is a file", dict(state, id="c", bundle=str(not_dir)),
         f"bundle {not_dir} is not a folder"),
        ("bundle is a link", dict(state, id="c", bundle=str(link)),
         f"bundle {link} is not a folder"),
        ("config.json links out", dict(state, id="c", bundle=str(evil)),
         f"{evil}/config.json: Too many levels of symbolic links (a link is refused)"),
        ("50 MB config.json", dict(state, id="c", bundle=str(huge)),
         f"{huge}/config.json is over 16 MiB"),
        ("config.json not JSON, bundle with a newline", dict(state, id="c", bundle=str(newline)),
         f"{node.tmp}/new\\nline/config.json is not JSON: expected ',' or '}}' at line 3, "
         "column 2 (byte offset 11)"),
        ("config.json an array", dict(state, id="c", bundle=str(array)),
         f'{array}/config.json is not a JSON object: ["x", {{"process": 1}}, 3]'),
        ("process a number", dict(state, id="c", bundle=str(process)),
         "process 1 in config.json is not a JSON object"),
        ("negative uid", dict(state, id="c", bundle=str(baduser)),
         "process.user.uid -1 in config.json is not an id (a whole number from 0 to "
         "4294967294)"),
        ("pid not a number", dict(state, id="c", pid="1"),
         'pid "1" in the OCI state is not a positive integer'),
        ("huge stdin", b" " * (70 * 1024),
         "the OCI state on stdin is over 65536 bytes" + BY_RUNTIME),
    ]


@pytest.mark.parametrize("asan", [False, True], ids=["plain", "asan"])
def test_hostile_input_changes_nothing(node: Node, asan: bool) -> None:
    if asan:  # any overflow or leak on hostile input aborts with a report
        node.hook_path = build_hook(asan=True)
    for name, state, expected in hostile_cases(node):
        res = node.hook(node.create_args("0-6g"), state)
        assert res.returncode == 2, (name, res.stderr)
        assert err(res) == "gpuslice-hook: error: " + expected, name
        assert not (node.state_dir / "containers").exists() or \
            not any((node.state_dir / "containers").iterdir()), name
        if node.db.exists():
            assert all(v == [] for v in node.held().values()), name


USERNS_WHY = ("the hook runs in a user namespace (uid 0 there is uid 0 of the host), as a "
              "rootless container's hooks do, and the node's accountant is root's: a container "
              "that could write it could grant itself any slice; ")
FIX_CONTAINER = ("run the container as root (sudo podman run ..., or a rootful podman service) "
                 "without --userns or --uidmap")
FIX_OPERATOR = "run gpuslice-hook as root on the host, outside any user namespace"


@pytest.mark.parametrize("asan", [False, True], ids=["plain", "asan"])
def test_in_a_user_namespace_nothing_is_granted_or_touched(node: Node, asan: bool) -> None:
    """Every verb, run as a rootless runtime runs it: in a user namespace. This
    one (`unshare --map-root-user` by root) maps its root to the host's, so the
    files would let it write: the check refuses, not the permissions. A
    poststop there has nothing to give back (its create was refused) and says
    nothing. tests/test_rootless_podman.py has the real thing."""
    if asan:  # the check's own read of /proc/self/uid_map: no overflow, no leak
        node.hook_path = build_hook(asan=True)
    assert node.create("held", "0-6g").returncode == 0

    def in_userns(args: List[str], state: Optional[Dict] = None) -> subprocess.CompletedProcess:
        return subprocess.run(["unshare", "--user", "--map-root-user", str(node.hook_path),
                               *args], input=json.dumps(state).encode() if state else b"",
                              capture_output=True, timeout=60)

    def books() -> tuple:
        db = sqlite3.connect(str(node.db))
        try:
            return (db.execute("SELECT * FROM reservations").fetchall(),
                    db.execute("SELECT * FROM events").fetchall(),
                    sorted(p.name for p in (node.state_dir / "containers").iterdir()))
        finally:
            db.close()

    writable = subprocess.run(["unshare", "--user", "--map-root-user", "test", "-w",
                               str(node.db)])
    assert writable.returncode == 0
    before = books()
    bundle = str(node.bundle())
    for device in ("0-6g", "6g", "0", "all"):
        res = in_userns(node.create_args(device), {"ociVersion": "1.0.2", "id": "c1",
                                                   "status": "creating", "bundle": bundle})
        assert res.returncode == 2, res.stderr
        assert err(res) == (f"gpuslice-hook: error: container c1: device {device} is not "
                            f"granted: {USERNS_WHY}{FIX_CONTAINER}")
    res = in_userns(node.host.spec_hook("0-6g", "poststop")[1:],
                    {"ociVersion": "1.0.2", "id": "held", "status": "stopped", "bundle": bundle})
    assert (res.returncode, res.stdout, res.stderr) == (0, b"", b"")
    common = ["--database", str(node.db), "--state-dir", str(node.state_dir)]
    for args, who in ((["gc"], "gc"), (["release", "--id", "held"], "release"),
                      (["admit", "--id", "c2", "--device", "6g", "--memory-mib", "6144"],
                       "container c2: device 6g is not granted")):
        res = in_userns(args + common)
        assert res.returncode == 2, res.stderr
        assert err(res) == f"gpuslice-hook: error: {who}: {USERNS_WHY}{FIX_OPERATOR}"
    # A namespace that maps nothing: the hook runs as the overflow uid.
    overflow = Path("/proc/sys/kernel/overflowuid").read_text().strip()
    unmapped = subprocess.run(["unshare", "--user", str(node.hook_path), "gc", *common],
                              capture_output=True, timeout=60)
    assert unmapped.returncode == 2, unmapped.stderr
    assert err(unmapped) == (f"gpuslice-hook: error: gc: {USERNS_WHY}{FIX_OPERATOR}".replace(
        "uid 0 there is uid 0 of the host", f"uid {overflow} there is no uid of the host"))
    assert books() == before
    assert node.release("held").returncode == 0  # on the host, as root: given back


@pytest.mark.parametrize("text,expected", [
    (b"", "expected a value at line 1, column 1 (byte offset 0)"),
    (b'{"id": "c",\n "bundle" "/"}', "expected ':' after the member name at line 2, column 11 "
     "(byte offset 22)"),
    (b'{"id": "c", }', "expected a member name (a string in double quotes) at line 1, column 13 "
     "(byte offset 12)"),
    # Columns count characters, offsets bytes.
    (b'["\xc3\xa9\xc3\xa9", 1 2]', "expected ',' or ']' at line 1, column 10 (byte offset 11)"),
    (b'{"id": "abc', "expected '\"' to close the string at line 1, column 8 (byte offset 7)"),
    (b'{"id": "a\tb"}', "expected an escape such as \\n or \\u001f, not a raw control "
     "character, in a string at line 1, column 10 (byte offset 9)"),
    (b'{"id": "a\\qb"}', "expected an escape: one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t "
     "\\uXXXX at line 1, column 10 (byte offset 9)"),
    (b'{"id": "\\u12"}', "expected four hex digits after \\u at line 1, column 9 (byte offset 8)"),
    (b'{"pid": -}', "expected a digit after '-' at line 1, column 10 (byte offset 9)"),
    (b'{"pid": 1.}', "expected a digit after '.' at line 1, column 11 (byte offset 10)"),
    (b'{"pid": 1e}', "expected a digit in the exponent at line 1, column 11 (byte offset 10)"),
    (b'{"pid": tru}', "expected a value at line 1, column 9 (byte offset 8)"),
    (b'{} {}', "expected nothing after the value at line 1, column 4 (byte offset 3)"),
    (b"[" * 65 + b"]" * 65, "expected at most 64 levels of nesting at line 1, column 65 "
     "(byte offset 64)"),
    (b'\xef\xbb\xbf{"id": "\xe9"}', "expected UTF-8, not byte 0xe9, at line 1, column 9 "
     "(byte offset 11)"),
])
def test_json_errors_say_what_was_expected_and_where(node: Node, text: bytes,
                                                     expected: str) -> None:
    res = node.hook(node.create_args("0-6g"), text)
    assert res.returncode == 2
    assert err(res) == f"gpuslice-hook: error: the OCI state on stdin is not JSON: {expected}" \
        + BY_RUNTIME


def test_a_bad_root_path_is_said_after_admission_and_undone(node: Node) -> None:
    """root.path is read before admission but reported after it: a container that
    does not fit hears that first; one that fits is admitted, then undone."""
    for name, config, why in [
            ("empty", {"root": {"path": ""}}, 'root.path "" in {}/config.json is not a path'),
            ("string", {"root": "rootfs"}, 'root "rootfs" in {}/config.json is not a JSON object'),
            ("missing", {"ociVersion": "1.0.2"},
             "{}/config.json has no root.path (the container's root file system)")]:
        b = node.bundle(f"root-{name}", config)
        res = node.create(f"r-{name}", "0-6g", bundle=b)
        assert res.returncode == 2, (name, res.stderr)
        assert err(res) == "gpuslice-hook: error: " + why.format(b), name
        assert all(v == [] for v in node.held().values()), name
        assert not (node.state_dir / "containers" / f"r-{name}").exists()


def test_usage_errors(node: Node) -> None:
    common = node.host.spec_hook("0", "poststop")[2:]
    for args in ([], ["create"], ["create", "--device"], ["frobnicate"], ["release", "x"],
                 ["create", "--device", "0-6g", *common],  # no request
                 ["release"],  # no database
                 ["release", "--bogus", *common]):
        res = node.hook(args, b"{}")
        assert res.returncode == 2 and "usage: gpuslice-hook" in err(res), (args, res.stderr)
    bad = [(["--memory-mib", "lots"], '--memory-mib "lots" is not a whole number from 1 to '
            "16777216"),
           (["--memory-mib", "6144", "--cores", "101"],
            '--cores "101" is not a whole number from 0 to 100'),
           (["--memory-mib", "6144", "--preload", "both"],
            '--preload "both" is not one of env, ld.so.preload'),
           # A value is quoted as a string, on one line whatever it holds.
           (["--memory-mib", "1\n2\u2028\udcff"],
            '--memory-mib "1\\n2\\u2028\\xff" is not a whole number from 1 to 16777216')]
    for extra, named in bad:
        res = node.hook(["create", "--device", "x", *common, *extra], b"{}")
        assert res.returncode == 2 and err(res) == "gpuslice-hook: error: " + named, \
            (extra, res.stderr)
    res = node.hook(["create", "--device", "a\tb", *common, "--memory-mib", "6144"], b"{}")
    assert err(res) == ('gpuslice-hook: error: --device: device name "a\\tb" has "\\t"; only '
                        "letters, digits and '_' '-' '.' ':' are allowed")
    # The policy is the accountant's: the hook takes none on its command line, and a
    # spec that still passes one was written by an older gpuslice.
    for verb, ident in (("create", []), ("admit", ["--id", "c"])):
        for option, value in (("--overcommit", "1.5"), ("--placement", "spread"),
                              ("--cores-limit", "50")):
            res = node.hook([verb, "--device", "x", *ident, *common, "--memory-mib", "6144",
                             option, value], b"{}")
            assert res.returncode == 2, (verb, option, res.stderr)
            assert err(res) == (f"gpuslice-hook: error: {verb}: {option} is not an option "
                                "since the admission policy moved into the accountant; this "
                                "CDI spec was written by an older gpuslice: run `gpuslice cdi "
                                "generate`"), (verb, option)
    help_text = subprocess.run([str(node.hook_path), "--help"], capture_output=True,
                               text=True).stdout
    assert "--overcommit" not in help_text and "--placement" not in help_text


@pytest.mark.parametrize("verb", ["create", "admit"])
def test_priority_usage_errors(node: Node, verb: str) -> None:
    common = node.host.spec_hook("0", "poststop")[2:] + (["--id", "c"] if verb == "admit" else [])
    for value in ("urgent", "HIGH", "", "3", "high "):
        res = node.hook([verb, "--device", "x", *common, "--memory-mib", "6144",
                         "--priority", value], b"{}")
        assert res.returncode == 2, (value, res.stderr)
        assert err(res) == (f"gpuslice-hook: error: --priority {json.dumps(value)} is not one "
                            "of high, normal, low"), value
    # A whole card is shared with no one: a priority over others means nothing there.
    whole = [verb, "--device", "1", "--card", fake_gpu(1)["uuid"], "--exclusive", *common]
    for value in ("high", "low"):
        res = node.hook([*whole, "--priority", value], b"{}")
        assert res.returncode == 2, (value, res.stderr)
        assert err(res).startswith(f"gpuslice-hook: error: {verb}: --exclusive holds whole "
                                   "cards, which no one shares: --priority "
                                   f"{json.dumps(value)} means nothing there; leave it out; "
                                   "usage: gpuslice-hook " + verb)
    assert all(v == [] for v in node.held().values())  # nothing was admitted


def rows(db: Path, sql: str, *params: object) -> List[tuple]:
    conn = sqlite3.connect(db)
    try:
        return [tuple(r) for r in conn.execute(sql, params)]
    finally:
        conn.close()


def test_a_refusal_naming_a_database_row_is_one_line(node: Node) -> None:
    """What the books hold is named as it is, its line breaks escaped."""
    conn = sqlite3.connect(node.db)
    conn.execute("INSERT INTO reservations(container_id, device, card_uuid, memory_mib, cores, "
                 "exclusive, pid, pid_start, runtime, created, priority) VALUES "
                 "('odd\nrow', '0', ?, 16384, 0, 1, NULL, NULL, '', 1.0, 'normal')",
                 (fake_gpu(0)["uuid"],))
    conn.commit()
    conn.close()
    res = node.create("c", "0-6g")
    assert res.returncode == 1
    assert err(res) == (f"gpuslice-hook: container c: 0-6g: card 0 ({fake_gpu(0)['uuid']}) is "
                        "held whole by odd\\nrow; stop it, or ask for another card")


def with_profile(node: Node, item: str) -> None:
    node.config.write_text(node.config.read_text() + f"  - {item}\n")  # the profiles list is last
    node.generate()


@pytest.mark.parametrize("asan", [False, True], ids=["plain", "asan"])
def test_create_and_admit_record_the_priority(node: Node, asan: bool) -> None:
    with_profile(node, "{name: 2g-hi, memory: 2GiB, cores: 20, priority: high}")
    if asan:  # the priority is one more string each row owns: no leak, no overflow
        node.hook_path = build_hook(asan=True)
    assert "--priority" in node.create_args("0-2g-hi")
    for cid, device in (("hi", "0-2g-hi"), ("card-less", "2g-hi"), ("plain", "0-6g")):
        res = node.create(cid, device)
        assert res.returncode == 0, res.stderr
    common = node.host.spec_hook("0", "poststop")[2:]
    for cid, extra in (("low", ["--priority", "low"]), ("default", []),
                       ("whole", ["--exclusive", "--priority", "normal"])):
        card = ["--card", fake_gpu(1)["uuid"]] if cid == "whole" else ["--memory-mib", "1024"]
        res = node.hook(["admit", "--id", cid, "--device", cid, *card, *extra, *common], b"")
        assert res.returncode == 0, (cid, res.stderr)
    assert dict(rows(node.db, "SELECT container_id, priority FROM reservations")) == {
        "hi": "high", "card-less": "high", "plain": "normal", "low": "low", "default": "normal",
        "whole": "normal"}
    details = {c: json.loads(d) for c, d in rows(
        node.db, "SELECT container_id, detail FROM events WHERE kind='admit'")}
    assert details["hi"] == {"cores": 20, "device": "0-2g-hi", "exclusive": False,
                             "memory_mib": 2048, "priority": "high"}
    assert details["low"]["priority"] == "low" and details["whole"]["priority"] == "normal"
    # The hook ran twice for one container: the same reservation, its priority kept.
    assert node.create("hi", "0-2g-hi").returncode == 0
    assert rows(node.db, "SELECT priority FROM reservations WHERE container_id='hi'") == \
        [("high",)]
    # What a release hands back and forgets has a priority too (ASan: freed once).
    assert node.release("hi").returncode == 0
    res = gpuslice(node, "release", "low")
    assert res.returncode == 0 and "released low low: 1024 MiB" in res.stdout


def test_status_shows_the_priority(node: Node) -> None:
    with_profile(node, "{name: 2g-hi, memory: 2GiB, cores: 20, priority: high}")
    with_profile(node, "{name: 2g-lo, memory: 2GiB, priority: low}")
    for cid, device in (("h" * 64, "0-2g-hi"), ("n" * 64, "0-6g"), ("l" * 64, "2g-lo"),
                        ("w" * 64, "1")):
        assert node.create(cid, device).returncode == 0
    doc = json.loads(gpuslice(node, "status", "--json").stdout)
    shown = {k["id"][0]: k["priority"] for c in doc["cards"] for k in c["containers"]}
    assert shown == {"h": "high", "n": "normal", "l": "low", "w": "normal"}  # always in JSON
    lines = {line.split()[0][0]: line for line in gpuslice(node, "status").stdout.splitlines()
             if line.startswith("  ")}
    assert lines["h"].endswith("0-2g-hi    2048 MiB, 20%, priority high; 0 MiB used")
    assert lines["l"].endswith("2g-lo      2048 MiB, priority low; 0 MiB used")
    # The usual goes unsaid, to keep lines short.
    assert lines["n"].endswith("0-6g       6144 MiB; 0 MiB used")
    assert lines["w"].endswith("1          whole card; 0 MiB used")


# What gpuslice with schema version 1 made, and only that: migrations are
# never edited once released (a test below holds entry 0 to this digest).
V1_SCHEMA_SHA256 = "1b9779e255082faee272bcebf57df8e985f37d61a3be4331680eb5f171a2c6a2"


def version_1_database(path: Path, card_uuid: str) -> None:
    """A database as gpuslice 1 left it: its schema, one card, a reservation, an event."""
    from ocihook import accountant as acct

    v1 = acct._MIGRATIONS[0]
    assert hashlib.sha256(" ".join(v1.split()).encode()).hexdigest() == V1_SCHEMA_SHA256, \
        "migration 0 was edited: add a migration instead; databases already made keep it"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    db = sqlite3.connect(path)
    db.executescript(v1)
    db.execute("INSERT INTO meta(key, value) VALUES ('schema_version', '1')")
    db.execute("INSERT INTO cards(uuid, idx, name, total_mib, seen) VALUES "
               "(?, 0, 'NVIDIA H200', 16384, 1.5)", (card_uuid,))
    db.execute("INSERT INTO reservations(container_id, device, card_uuid, memory_mib, cores, "
               "exclusive, pid, pid_start, runtime, created) VALUES "
               "('old', '0-6g', ?, 6144, 30, 0, NULL, NULL, 'runc', 2.5)", (card_uuid,))
    db.execute("INSERT INTO events(at, kind, container_id, card_uuid, detail) VALUES "
               "(2.5, 'admit', 'old', ?, '{\"cores\": 30}')", (card_uuid,))
    db.commit()
    db.close()


OLDER_DATABASE = ("gpuslice-hook: error: {db}: made by an older gpuslice (schema version 1 or "
                  "2); run `gpuslice cdi generate` with this gpuslice (it upgrades the "
                  "database in place, rows kept)")


def assert_current_version(node: Node) -> None:
    """Named by PRAGMAs, no meta table, the configuration's policy recorded."""
    assert rows(node.db, "PRAGMA user_version") == [(acct.SCHEMA_VERSION,)]
    assert rows(node.db, "PRAGMA application_id") == [(0x47505344,)]
    assert rows(node.db, "SELECT name FROM sqlite_master WHERE name='meta'") == []
    assert rows(node.db, "SELECT placement, memory_overcommit, cores_limit FROM policy") == \
        [("binpack", 1.0, 100)]


def test_a_version_2_database_is_upgraded_in_place(node: Node) -> None:
    """What gpuslice 2 left (its version as text in meta): every row and event kept."""
    from ocihook import accountant as acct

    uuid0 = fake_gpu(0)["uuid"]
    version_1_database(node.db, uuid0)
    db = sqlite3.connect(node.db)
    db.executescript(acct._MIGRATIONS[1])
    db.execute("UPDATE meta SET value='2' WHERE key='schema_version'")
    db.execute("INSERT INTO reservations(container_id, device, card_uuid, memory_mib, cores, "
               "exclusive, pid, pid_start, runtime, created, priority) VALUES "
               "('hi', '0-2g', ?, 2048, 0, 0, NULL, NULL, 'crun', 3.5, 'high')", (uuid0,))
    db.commit()
    db.close()
    before = rows(node.db, "SELECT * FROM reservations ORDER BY created")
    events = rows(node.db, "SELECT * FROM events")
    res = node.create("new", "0-6g")
    assert res.returncode == 2 and err(res) == OLDER_DATABASE.format(db=node.db)
    node.generate()
    assert_current_version(node)
    # Every row kept, with the columns schemas 4 and 5 added at their defaults.
    assert rows(node.db, "SELECT * FROM reservations ORDER BY created") == \
        [r + ("", 0) for r in before]
    assert rows(node.db, "SELECT * FROM events")[:len(events)] == events
    assert node.create("new", "0-6g").returncode == 0  # 6144 + 2048 + 6144 of 16384
    assert node.create("more", "0-6g").returncode == 1  # the old rows count


def test_a_version_1_database_is_upgraded_in_place(node: Node) -> None:
    uuid0 = fake_gpu(0)["uuid"]
    version_1_database(node.db, uuid0)
    before = rows(node.db, "SELECT * FROM reservations")
    # The hook migrates nothing: it says what will.
    res = node.create("new", "0-6g")
    assert res.returncode == 2
    assert err(res) == OLDER_DATABASE.format(db=node.db)
    assert rows(node.db, "SELECT value FROM meta") == [("1",)]
    node.generate()  # opens the books: version 1 -> the current one, in place
    assert_current_version(node)
    after = rows(node.db, "SELECT * FROM reservations")
    # Every column kept; admitted before priorities, names and gangs (slot 0).
    assert after == [before[0] + ("normal", "", 0)]
    assert rows(node.db, "SELECT kind, container_id, detail FROM events WHERE id=1") == \
        [("admit", "old", '{"cores": 30}')]
    # The column refuses what is not a priority.
    conn = sqlite3.connect(node.db)
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        conn.execute("UPDATE reservations SET priority='urgent'")
    conn.close()
    # The hook takes the upgraded books: the old row counts, a new one is recorded.
    with_profile(node, "{name: 2g-hi, memory: 2GiB, priority: high}")
    assert node.create("hi", "0-2g-hi").returncode == 0
    res = node.create("third", "0-6g")  # 6144 (old) + 2048 + 6144 of 16384: fits
    assert res.returncode == 0, res.stderr
    assert node.create("fourth", "0-6g").returncode == 1  # the old reservation still counts
    doc = json.loads(gpuslice(node, "status", "--json").stdout)
    assert [(k["id"], k["cores"], k["priority"]) for k in doc["cards"][0]["containers"]] == [
        ("old", 30, "normal"), ("hi", 0, "high"), ("third", 0, "normal")]


def gpuslice(node: Node, *args: str) -> subprocess.CompletedProcess:
    return node.host.run(*args)


def test_status_release_and_gc(node: Node) -> None:
    child = subprocess.Popen(["sleep", "60"])
    assert node.create("a" * 64, "0-6g", pid=os.getpid()).returncode == 0
    assert node.create("b" * 64, "4g-30", pid=child.pid).returncode == 0
    assert node.create("w" * 64, "1").returncode == 0
    doc = json.loads(gpuslice(node, "status", "--json").stdout)
    c0, c1 = doc["cards"]
    assert (c0["index"], c0["uuid"], c0["total_mib"]) == (0, fake_gpu(0)["uuid"], 16384)
    assert c0["reserved_mib"] == 10240 and c0["unreserved_mib"] == 6144 and c0["cores"] == 30
    assert [(k["id"], k["memory_mib"], k["cores"], k["used_mib"]) for k in c0["containers"]] \
        == [("a" * 64, 6144, 0, 0), ("b" * 64, 4096, 30, 0)]
    assert c1["unreserved_mib"] == 0 and c1["containers"][0]["exclusive"] is True
    text = gpuslice(node, "status").stdout
    assert "card 0 " in text and "10240 of 16384 MiB reserved" in text and "aaaaaaaaaaaa" in text
    # An operator releases a container; the id is checked.
    res = gpuslice(node, "release", "w" * 64)
    assert res.returncode == 0 and "released wwwwwwwwwwww 1: 16384 MiB" in res.stdout
    assert not (node.state_dir / "containers" / ("w" * 64)).exists()
    assert gpuslice(node, "release", "w" * 64).returncode == 1
    res = gpuslice(node, "release", "../etc")
    assert res.returncode == 2
    assert res.stderr == f'gpuslice-hook: error: container id "../etc" {ID_RULE}\n'
    # gc reclaims what a killed container held.
    child.kill()
    child.wait()
    res = gpuslice(node, "gc")
    assert res.returncode == 0 and "reclaimed bbbbbbbbbbbb 4g-30: 4096 MiB" in res.stdout
    assert node.held()[fake_gpu(0)["uuid"]] == ["a" * 64]


def test_status_believes_a_region_only_as_far_as_the_card_goes(node: Node) -> None:
    """A region is written by the container's own processes (its folder is
    theirs): gpuslice status shows what it claims only when it could be true,
    says which it did not count and why, and returns at once whatever stands
    at the region's name."""
    from test_region_reader import write_region

    uuid0, uuid1 = fake_gpu(0)["uuid"], fake_gpu(1)["uuid"]
    claims = {  # container: what its region says, or what stands in its place
        "a" * 64: ("0-4g", [(uuid0, 0, 1536 << 20), (uuid1, 0, (1 << 64) - 1)]),  # card 1: not its
        "b" * 64: ("0-4g", [(uuid0, 0, (1 << 64) - 1)]),                 # 17592186044415 MiB
        "c" * 64: ("0-4g", [(uuid0, 0, 10 << 30), (uuid0, 0, 10 << 30)]),  # 20 GiB in two entries
        "d" * 64: ("0-4g", "fifo"),
        "e" * 64: ("1-4g", [(uuid1, 0, 9 << 30)]),  # e and f: each could be true, not both
        "f" * 64: ("1-4g", [(uuid1, 0, 9 << 30)]),
        "g" * 64: ("1-4g", "link"),
        "h" * 64: ("1-4g", None),  # its region gone (the tenant's to remove): absent
    }
    for cid, (device, claim) in claims.items():
        assert node.create(cid, device).returncode == 0
        path = node.state_dir / "containers" / cid / "region"
        path.unlink()  # the one the hook made with the caps: each case puts its own
        if claim == "fifo":
            os.mkfifo(path)
        elif claim == "link":
            path.symlink_to("/dev/zero")
        elif claim is not None:
            write_region(path, devices=claim)
    res = gpuslice(node, "status", "--json")  # with a timeout: a blocked read fails here
    assert res.returncode == 0, res.stderr
    c0, c1 = json.loads(res.stdout)["cards"]
    seen = {k["id"][0]: (k["used_mib"], k["region"], k["region_problem"])
            for c in (c0, c1) for k in c["containers"]}
    region_of = {cid[0]: node.state_dir / "containers" / cid / "region" for cid in claims}
    assert seen["a"] == (1536, "ok", None)
    assert seen["b"] == (None, "implausible", f"{region_of['b']} claims 17592186044415 MiB "
                                              "used on card 0, which holds 16384 MiB")
    assert seen["c"] == (None, "implausible", f"{region_of['c']} claims 20480 MiB used on "
                                              "card 0, which holds 16384 MiB")
    assert seen["d"][:2] == (None, "unreadable")
    assert seen["d"][2].startswith(f"{region_of['d']}: is a FIFO, not a regular file")
    assert seen["e"] == seen["f"] == (9216, "ok", None)
    assert seen["g"][:2] == (None, "unreadable")
    assert seen["g"][2].startswith(f"{region_of['g']}: is a symbolic link, which is not followed")
    assert seen["h"] == (0, "absent", None)
    assert (c0["used_mib"], c0["used_uncounted"], c0["used_plausible"]) == (1536, 3, True)
    assert (c1["used_mib"], c1["used_uncounted"], c1["used_plausible"]) == (18432, 1, False)

    text = gpuslice(node, "status").stdout.splitlines()
    card0, card1 = [line for line in text if line.startswith("card ")]
    lines = {line.split()[0][0]: line for line in text if line.startswith("  ")}
    assert "16384 of 16384 MiB reserved, 1536 MiB used (3 regions not counted), 0 MiB unreserved" \
        in card0
    assert ("16384 of 16384 MiB reserved, 18432 MiB used (1 region not counted; IMPLAUSIBLE: "
            "more than the card holds, a region lies), 0 MiB unreserved") in card1
    assert lines["a"].endswith("4096 MiB; 1536 MiB used")
    assert lines["b"].endswith(f"4096 MiB; ? MiB used (region IMPLAUSIBLE: {region_of['b']} "
                               "claims 17592186044415 MiB used on card 0, which holds 16384 MiB)")
    assert f"4096 MiB; ? MiB used (region UNREADABLE: {region_of['d']}: is a FIFO" in lines["d"]
    assert lines["h"].endswith("4096 MiB; 0 MiB used")


def test_status_shows_live_usage_from_the_region(node: Node) -> None:
    cid = "c" * 64
    assert node.create(cid, "0-6g").returncode == 0
    with shim_holder(node.host.gpus_json, node.fakedriver, node.state_dir / "containers" / cid,
                     "6GiB", "1536M"):
        doc = json.loads(gpuslice(node, "status", "--json").stdout)
        card0 = doc["cards"][0]
        assert card0["used_mib"] == 1536
        assert card0["containers"][0]["used_mib"] == 1536


def test_state_dir_is_mounted_in_the_rootfs_with_the_card_files(node: Node) -> None:
    bundle = node.bundle()
    (node.state_dir / "cards").mkdir(parents=True, exist_ok=True)
    (node.state_dir / "cards" / "marker").write_text("host card files\n")
    state = json.dumps({"ociVersion": "1.0.2", "id": "m1", "status": "creating",
                        "bundle": str(bundle)})
    # Create and look, in one private mount namespace (as the container's).
    script = (f'{shlex.join([str(node.hook_path), *node.create_args("6g")])} && '
              f'cat {bundle}/rootfs/run/gpuslice/placement {bundle}/rootfs/run/gpuslice/cards/marker')
    res = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                         input=state.encode(), capture_output=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.decode().splitlines() == [f"0 {fake_gpu(0)['uuid']}", "host card files"]
    # The host's namespace never saw the mounts.
    assert not (bundle / "rootfs" / "run" / "gpuslice" / "placement").exists()
    assert node.release("m1").returncode == 0
    assert not (node.state_dir / "containers" / "m1").exists()
    assert (node.state_dir / "cards" / "marker").exists()


def test_rootfs_link_out_is_refused_and_undone(node: Node) -> None:
    bundle = node.bundle("linked")
    host_dir = node.tmp / "host-folder"
    host_dir.mkdir()
    (bundle / "rootfs" / "run").symlink_to(host_dir)  # /run -> a host folder
    res = node.create("l1", "0-6g", bundle=bundle)
    assert res.returncode == 2
    assert "/run/gpuslice in the container's rootfs: run is not a folder" in err(res)
    assert list(host_dir.iterdir()) == []  # nothing made outside the rootfs
    assert all(v == [] for v in node.held().values())  # the admission was undone


def preload_node(node: Node) -> None:
    node.config.write_text(node.config.read_text() + "preload: ld.so.preload\n")
    node.generate()  # the hooks are told the policy by the spec


def test_ld_so_preload_keeps_the_lines_there(node: Node) -> None:
    preload_node(node)
    bundle = node.bundle("pre")
    (bundle / "rootfs" / "etc").mkdir()
    (bundle / "rootfs" / "etc" / "ld.so.preload").write_text("/usr/lib/libother.so\n")
    assert node.create("p1", "0-6g", bundle=bundle).returncode == 0
    lines = (bundle / "rootfs" / "etc" / "ld.so.preload").read_text().splitlines()
    assert lines == ["/usr/lib/libother.so", "/usr/lib/gpuslice/libgpuslice.so"]
    assert node.create("p2", "0-6g", bundle=bundle).returncode == 0  # no second line
    assert len((bundle / "rootfs" / "etc" / "ld.so.preload").read_text().splitlines()) == 2
    # A whole card is not capped: no shim.
    whole = node.bundle("whole")
    assert node.create("w1", "1", bundle=whole).returncode == 0
    assert not (whole / "rootfs" / "etc" / "ld.so.preload").exists()


def test_ld_so_preload_hostile_rootfs(node: Node) -> None:
    preload_node(node)
    # /etc links to a host folder.
    host_etc = node.tmp / "host-etc"
    host_etc.mkdir()
    b1 = node.bundle("etclink")
    (b1 / "rootfs" / "etc").symlink_to(host_etc)
    res = node.create("h1", "0-6g", bundle=b1)
    assert res.returncode == 2 and "/etc in the container's rootfs: etc is not a folder" in err(res)
    assert list(host_etc.iterdir()) == []
    # /etc/ld.so.preload links to the host's /etc/passwd.
    passwd = Path("/etc/passwd").read_bytes()
    b2 = node.bundle("preloadlink")
    (b2 / "rootfs" / "etc").mkdir()
    (b2 / "rootfs" / "etc" / "ld.so.preload").symlink_to("/etc/passwd")
    res = node.create("h2", "0-6g", bundle=b2)
    assert res.returncode == 2 and "/etc/ld.so.preload" in err(res) and "link" in err(res)
    assert Path("/etc/passwd").read_bytes() == passwd
    assert (b2 / "rootfs" / "etc" / "ld.so.preload").is_symlink()
    # Neither was admitted.
    assert all(v == [] for v in node.held().values())


def test_all_holds_every_card_or_none(node: Node) -> None:
    assert node.create("s", "1-6g").returncode == 0  # a slice on card 1
    res = node.create("everything", "all")
    assert res.returncode == 1 and "card 1" in err(res) and "cannot be held whole" in err(res)
    assert node.held()[fake_gpu(0)["uuid"]] == []  # none: card 0 was not taken either
    assert node.release("s").returncode == 0
    assert node.create("everything", "all").returncode == 0
    assert all(v == ["everything"] for v in node.held().values())
    assert node.create("late", "6g").returncode == 1
    assert node.release("everything").returncode == 0
    assert all(v == [] for v in node.held().values())


def spec_env(node: Node, device: str) -> Dict[str, str]:
    """The GPUSLICE_* variables the spec gives `device`'s containers."""
    import yaml

    [path] = node.host.spec_dir.glob("gpuslice.yaml")
    [dev] = [d for d in yaml.safe_load(path.read_text())["devices"] if d["name"] == device]
    return dict(e.split("=", 1) for e in dev["containerEdits"]["env"]
                if e.startswith("GPUSLICE_"))


def cuprog(node: Node, cid: str, device: str, *ops: str) -> List[List[str]]:
    """Run the shim's test program as a process of container `cid` (its state dir,
    the spec's env for `device`) with the fake driver; its result lines, split."""
    env = dict(os.environ, GPUSLICE_FAKE_GPUS=str(node.host.gpus_json),
               LD_LIBRARY_PATH=str(node.fakedriver),
               LD_PRELOAD=str(REPO / "native" / "shim" / "build" / "libgpuslice.so"),
               GPUSLICE_STATE_DIR=str(node.state_dir / "containers" / cid),
               GPUSLICE_CARD_DIR=str(node.state_dir / "cards"), GPUSLICE_CONTEXT_RESERVE="0",
               **spec_env(node, device))
    res = subprocess.run([str(REPO / "tests" / "shim" / "build-plain" / "cuprog"), "direct",
                          *ops], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return [line.split() for line in res.stdout.splitlines() if line.strip()]


@pytest.mark.parametrize("asan", [False, True], ids=["plain", "asan"])
def test_a_reused_id_gets_a_fresh_folder_and_only_its_own_cap(node: Node, asan: bool) -> None:
    """A container killed without its poststop, then a new one with the same id
    (ctr lets users choose ids) admitted for less: the old folder and region go with
    the old reservation, and the shim sees the new admission's cap only."""
    subprocess.run(["make", "-s", "-C", str(REPO / "tests" / "shim"), "VARIANT=plain"],
                   check=True)
    with_profile(node, "{name: 1g, memory: 1GiB}")
    if asan:  # the reclaimed rows are handed to the caller and freed there
        node.hook_path = build_hook(asan=True)
    cid, gib = "reused", 1 << 30
    folder = node.state_dir / "containers" / cid
    child = subprocess.Popen(["sleep", "60"])
    assert node.create(cid, "6g", pid=child.pid).returncode == 0  # card-less: placed
    old = cuprog(node, cid, "6g", "init", "pctx", "0", "alloc", "512M")
    assert old[-1] == ["alloc", "0"]
    from ocihook import region

    assert region.read(str(folder / "region")).devices[0].limit_bytes == 6 * gib
    assert (folder / "placement").exists()
    child.kill()  # kill -9: no poststop; the reservation is dead
    child.wait()
    assert node.create(cid, "0-1g", pid=os.getpid()).returncode == 0
    assert node.held()[fake_gpu(0)["uuid"]] == [cid]
    reclaimed = rows(node.db, "SELECT container_id FROM events WHERE kind='reclaim'")
    assert reclaimed == [(cid,)]
    # Fresh: no placement of the old container (0-1g names its card), the
    # mount point of the card files made again, and a new region with the new
    # admission's cap, which no process has used yet.
    assert sorted(p.name for p in folder.iterdir()) == ["cards", "region"]
    assert list((folder / "cards").iterdir()) == []
    assert region.read(str(folder / "region")).procs == []
    new = cuprog(node, cid, "0-1g", "init", "pctx", "0", "info", "fill", "64M", "alloc", "1")
    assert new[2] == ["info", "0", str(gib), str(gib)]  # cuMemGetInfo: free, total = 1 GiB
    assert new[3] == ["fill", "2", str(gib)] and new[4] == ["alloc", "2"]
    assert region.read(str(folder / "region")).devices[0].limit_bytes == gib
    assert node.release(cid).returncode == 0
    assert not folder.exists()


@pytest.mark.parametrize("asan", [False, True], ids=["plain", "asan"])
def test_caps_that_cannot_be_written_refuse_the_start(node: Node, asan: bool,
                                                      tmp_path: Path) -> None:
    """A second device of a running container keeps its folder, where the
    tenant put a link at the region's name: the hook writes nothing through
    it and refuses the start, holding nothing for the container."""
    if asan:  # the region's hold is given back on this path too
        node.hook_path = build_hook(asan=True)
    with_profile(node, "{name: 1g, memory: 1GiB}")
    assert node.create("two", "0-6g").returncode == 0
    region_path = node.state_dir / "containers" / "two" / "region"
    target = tmp_path / "elsewhere"
    target.write_bytes(b"")
    region_path.unlink()
    region_path.symlink_to(target)
    res = node.create("two", "0-1g")
    assert res.returncode == 2
    assert err(res) == f"gpuslice-hook: error: {region_path} is a symbolic link, not a region"
    assert target.read_bytes() == b""
    assert all(v == [] for v in node.held().values())


def test_a_leftover_folder_that_cannot_go_is_refused(node: Node) -> None:
    """What gpuslice did not put in a container's folder keeps it from being made
    fresh: the start is refused with the folder named, and nothing is held."""
    folder = node.state_dir / "containers" / "left"
    folder.mkdir(parents=True)
    (folder / "region").write_bytes(b"old region")
    (folder / "notes.txt").write_text("the tenant's\n")
    res = node.create("left", "0-6g")
    assert res.returncode == 2
    assert err(res) == (f"gpuslice-hook: error: {folder} is left by an earlier container of "
                        "this id and holds what gpuslice did not put there; remove it, then "
                        "start the container again")
    assert all(v == [] for v in node.held().values())
    assert not (folder / "region").exists()  # gpuslice's own file went all the same
    (folder / "notes.txt").unlink()
    assert node.create("left", "0-6g").returncode == 0


def test_policy_has_one_owner_the_accountant(node: Node) -> None:
    """Admission and status follow the recorded policy; a changed file takes effect with
    `gpuslice config apply`, without a new spec, and status says they differ until then."""
    with_profile(node, "{name: 1g-40, memory: 1GiB, cores: 40}")  # the profiles list is last
    spec = next(node.host.spec_dir.glob("gpuslice.yaml"))
    generated = spec.read_bytes()
    for cid in ("a", "b"):
        assert node.create(cid, "0-6g").returncode == 0
    node.config.write_text(node.config.read_text() + "memory_overcommit: 1.5\ncores_limit: 60\n")
    res = node.create("c", "0-6g")
    assert res.returncode == 1 and "4096 MiB free of 16384 MiB" in err(res)  # the recorded 1.0
    doc = json.loads(gpuslice(node, "status", "--json").stdout)
    assert doc["policy"] == {"placement": "binpack", "memory_overcommit": 1.0, "cores_limit": 100}
    assert doc["policy_file_differs"] == {
        "memory_overcommit": {"recorded": 1.0, "file": 1.5},
        "cores_limit": {"recorded": 100, "file": 60}}
    assert doc["cards"][0]["unreserved_mib"] == 4096
    text = gpuslice(node, "status").stdout.splitlines()
    assert text[:3] == [
        "policy: placement binpack, memory_overcommit 1, cores_limit 100",
        "policy: the configuration file says memory_overcommit 1.5, the accountant admits by "
        "1.0: `gpuslice config apply` records the file's",
        "policy: the configuration file says cores_limit 60, the accountant admits by 100: "
        "`gpuslice config apply` records the file's"]
    res = gpuslice(node, "config", "apply")
    assert res.returncode == 0, res.stderr
    assert res.stdout == (f"{node.db}: admission policy recorded: placement binpack, "
                          "memory_overcommit 1.5, cores_limit 60\n")
    assert "already recorded" in gpuslice(node, "config", "apply").stdout
    assert spec.read_bytes() == generated  # the spec is not touched
    assert node.create("c", "0-6g").returncode == 0  # 18 of 24 GiB
    doc = json.loads(gpuslice(node, "status", "--json").stdout)
    assert doc["policy_file_differs"] == {} and doc["cards"][0]["unreserved_mib"] == 24576 - 18432
    assert node.create("p1", "1-1g-40").returncode == 0
    res = node.create("p2", "1-1g-40")
    assert res.returncode == 1 and "has 20% of its compute left, 40% asked" in err(res)
    # cdi generate records the file's policy too.
    node.config.write_text(node.config.read_text().replace("cores_limit: 60", "cores_limit: 80"))
    node.generate()
    assert rows(node.db, "SELECT cores_limit FROM policy") == [(80,)]
    assert node.create("p2", "1-1g-40").returncode == 0


@pytest.mark.parametrize("asan", [False, True], ids=["plain", "asan"])
def test_the_engines_name_for_the_container_is_recorded(node: Node, asan: bool) -> None:
    """From config.json's annotations (containerd's CRI, CRI-O, nerdctl, in that
    order), one line of at most 128 characters; anything else is no name and
    never a reason to refuse."""
    if asan:
        node.hook_path = build_hook(asan=True)
    base = {"ociVersion": "1.0.2", "root": {"path": "rootfs"}}
    cases = {
        "cri": ({"io.kubernetes.cri.container-name": "trainer",
                 "io.kubernetes.cri-o.ContainerName": "k8s_other", "nerdctl/name": "n"},
                "trainer"),
        "crio": ({"io.kubernetes.cri-o.ContainerName": "k8s_job_pod_ns_uid_0"},
                 "k8s_job_pod_ns_uid_0"),
        "nerdctl": ({"nerdctl/name": "web"}, "web"),
        "lines": ({"nerdctl/name": "a\nb\tc\u0007d\u007f"}, "a b c d "),
        "nul": ({"nerdctl/name": "cut\u0000here"}, "cut"),
        "long": ({"nerdctl/name": "é" * 300}, "é" * 128),
        "number": ({"io.kubernetes.cri.container-name": 7, "nerdctl/name": "next"}, "next"),
        "none": ({}, ""),
        "notobj": ("annotations", ""),
    }
    for cid, (ann, name) in cases.items():
        config = dict(base, annotations=ann)
        res = node.create(cid, "6g", node.bundle(cid, config))
        assert res.returncode == 0, (cid, res.stderr)
        assert rows(node.db, "SELECT name FROM reservations WHERE container_id=?", cid) == \
            [(name,)], cid
        assert node.release(cid).returncode == 0
