"""Run real Podman (4.3, with runc) against a test's own CDI spec folder.

Everything a :class:`Podman` touches lives under its ``workdir``: the
container storage (``root``), the run state (``runroot``), podman's tmp dir
(with its file-based locks), its containers.conf / storage.conf /
registries.conf, an empty hooks dir, a CNI config dir and a busybox root
file system.  Two test runs (or two tests) with different workdirs never
share podman state.

Podman 4.3.1 (Debian 12) has no ``cdi_spec_dirs`` setting: it reads CDI
specs only from ``/etc/cdi`` and ``/var/run/cdi`` (the key is written to
containers.conf anyway, for newer podman, where it takes effect; 4.3 ignores
it).  So each podman command runs in a private mount namespace
(``unshare --mount --propagation private``) in which the test's spec folder
is bind-mounted on ``/var/run/cdi`` and, where the host has an ``/etc/cdi``,
an empty folder is bind-mounted over it.  The host never sees those mounts;
the only lasting trace is the empty mount point ``/var/run/cdi``, created
when it is missing.

Nothing here needs pytest; :func:`podman_fixture` builds a pytest fixture.
"""
from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import struct
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Union

__all__ = [
    "BUSYBOX",
    "CDI_MOUNT_POINT",
    "Podman",
    "PodmanError",
    "PodmanResult",
    "busybox_rootfs",
    "podman_fixture",
]

#: busybox-static installs a static binary here (Debian's dynamic ``busybox``
#: package installs the same path; :func:`busybox_rootfs` refuses that one).
BUSYBOX = "/bin/busybox"

#: Where podman 4.3 looks for dynamic CDI specs; the spec folder goes here.
CDI_MOUNT_POINT = "/var/run/cdi"
#: Podman 4.3's other (static) CDI folder; masked with an empty folder.
CDI_STATIC_DIR = "/etc/cdi"

#: Limits that work without CAP_SYS_RESOURCE (podman's defaults do not).
ULIMITS = ("nofile=1024:1024", "nproc=1000:1000")

#: Runs in the fresh mount namespace: $1 spec dir, $2 empty dir, rest = podman argv.
_NS_SCRIPT = r"""set -e
spec=$1; empty=$2; shift 2
mount --bind "$spec" /var/run/cdi
if [ -d /etc/cdi ]; then mount --bind "$empty" /etc/cdi; fi
exec "$@"
"""

_ELF_PT_INTERP = 3

_counter = itertools.count()


class PodmanError(RuntimeError):
    """Podman cannot be used here (missing binaries, bad busybox, ...)."""


class PodmanResult(subprocess.CompletedProcess):  # type: ignore[type-arg]
    """A CompletedProcess (text stdout/stderr) plus the container's name and id."""

    def __init__(self, args: List[str], returncode: int, stdout: str, stderr: str,
                 name: str, container_id: Optional[str]) -> None:
        super().__init__(args, returncode, stdout, stderr)
        self.name = name
        #: Full 64-hex id from ``--cidfile``; None if podman failed before creating it.
        self.container_id = container_id


def _which(name: str) -> str:
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin")
    if path is None:
        raise PodmanError("%s not found: install podman runc busybox-static (see .ci/run)" % name)
    return path


def _has_interpreter(binary: Path) -> bool:
    """True when the ELF file asks for a dynamic loader (PT_INTERP)."""
    with open(binary, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF":
            raise PodmanError("%s is not an ELF file" % binary)
        if head[4] != 2:
            raise PodmanError("%s is not a 64-bit ELF file" % binary)
        endian = "<" if head[5] == 1 else ">"
        phoff, = struct.unpack_from(endian + "Q", head, 0x20)
        phentsize, phnum = struct.unpack_from(endian + "HH", head, 0x36)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    for i in range(phnum):
        p_type, = struct.unpack_from(endian + "I", table, i * phentsize)
        if p_type == _ELF_PT_INTERP:
            return True
    return False


def busybox_rootfs(dest: Path, busybox: str = BUSYBOX) -> Path:
    """Make (or reuse) a container root file system at *dest*.

    ``bin/busybox`` is a copy of the static busybox and every applet
    (sh, cat, ls, env, stat, mount, test, ...) is a relative symlink to it in
    ``bin``; ``sbin``, ``usr/bin`` and ``usr/sbin`` point at ``bin``.  Also
    dev, proc, sys, tmp, run, root, var and a minimal etc/passwd and etc/group.
    """
    dest = Path(dest)
    target = dest / "bin" / "busybox"
    if target.is_file():
        return dest
    src = Path(busybox)
    if not src.is_file():
        raise PodmanError("%s missing: apt-get install busybox-static" % busybox)
    if _has_interpreter(src):
        raise PodmanError("%s is dynamically linked: install busybox-static" % busybox)
    (dest / "bin").mkdir(parents=True, exist_ok=True)
    for d in ("dev", "proc", "sys", "etc", "root", "run", "var", "usr"):
        (dest / d).mkdir(exist_ok=True)
    (dest / "tmp").mkdir(exist_ok=True)
    os.chmod(dest / "tmp", 0o1777)
    for link, to in (("sbin", "bin"), ("usr/bin", "../bin"), ("usr/sbin", "../bin")):
        if not os.path.lexists(dest / link):
            os.symlink(to, dest / link)
    (dest / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (dest / "etc" / "group").write_text("root:x:0:\n")
    tmp = target.with_name(".busybox.tmp")
    shutil.copyfile(src, tmp)
    os.chmod(tmp, 0o755)
    applets = subprocess.run([str(src), "--list"], check=True, capture_output=True,
                             text=True).stdout.split()
    for applet in applets:
        if applet in ("busybox", "") or "/" in applet:
            continue
        applet_link = dest / "bin" / applet
        if not os.path.lexists(applet_link):
            os.symlink("busybox", applet_link)
    os.replace(tmp, target)  # last: its presence marks a complete rootfs
    return dest



def runc_bundle(bundle: Path) -> "tuple[str, Dict[str, Any]]":
    """A bundle for the real runc at *bundle*: busybox's root file system and
    the config.json `runc spec` writes; (runc's path, that config)."""
    runc = shutil.which("runc")
    assert runc, "runc missing: install.sh --with-tests installs it"
    bundle.mkdir()
    busybox_rootfs(bundle / "rootfs")
    subprocess.run([runc, "spec"], cwd=bundle, check=True)
    return runc, json.loads((bundle / "config.json").read_text())

def _toml_str(value: Union[str, Path]) -> str:
    return json.dumps(str(value))  # a JSON string is a valid TOML basic string


def _toml_list(values: Iterable[Union[str, Path]]) -> str:
    return "[" + ", ".join(_toml_str(v) for v in values) + "]"


class Podman:
    """One isolated podman installation under *workdir*.

    *cdi_spec_dirs*: the folders whose ``*.json`` / ``*.yaml`` CDI specs podman
    should see (and no others).  None means one folder, ``workdir/cdi``
    (created; see :attr:`cdi_dir`).  With one folder it is bind-mounted as is
    (edits are seen at once); with several, a folder of symlinks to their spec
    files is rebuilt before each command (later folders win on equal names).
    """

    def __init__(self, workdir: Path, cdi_spec_dirs: Optional[Sequence[Path]] = None, *,
                 rootfs: Optional[Path] = None, prefix: Sequence[str] = (),
                 network_backend: str = "cni") -> None:
        """*prefix*: an argv prefix that runs podman in another root
        (tests/trixie_root.py), whose binaries are then found on that root's
        PATH and whose /var/run/cdi must exist; its podman may need another
        *network_backend* (podman 5 has only netavark)."""
        self.prefix = list(prefix)
        self.network_backend = network_backend
        self.runtime = "runc"  # or the path of another OCI runtime (a wrapper)
        self.extra_env: Dict[str, str] = {}  # reaches conmon and the runtime
        if self.prefix:
            self.podman_bin, self.unshare_bin = "podman", "unshare"
        else:
            self.podman_bin = _which("podman")
            self.unshare_bin = _which("unshare")
            _which("runc")
            _which("mount")
        self.workdir = Path(workdir).resolve()
        w = self.workdir
        w.mkdir(parents=True, exist_ok=True)
        self.rootfs = busybox_rootfs(Path(rootfs) if rootfs else w / "rootfs")
        if cdi_spec_dirs is None:
            cdi_spec_dirs = [w / "cdi"]
        self.cdi_spec_dirs: List[Path] = [Path(d).resolve() for d in cdi_spec_dirs]
        self.root = w / "root"
        self.tmpdir = w / "tmp"
        self.home = w / "home"
        self.hooks_dir = w / "hooks.d"
        self.net_dir = w / "net.d"
        self.out_dir = w / "out"
        self.empty_dir = w / "empty"
        self.merged_cdi_dir = w / "cdi-merged"
        self.containers_conf = w / "containers.conf"
        self.storage_conf = w / "storage.conf"
        self.registries_conf = w / "registries.conf"
        for d in [self.root, self.tmpdir, self.home, self.hooks_dir, self.net_dir,
                  self.out_dir, self.empty_dir] + self.cdi_spec_dirs:
            d.mkdir(parents=True, exist_ok=True)
        # The CDI mount point must exist on the host; an empty folder is
        # harmless (never removed: a concurrent run may be using it).
        if not self.prefix:
            os.makedirs(CDI_MOUNT_POINT, exist_ok=True)
        # podman refuses a runroot longer than 50 characters (conmon's socket
        # paths), so the run state lives in a short private folder in /tmp,
        # linked from workdir/short and removed by cleanup().
        self.short_dir = Path(tempfile.mkdtemp(prefix="gspm-", dir=_short_tmp()))
        link = w / "short"
        if os.path.lexists(link):
            link.unlink()
        os.symlink(self.short_dir, link)
        self.runroot = self.short_dir / "runroot"
        self.runroot.mkdir()
        self._write_configs()

    # ----------------------------------------------------------------- setup
    @property
    def cdi_dir(self) -> Path:
        """The first (usually only) CDI spec folder."""
        return self.cdi_spec_dirs[0]

    def _write_configs(self) -> None:
        self.containers_conf.write_text(
            "# written by tests/podman_harness.py\n"
            "[containers]\n"
            'apparmor_profile = "unconfined"\n'
            'log_driver = "none"\n'
            'netns = "none"\n'
            "default_ulimits = %s\n"
            "\n"
            "[engine]\n"
            'cgroup_manager = "cgroupfs"\n'
            'runtime = "runc"\n'
            'events_logger = "none"\n'
            'lock_type = "file"\n'
            "tmp_dir = %s\n"
            "hooks_dir = %s\n"
            "# ignored by podman 4.3 (see the module docstring), used by >= 4.4\n"
            "cdi_spec_dirs = %s\n"
            "\n"
            "[network]\n"
            "network_backend = %s\n"
            "network_config_dir = %s\n"
            % (_toml_list(ULIMITS), _toml_str(self.tmpdir), _toml_list([self.hooks_dir]),
               _toml_list(self.cdi_spec_dirs), _toml_str(self.network_backend),
               _toml_str(self.net_dir)))
        self.storage_conf.write_text(
            "# written by tests/podman_harness.py\n"
            "[storage]\n"
            'driver = "vfs"\n'
            "graphroot = %s\n"
            "runroot = %s\n"
            % (_toml_str(self.root), _toml_str(self.runroot)))
        self.registries_conf.write_text("# no registries: tests use --rootfs\n")

    def env(self) -> Dict[str, str]:
        """The environment podman runs with (nothing else of the caller's)."""
        return {
            "PATH": os.environ.get("PATH") or "/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(self.home),
            "TMPDIR": str(self.tmpdir),
            "LANG": "C.UTF-8",
            "CONTAINERS_CONF": str(self.containers_conf),
            "CONTAINERS_STORAGE_CONF": str(self.storage_conf),
            "CONTAINERS_REGISTRIES_CONF": str(self.registries_conf),
            **self.extra_env,
        }

    def _spec_dir_for_mount(self) -> Path:
        if len(self.cdi_spec_dirs) == 1:
            return self.cdi_spec_dirs[0]
        merged = self.merged_cdi_dir
        if merged.exists():
            shutil.rmtree(merged)
        merged.mkdir()
        chosen: Dict[str, Path] = {}
        for d in self.cdi_spec_dirs:
            for f in sorted(d.iterdir()):
                if f.suffix in (".json", ".yaml") and f.is_file():
                    chosen[f.name] = f
        for name, f in chosen.items():
            os.symlink(f, merged / name)
        return merged

    def base_command(self) -> List[str]:
        """argv prefix: namespace wrapper + podman with this instance's global flags."""
        return self.prefix + [
            self.unshare_bin, "--mount", "--propagation", "private",
            "/bin/sh", "-c", _NS_SCRIPT, "gpuslice-podman-ns",
            str(self._spec_dir_for_mount()), str(self.empty_dir),
            self.podman_bin,
            "--root", str(self.root),
            "--runroot", str(self.runroot),
            "--tmpdir", str(self.tmpdir),
            "--cgroup-manager=cgroupfs",
            "--runtime", self.runtime,
            "--events-backend", "none",
        ]

    # --------------------------------------------------------------- running
    def podman(self, args: Sequence[str], *, timeout: float = 60,
               check: bool = False) -> subprocess.CompletedProcess:  # type: ignore[type-arg]
        """Any podman subcommand (``["ps", "-a"]``, ``["info"]``...) on this instance."""
        argv = self.base_command() + list(args)
        res = self._execute(argv, timeout, on_timeout=None)
        if check:
            res.check_returncode()
        return res

    def run_command(self, args: Sequence[str], *, devices: Iterable[str] = (),
                    env: Union[Mapping[str, str], Iterable[str], None] = None,
                    extra_args: Sequence[str] = (), name: Optional[str] = None,
                    cidfile: Optional[Path] = None) -> List[str]:
        """The full argv of :meth:`run` (without executing it)."""
        argv = self.base_command() + [
            "run", "--rm",
            "--pull", "never",
            "--network", "none",
            "--log-driver", "none",
            "--ulimit", ULIMITS[0],
            "--ulimit", ULIMITS[1],
        ]
        if name:
            argv += ["--name", name]
        if cidfile:
            argv += ["--cidfile", str(cidfile)]
        for dev in devices:
            argv += ["--device", dev]
        if env:
            items = ["%s=%s" % kv for kv in env.items()] if isinstance(env, Mapping) else list(env)
            for item in items:
                argv += ["--env", item]
        argv += list(extra_args)
        # --rootfs is a boolean flag: the folder is the first positional
        # argument, so every option must come before it.
        argv += ["--rootfs", str(self.rootfs)]
        argv += list(args)
        return argv

    def run(self, args: Sequence[str], *, devices: Iterable[str] = (),
            env: Union[Mapping[str, str], Iterable[str], None] = None,
            extra_args: Sequence[str] = (), timeout: float = 120,
            check: bool = False) -> PodmanResult:
        """``podman run --rm`` of the busybox rootfs running *args*.

        *devices*: ``--device`` values (``"gpuslice.io/gpu=0"``); *env*:
        container environment (mapping or ``K=V`` strings); *extra_args*:
        more ``podman run`` options.  stdout/stderr come back as text.
        On timeout the container is removed and TimeoutExpired raised.
        """
        n = next(_counter)
        name = "gpuslice-test-%d-%d" % (os.getpid(), n)
        cidfile = self.out_dir / ("%s.cid" % name)
        argv = self.run_command(args, devices=devices, env=env, extra_args=extra_args,
                                name=name, cidfile=cidfile)
        res = self._execute(argv, timeout, on_timeout=name)
        cid = _read_text(cidfile).strip() or None
        if cid:
            cidfile.unlink()
        result = PodmanResult(argv, res.returncode, res.stdout, res.stderr, name, cid)
        if check:
            result.check_returncode()
        return result

    def _execute(self, argv: List[str], timeout: float,
                 on_timeout: Optional[str]) -> subprocess.CompletedProcess:  # type: ignore[type-arg]
        # Output goes to files, not pipes: a stray conmon or container that
        # still holds a pipe cannot make us wait for EOF.
        n = next(_counter)
        out_path = self.out_dir / ("%d.stdout" % n)
        err_path = self.out_dir / ("%d.stderr" % n)
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    env=self.env(), cwd=str(self.workdir),
                                    start_new_session=True)
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._kill_group(proc)
                if on_timeout:
                    self.podman(["rm", "--force", "--time", "0", "--ignore", on_timeout],
                                timeout=60)
                raise subprocess.TimeoutExpired(
                    argv, timeout, output=_read_text(out_path), stderr=_read_text(err_path))
        stdout, stderr = _read_text(out_path), _read_text(err_path)
        out_path.unlink()
        err_path.unlink()
        return subprocess.CompletedProcess(argv, rc, stdout, stderr)

    @staticmethod
    def _kill_group(proc: "subprocess.Popen[bytes]") -> None:
        # The session we started: podman and whatever it forked that did
        # not leave it (conmon does; `podman rm` takes care of it).
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()

    # --------------------------------------------------------------- cleanup
    def containers(self) -> List[Dict[str, Any]]:
        """``podman ps -a`` of this instance, as parsed JSON."""
        res = self.podman(["ps", "--all", "--format", "json"], check=True)
        return json.loads(res.stdout or "[]") or []

    def cleanup(self) -> None:
        """Remove every container of this instance (only this instance's)."""
        res = self.podman(["rm", "--all", "--force", "--time", "0"], timeout=60)
        if res.returncode != 0:
            raise PodmanError("podman rm --all failed: %s" % res.stderr.strip())
        shutil.rmtree(self.short_dir, ignore_errors=True)

    def __enter__(self) -> "Podman":
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def _short_tmp() -> str:
    return "/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir()


def _read_text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


def podman_fixture(name: str = "podman", *, subdir: str = "podman") -> Callable[..., Any]:
    """A pytest fixture (function scope) yielding a :class:`Podman` under tmp_path.

    Use in a test module or conftest: ``podman = podman_fixture()``.
    Its CDI spec folder is ``podman.cdi_dir`` (``tmp_path/podman/cdi``).
    """
    import pytest  # only when a fixture is wanted

    @pytest.fixture(name=name)
    def _podman(tmp_path: Path) -> Iterable[Podman]:
        p = Podman(tmp_path / subdir)
        try:
            yield p
        finally:
            p.cleanup()

    return _podman
