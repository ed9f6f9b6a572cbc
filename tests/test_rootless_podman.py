"""Rootless Podman (4.3, runc) asks for a gpuslice device: refused, one line, nothing written.

A rootless container's hooks run in the user's user namespace, where the
node's root-owned accountant is not theirs to write (and must not be: a
container that could write it could grant itself any slice). gpuslice-hook
sees the user namespace before it opens anything and refuses the start with
one line that says so and what to do (native/hook/README.md, "Rootless
containers").

The test user is made once (``useradd``, with a /etc/subuid and /etc/subgid
range for newuidmap/newgidmap from the uidmap package) and kept: another run
may be using it. Everything the user's podman touches lives in a fresh
folder under /tmp that the user can reach: pytest's own tmp folders are
root's alone. The accountant, the state dir and the spec are root's, as on a
node. The plain container is run first: if rootless podman cannot start a
container here, that is the failure, not the refusal.
"""
from __future__ import annotations

import json
import os
import pwd
import shutil
import sqlite3
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import pytest

from fakehost import Host, fake_gpu, make_driver_root
from podman_harness import Podman, PodmanResult

USER = "gpuslice-rootless"
SUBID_COUNT = 65536
SUBID_FLOOR = 100000
UIDMAP_BASE = 300000  # where a rootful container's --uidmap puts its root
NOT_GRANTED = ("the hook runs in a user namespace (uid 0 there is uid {uid} of the host), as a "
               "rootless container's hooks do, and the node's accountant is root's: a container "
               "that could write it could grant itself any slice; run the container as root "
               "(sudo podman run ..., or a rootful podman service) without --userns or --uidmap")

#: Runs as root in a mount namespace of its own, around the harness's: $1 the
#: fake host's dev root, $2 an empty folder; the rest is the command. runc in
#: a user namespace cannot mknod: it binds each device node from the host's
#: path of the same name, so the fake cards' nodes are put at /dev/nvidia*
#: there, in an overlay over /dev that the host never sees.
_DEV_SCRIPT = r"""set -e
devroot=$1; scratch=$2; shift 2
mount -t tmpfs tmpfs "$scratch"
mkdir "$scratch/upper" "$scratch/work"
mount -t overlay overlay -o "lowerdir=/dev,upperdir=$scratch/upper,workdir=$scratch/work" /dev
for node in "$devroot"/dev/*; do
  [ -e "$node" ] || continue
  touch "/dev/${node##*/}"
  mount --bind "$node" "/dev/${node##*/}"
done
exec "$@"
"""

if os.geteuid() != 0:  # CI runs as root: there this never skips
    pytest.skip("needs root: makes the test user and the podman mount namespace",
                allow_module_level=True)


def _subid_ranges(path: str) -> Dict[str, Tuple[int, int]]:
    ranges: Dict[str, Tuple[int, int]] = {}
    if os.path.exists(path):
        for line in Path(path).read_text().splitlines():
            parts = line.split(":")
            if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
                ranges[parts[0]] = (int(parts[1]), int(parts[2]))
    return ranges


def _add_subids(name: str) -> None:
    """A subordinate uid and gid range past every other one, where useradd gave none."""
    have = [_subid_ranges(p) for p in ("/etc/subuid", "/etc/subgid")]
    if all(name in h for h in have):
        return
    start = max([SUBID_FLOOR] + [s + n for h in have for s, n in h.values()])
    span = "%d-%d" % (start, start + SUBID_COUNT - 1)
    subprocess.run(["usermod", "--add-subuids", span, "--add-subgids", span, name], check=True)


@pytest.fixture(scope="session")
def rootless_user() -> pwd.struct_passwd:
    for tool in ("newuidmap", "newgidmap", "setpriv", "useradd"):
        assert shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin"), \
            f"{tool} not found: apt-get install uidmap util-linux passwd (install.sh --with-tests)"
    try:
        pwd.getpwnam(USER)
    except KeyError:
        res = subprocess.run(["useradd", "--no-create-home", "--home-dir", "/nonexistent",
                              "--shell", "/usr/sbin/nologin", "--comment",
                              "gpuslice tests, rootless podman", USER],
                             capture_output=True, text=True)
        assert res.returncode in (0, 9), res.stderr  # 9: another run made it meanwhile
    _add_subids(USER)
    return pwd.getpwnam(USER)


def _chown_tree(path: Path, uid: int, gid: int) -> None:
    os.chown(path, uid, gid, follow_symlinks=False)
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.chown(os.path.join(root, name), uid, gid, follow_symlinks=False)


class NodePodman(Podman):
    """The harness's podman, with the fake host's device nodes at /dev/nvidia*
    (see _DEV_SCRIPT) once a host is set (:attr:`dev_root`)."""

    def __init__(self, workdir: Path, cdi_spec_dirs: Optional[Sequence[Path]] = None) -> None:
        super().__init__(workdir, cdi_spec_dirs)
        self.dev_root: Optional[Path] = None
        self.dev_scratch = self.workdir / "dev-overlay"
        self.dev_scratch.mkdir()

    def base_command(self) -> List[str]:
        argv = super().base_command()
        if self.dev_root is None:
            return argv
        return [self.unshare_bin, "--mount", "--propagation", "private", "/bin/sh", "-c",
                _DEV_SCRIPT, "gpuslice-fake-dev", str(self.dev_root),
                str(self.dev_scratch)] + argv


class RootlessPodman(NodePodman):
    """Run as *user*: podman's storage, run and tmp folders, HOME,
    XDG_RUNTIME_DIR and the rootfs are the user's; the CDI spec folder stays
    root's (root mounts it on /var/run/cdi in the command's own mount
    namespace, then setpriv drops to the user)."""

    def __init__(self, workdir: Path, user: pwd.struct_passwd) -> None:
        super().__init__(workdir)
        self.user = user
        self.runtime_dir = self.workdir / "xdg-run"
        self.runtime_dir.mkdir(mode=0o700)
        for d in (self.root, self.tmpdir, self.home, self.hooks_dir, self.net_dir,
                  self.out_dir, self.empty_dir, self.rootfs, self.runtime_dir, self.short_dir):
            _chown_tree(d, user.pw_uid, user.pw_gid)
        self.setpriv = shutil.which("setpriv", path="/usr/bin:/bin") or "setpriv"

    def base_command(self) -> List[str]:
        argv = super().base_command()
        at = argv.index(self.podman_bin)
        argv[at:at] = [self.setpriv, "--reuid", str(self.user.pw_uid), "--regid",
                       str(self.user.pw_gid), "--clear-groups"]
        return argv

    def run(self, args: Sequence[str], **kw: Any) -> PodmanResult:  # type: ignore[override]
        # No limit that needs a cgroup: the user may have none delegated
        # (no systemd user session), where runc rootless then makes none.
        kw["extra_args"] = ["--pids-limit", "-1", *kw.get("extra_args", ())]
        return super().run(args, **kw)

    def env(self) -> Dict[str, str]:
        return {**super().env(), "XDG_RUNTIME_DIR": str(self.runtime_dir), "USER": USER}

    def cleanup(self) -> None:
        try:
            super().cleanup()
        finally:
            # The user namespace's keeper that podman started for this
            # instance: its pid is in podman's tmp dir.
            for pidfile in self.tmpdir.glob("pause.pid"):
                try:
                    os.kill(int(pidfile.read_text().strip()), 9)
                except (ValueError, ProcessLookupError):
                    pass


class UidmapPodman(NodePodman):
    """Rootful podman whose containers get a user namespace of their own
    (--uidmap/--gidmap 0:UIDMAP_BASE:65536): the rootfs is that root's."""

    def __init__(self, workdir: Path, cdi_spec_dirs: Sequence[Path]) -> None:
        super().__init__(workdir, cdi_spec_dirs)
        _chown_tree(self.rootfs, UIDMAP_BASE, UIDMAP_BASE)
        os.chmod(self.short_dir, 0o755)  # the container's root reads its hosts file there

    def run(self, args: Sequence[str], **kw: Any) -> PodmanResult:  # type: ignore[override]
        span = "0:%d:%d" % (UIDMAP_BASE, SUBID_COUNT)
        kw["extra_args"] = ["--uidmap", span, "--gidmap", span, *kw.get("extra_args", ())]
        return super().run(args, **kw)


@pytest.fixture
def top() -> Iterator[Path]:
    """A folder any user can reach (pytest's are root's alone), removed after."""
    base = Path(tempfile.mkdtemp(prefix="gsrootless-", dir="/tmp"))
    os.chmod(base, 0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def rootless(top: Path, rootless_user: pwd.struct_passwd) -> Iterator[RootlessPodman]:
    with RootlessPodman(top / "podman", rootless_user) as p:
        yield p


@pytest.fixture
def node(top: Path, rootless: RootlessPodman, fakedriver: Path) -> Host:
    """A fake host under the user's reach (the driver files, the hook), its
    accountant and state dir root's, its spec in the podman's spec folder."""
    driver_root = make_driver_root(top / "driver", fakedriver)
    (top / "host").mkdir()
    h = Host(top / "host", driver_root, [fake_gpu(0, memory_mib=16384)],
             spec_dir=rootless.cdi_dir)
    h.use_real_hook(into=top / "bin")
    res = h.run("cdi", "generate")
    assert res.returncode == 0, res.stderr
    rootless.dev_root = h.dev_root
    return h


def hook_lines(res: PodmanResult) -> List[str]:
    """What the hook said, cut out of podman's lines (which quote it)."""
    return [line[line.index("gpuslice-hook:"):] for line in res.stderr.splitlines()
            if "gpuslice-hook:" in line]


def nothing_held(node: Host) -> None:
    res = node.run("status", "--json")
    assert res.returncode == 0, res.stderr
    assert [c for card in json.loads(res.stdout)["cards"] for c in card["containers"]] == []
    db = sqlite3.connect(str(node.tmp / "state.db"))
    try:
        assert db.execute("SELECT count(*) FROM reservations").fetchone() == (0,)
        assert db.execute("SELECT count(*) FROM events WHERE kind != 'policy'").fetchone() == (0,)
    finally:
        db.close()
    containers = node.tmp / "state" / "containers"
    assert not containers.exists() or list(containers.iterdir()) == []


def test_a_plain_rootless_container_runs(rootless: RootlessPodman) -> None:
    """What the refusal below stands on: this user's podman starts containers."""
    res = rootless.run(["cat", "/proc/self/uid_map"])
    assert res.returncode == 0, res.stderr
    first = res.stdout.split()[:3]
    assert first == ["0", str(rootless.user.pw_uid), "1"]  # root in there is the user


@pytest.mark.parametrize("device", ["0-4g", "4g", "0"], ids=["slice", "placed", "whole"])
def test_a_rootless_container_is_refused_in_one_line(rootless: RootlessPodman, node: Host,
                                                     device: str) -> None:
    """Whole cards too: the accountant admits them (the spec gives them the
    hooks), and one unaccounted would share its card with slices."""
    res = rootless.run(["true"], devices=[f"gpuslice.io/gpu={device}"])
    assert res.returncode != 0
    assert res.container_id, res.stderr  # podman made the container: the hook refused it
    want = "gpuslice-hook: error: container %s: device %s is not granted: %s" % (
        res.container_id[:12], device, NOT_GRANTED.format(uid=rootless.user.pw_uid))
    assert hook_lines(res) == [want], res.stderr  # once: the poststop adds nothing
    nothing_held(node)


def test_a_rootful_container_with_its_own_user_namespace_is_refused(top: Path,
                                                                   node: Host) -> None:
    """--uidmap: its createContainer hook runs in the container's user
    namespace, as uid UIDMAP_BASE of the host. Its poststop runs as root,
    and finds nothing to give back."""
    with UidmapPodman(top / "rootful", [node.spec_dir]) as podman:
        podman.dev_root = node.dev_root
        plain = podman.run(["cat", "/proc/self/uid_map"])
        assert plain.returncode == 0, plain.stderr
        assert plain.stdout.split()[:3] == ["0", str(UIDMAP_BASE), str(SUBID_COUNT)]
        res = podman.run(["true"], devices=["gpuslice.io/gpu=0-4g"])
    assert res.returncode != 0 and res.container_id, res.stderr
    want = "gpuslice-hook: error: container %s: device 0-4g is not granted: %s" % (
        res.container_id[:12], NOT_GRANTED.format(uid=UIDMAP_BASE))
    assert hook_lines(res) == [want], res.stderr
    nothing_held(node)


def test_the_environment_by_hand_grants_nothing(rootless: RootlessPodman, node: Host) -> None:
    """Without the device there is no hook: the container starts as any
    other, with no state dir mounted at /run/gpuslice (the shim would keep a
    region of its own there, with the caps the tenant wrote) and nothing on
    the node's books."""
    res = rootless.run(["sh", "-c", "env | grep ^GPUSLICE_; ls /run/gpuslice 2>&1 || true"],
                       env={"GPUSLICE_MEMORY_LIMIT": "143771MiB"})
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "GPUSLICE_MEMORY_LIMIT=143771MiB"
    assert "No such file or directory" in lines[1]
    nothing_held(node)
