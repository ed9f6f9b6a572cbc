"""Real containerd 1.6 and dockerd 20.10 for tests, each with its own folders
and socket (two test runs never share one), stopped by pid.

Runtimes that read no CDI: containers get our devices through
gpuslice-runtime (`ctr run --runc-binary`, `docker run --runtime`). The
daemons' environment reaches the runtime they run (through the shim), so
`env` is how a test points gpuslice-runtime at its configuration.

`prefix` runs a daemon and its client in another root instead
(tests/trixie_root.py: Debian 13's containerd 1.7 and dockerd 26); their
folders and sockets are host paths that root shares.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from podman_harness import busybox_rootfs


class DaemonError(RuntimeError):
    """A daemon did not come up; the message holds the end of its log."""


def _short_dir(prefix: str) -> Path:
    # Unix socket paths are limited to 108 bytes: keep the run state short.
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


def _wait_for(sock: Path, proc: "subprocess.Popen[bytes]", log: Path, what: str,
              seconds: float = 60) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if sock.exists():
            return
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
    raise DaemonError(f"{what} did not start (exit {proc.poll()}):\n{tail}")


def _remove_short(short: Path, prefix: Sequence[str]) -> None:
    # What the daemon left mounted there, where it mounted it (the other
    # root's mount namespace, with a prefix), then the folder.
    subprocess.run([*prefix, "umount", "-R", str(short)], capture_output=True)
    shutil.rmtree(short, ignore_errors=True)


def _stop(proc: Optional["subprocess.Popen[bytes]"]) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)


class Containerd:
    """containerd with its own root, state and socket; `ctr` against it."""

    def __init__(self, workdir: Path, env: Dict[str, str], prefix: Sequence[str] = (),
                 config: Optional[Path] = None) -> None:
        """config: containerd's configuration file (default: one without the
        CRI plugin, never the host's)."""
        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir = workdir
        self.prefix = list(prefix)
        self.short = _short_dir("gsctd-")
        self.sock = self.short / "sock"
        self.rootfs = busybox_rootfs(workdir / "rootfs")
        if config is None:
            config = workdir / "containerd.toml"
            # No CRI plugin: it wants networking and is not what ctr uses.
            config.write_text('version = 2\ndisabled_plugins = ["io.containerd.grpc.v1.cri"]\n')
        self.config = config
        self.log = workdir / "containerd.log"
        self.proc: Optional[subprocess.Popen] = subprocess.Popen(
            [*self.prefix, "containerd", "--config", str(config), "--root", str(workdir / "root"),
             "--state", str(self.short / "state"), "--address", str(self.sock)],
            env=env, stdout=open(self.log, "wb"), stderr=subprocess.STDOUT,
            start_new_session=True)
        _wait_for(self.sock, self.proc, self.log, "containerd")

    def ctr(self, args: Sequence[str], timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([*self.prefix, "ctr", "--address", str(self.sock), *args],
                              capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def run(self, cid: str, cmd: Sequence[str], runc_binary: Path, env: Sequence[str] = (),
            detach: bool = False) -> subprocess.CompletedProcess:
        args = ["run", "--runc-binary", str(runc_binary)] + ([] if detach else ["--rm"])
        for e in ["PATH=/bin:/usr/bin", *env]:  # no image: no PATH otherwise
            args += ["--env", e]
        if detach:
            args.append("--detach")
        # --rootfs is a flag: the folder is the first positional argument.
        return self.ctr([*args, "--rootfs", str(self.rootfs), cid, *cmd])

    def stop(self) -> None:
        _stop(self.proc)
        self.proc = None
        _remove_short(self.short, self.prefix)


class Dockerd:
    """dockerd (and the containerd it starts) with its own folders and socket,
    a busybox image imported from a folder, and named runtimes."""

    IMAGE = "gpuslice-busybox:test"

    def __init__(self, workdir: Path, env: Dict[str, str], runtimes: Dict[str, Path],
                 daemon_json: Optional[Path] = None, prefix: Sequence[str] = ()) -> None:
        """runtimes: registered with --add-runtime; daemon_json: the daemon's
        configuration file (default: an empty one, never the host's)."""
        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir = workdir
        self.prefix = list(prefix)
        self.daemon_json = daemon_json
        self.short = _short_dir("gsdkd-")
        self.sock = self.short / "docker.sock"
        self.log = workdir / "dockerd.log"
        args = [*self.prefix, "dockerd", "--data-root", str(workdir / "data"), "--exec-root",
                str(self.short / "exec"), "--pidfile", str(self.short / "docker.pid"),
                "-H", f"unix://{self.sock}", "--iptables=false", "--ip-masq=false",
                "--bridge=none", "--storage-driver=vfs", "--config-file",
                str(self._config())]
        for name, path in runtimes.items():
            args += ["--add-runtime", f"{name}={path}"]
        self.proc: Optional[subprocess.Popen] = subprocess.Popen(
            args, env=env, stdout=open(self.log, "wb"), stderr=subprocess.STDOUT,
            start_new_session=True)
        _wait_for(self.sock, self.proc, self.log, "dockerd")
        self._import_busybox()

    def _config(self) -> Path:
        if self.daemon_json is not None:
            return self.daemon_json
        path = self.workdir / "daemon.json"
        path.write_text("{}\n")  # not the host's /etc/docker/daemon.json
        return path

    def _import_busybox(self) -> None:
        rootfs = busybox_rootfs(self.workdir / "rootfs")
        tar = self.workdir / "rootfs.tar"
        with tarfile.open(tar, "w") as t:
            t.add(str(rootfs), arcname=".")
        res = self.docker(["import", str(tar), self.IMAGE])
        if res.returncode != 0:
            raise DaemonError(f"docker import failed: {res.stderr}")

    def docker(self, args: Sequence[str], timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([*self.prefix, "docker", "-H", f"unix://{self.sock}", *args],
                              capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def run(self, cmd: Sequence[str], runtime: Optional[str] = None, env: Sequence[str] = (),
            extra: Sequence[str] = ()) -> subprocess.CompletedProcess:
        args: List[str] = ["run", "--network", "none"]
        if runtime:
            args += ["--runtime", runtime]
        for e in env:
            args += ["-e", e]
        return self.docker([*args, *extra, self.IMAGE, *cmd])

    def stop(self) -> None:
        containers = self.docker(["ps", "-aq"]).stdout.split()
        if containers:
            self.docker(["rm", "-f", *containers])
        _stop(self.proc)
        self.proc = None
        _remove_short(self.short, self.prefix)


def daemon_env(extra: Dict[str, str]) -> Dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), "HOME": "/root"}
    env.update(extra)
    return env
