"""A Debian 13 (trixie) root folder whose real runtimes the tests run
(dockerd 26, containerd 1.7, podman 5.4, runc 1.1), on a Debian 12 host that
never gets any of them installed.

The root is made with debootstrap and apt-get from deb.debian.org (one to two
minutes). Its mounts (the root on itself, so that runc finds "/" a mount point;
/proc, /sys, /dev, a tmpfs on /run; the host folders the tests share with it,
at the same paths) live in a mount namespace of their own, held by one
process: the host's mount table never changes, and whatever is left mounted
goes with the namespace's last process. A command runs in the root through
:attr:`TrixieRoot.prefix` (nsenter into that namespace, then chroot).

Host paths named in a CDI spec or a configuration (the tests' tmp folders, the
repository with its built hook, runtime wrapper and fake driver) are valid in
the root too, because those folders are bind-mounted there at their own path.
Nothing here needs pytest; tests/README.md says how the tests use it.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

SUITE = "trixie"
MIRROR = "http://deb.debian.org/debian"
#: The runtimes, busybox for the containers' root file system, python3 with
#: yaml and jsonschema for gpuslice-cdi-cache (our Python, which
#: gpuslice-runtime runs when its CDI cache must be made: it reads and
#: checks the specs). The libraries our C
#: programs link to come on top (library_packages).
PACKAGES = ("docker.io", "docker-cli", "containerd", "podman", "runc", "busybox-static",
            "iptables", "python3", "python3-yaml", "python3-jsonschema")
#: What `--version` each prints, for the CI log.
VERSION_COMMANDS = (("dockerd", "--version"), ("docker", "--version"),
                    ("containerd", "--version"), ("podman", "--version"),
                    ("runc", "--version"))
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PROXY_VARIABLES = ("http_proxy", "https_proxy", "no_proxy")
STEP_SECONDS = 600  # debootstrap or apt-get; each takes under a minute or two here

# Runs in the new mount namespace (host's sh and mount): $1 the root. The
# private propagation (unshare's) keeps every mount here out of the host's
# table, and the host's later mounts out of this one.
_HOLDER = r"""set -e
R=$1
mount --bind "$R" "$R"
mount --bind /proc "$R/proc"
mount --rbind /sys "$R/sys"
mount --rbind /dev "$R/dev"
mount -t tmpfs -o mode=755 tmpfs "$R/run"
mkdir -p "$R/run/cdi" "$R/run/lock"
echo ready
exec sleep 2147483647
"""


class RootError(RuntimeError):
    """The root could not be made; the message is one line that says why and
    what to do."""


def _step_env() -> Dict[str, str]:
    """A clean environment, but for the proxy a machine may reach the mirror by."""
    keep = {k: v for k, v in os.environ.items() if k.lower() in PROXY_VARIABLES}
    return {"PATH": PATH, "LANG": "C.UTF-8", **keep}


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


class TrixieRoot:
    """A trixie root under ``folder`` (``folder/root``), its mount namespace
    and the host folders shared with it; :meth:`close` takes it all down."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder).resolve()
        self.path = self.folder / "root"
        self.holder: Optional["subprocess.Popen[str]"] = None
        self.shared: List[Path] = []
        #: Seconds each step took (debootstrap, apt-get, mounts), for the CI log.
        self.timings: Dict[str, float] = {}

    # ------------------------------------------------------------- making it
    def build(self, shared: Sequence[Path], binaries: Sequence[Path] = (),
              mirror: str = MIRROR) -> "TrixieRoot":
        """debootstrap, the namespace and its mounts, apt-get install (also of
        the libraries ``binaries``, built on the host, link to), then each of
        ``shared`` bind-mounted at its own path in the root."""
        for tool in ("debootstrap", "unshare", "nsenter", "chroot", "mount"):
            if shutil.which(tool) is None:
                raise RootError(f"{tool} not found: apt-get install debootstrap util-linux "
                                "(./install.sh --with-tests installs them)")
        self.folder.mkdir(parents=True, exist_ok=True)
        # debootstrap mounts /proc and /sys in the target while it works: in a
        # namespace of its own, so that those never reach the host's table.
        self._step("debootstrap", ["unshare", "--mount", "--propagation", "private",
                                   "debootstrap", "--variant=minbase", SUITE, str(self.path),
                                   mirror],
                   f"debootstrap {SUITE} from {mirror}", mirror)
        self._hold()
        packages = [*PACKAGES, *library_packages(binaries)]
        install = ("apt-get update -q && apt-get install -y -q --no-install-recommends "
                   + " ".join(packages) + " && apt-get clean")
        self._step("apt-get", self.argv("sh", "-c", install),
                   f"apt-get install in the {SUITE} root from {mirror}", mirror,
                   env={"DEBIAN_FRONTEND": "noninteractive"})
        start = time.monotonic()
        for folder in _outermost(shared):
            self._share(folder)
        self.timings["mounts"] = time.monotonic() - start
        return self

    def _step(self, name: str, argv: List[str], what: str, mirror: str,
              env: Optional[Dict[str, str]] = None) -> None:
        log = self.folder / f"{name}.log"
        start = time.monotonic()
        with open(log, "w") as out:
            try:
                rc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, timeout=STEP_SECONDS,
                                    env={**_step_env(), **(env or {})}).returncode
                how = f"exit {rc}"
            except subprocess.TimeoutExpired:
                rc, how = -1, f"still running after {STEP_SECONDS} s"
        self.timings[name] = time.monotonic() - start
        if rc != 0:
            raise RootError(f"{what} failed ({how}): "
                            f"{_last_line(log.read_text(errors='replace'))}; the machine must "
                            f"reach {mirror} (log: {log})")

    def _hold(self) -> None:
        self.holder = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", _HOLDER,
             "gpuslice-trixie-root", str(self.path)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, start_new_session=True)
        assert self.holder.stdout is not None
        first = self.holder.stdout.readline()
        if first.strip() != "ready":  # the script stopped at a mount (set -e)
            said = first + self.holder.stdout.read()
            raise RootError(f"the mounts of the {SUITE} root failed: {_last_line(said)}")

    def _share(self, folder: Path) -> None:
        inside = self.path / str(folder).lstrip("/")
        inside.mkdir(parents=True, exist_ok=True)
        res = subprocess.run(self.enter("mount", "--bind", str(folder), str(inside)),
                             capture_output=True, text=True, timeout=60)
        if res.returncode != 0:
            raise RootError(f"bind mount of {folder} into the {SUITE} root failed: "
                            f"{_last_line(res.stderr)}")
        self.shared.append(folder)

    # ------------------------------------------------------------- using it
    def enter(self, *argv: str) -> List[str]:
        """argv run in the root's mount namespace, not chrooted (host binaries)."""
        assert self.holder is not None, "the root is not built"
        return ["nsenter", f"--mount=/proc/{self.holder.pid}/ns/mnt", "--", *argv]

    @property
    def prefix(self) -> List[str]:
        """The argv prefix that runs a command inside the root; the command's
        binaries are found on the root's PATH."""
        return self.enter("chroot", str(self.path))

    def argv(self, *argv: str) -> List[str]:
        return [*self.prefix, *argv]

    def run(self, *argv: str, timeout: float = 120,
            env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(*argv), capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL,
                              env=env or {"PATH": PATH, "LANG": "C.UTF-8"})

    def place(self, path: str, text: str, mode: int = 0o755) -> Path:
        """A file of the root at ``path`` (as the root sees it); its host path."""
        if any(Path(path) == f or f in Path(path).parents for f in self.shared):
            raise RootError(f"{path} is in a folder the host shares with the root: the "
                            "root sees the host's file there, not one of its own")
        dest = self.path / path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)
        dest.chmod(mode)
        return dest

    def place_scripts(self, env: Dict[str, str], repo: Path) -> List[str]:
        """For each of our console scripts (pyproject.toml's [project.scripts])
        that a value of ``env`` names by path, the same path in the root runs
        it with the root's python3 and ``repo`` on PYTHONPATH. The paths placed."""
        import tomlkit

        scripts = tomlkit.parse((repo / "pyproject.toml").read_text())["project"]["scripts"]
        placed = []
        for value in env.values():
            entry = scripts.get(os.path.basename(value)) if value.startswith("/") else None
            if entry is None:
                continue
            module, func = str(entry).split(":")
            self.place(value, f"#!/bin/sh\nPYTHONPATH='{repo}' exec python3 -c 'import sys; "
                              f"from {module} import {func}; sys.argv[0] = \"{value}\"; "
                              f"sys.exit({func}())' \"$@\"\n")
            placed.append(value)
        return placed

    def launcher(self, folder: Path, program: str) -> Path:
        """A host executable ``folder/program`` that runs the root's ``program``
        (for code of ours on the host that looks a program up on PATH)."""
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / program
        # The root's own PATH: the caller's may name this folder, which the
        # root sees too, and the launcher would find itself there.
        path.write_text(f"#!/bin/sh\nPATH={PATH}\nexec "
                        + " ".join(f"'{a}'" for a in self.prefix) + f' {program} "$@"\n')
        path.chmod(0o755)
        return path

    def versions(self) -> List[str]:
        """The first line each runtime prints for --version."""
        lines = []
        for cmd in VERSION_COMMANDS:
            res = self.run(*cmd, timeout=60)
            printed = (res.stdout or res.stderr).splitlines()
            first = printed[0].strip() if printed else f"(exit {res.returncode}, nothing printed)"
            lines.append(f"{' '.join(cmd)}: {first}")
        return lines

    # ---------------------------------------------------------- taking it down
    def close(self) -> None:
        """Unmount what the namespace holds (deepest first), end its holder,
        and remove the root (its logs stay beside it, in the test's tmp)."""
        if self.holder is not None and self.holder.poll() is None:
            # umount -R takes the tree under the root in reverse order, the
            # root's own bind last.
            subprocess.run(self.enter("umount", "-R", str(self.path)), capture_output=True,
                           timeout=120)
            os.killpg(self.holder.pid, signal.SIGTERM)
            self.holder.wait(timeout=30)
        self.holder = None
        # No mount of the root is in the host's table: this removes the
        # root's own files only, never what it had mounted.
        shutil.rmtree(self.path, ignore_errors=True)


def library_packages(binaries: Sequence[Path]) -> List[str]:
    """The host's packages of the shared libraries the binaries link to (ldd,
    dpkg-query); Debian 13 names them alike."""
    libraries = set()
    for binary in binaries:
        res = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, timeout=60)
        if res.returncode != 0:
            raise RootError(f"ldd {binary} failed: {_last_line(res.stderr)}; build it first")
        for line in res.stdout.splitlines():
            _, arrow, target = line.partition("=>")
            if arrow and target.strip().startswith("/"):
                libraries.add(os.path.realpath(target.split()[0]))
    packages = set()
    for library in sorted(libraries):
        res = subprocess.run(["dpkg-query", "-S", "*/" + os.path.basename(library)],
                             capture_output=True, text=True, timeout=60)
        # dpkg knows /lib/... where the file is /usr/lib/... (merged /usr).
        found = {pkg.split(":")[0] for line in res.stdout.splitlines()
                 for owners, _, path in [line.partition(": ")]
                 if os.path.realpath(path) == library for pkg in owners.split(", ")}
        if not found:
            raise RootError(f"no package of the host holds {library} (linked by "
                            f"{', '.join(map(str, binaries))}): link to Debian's libraries")
        packages |= found
    return sorted(packages)


def _outermost(folders: Sequence[Path]) -> List[Path]:
    """The folders, each once, none inside another of them."""
    out: List[Path] = []
    for folder in sorted({Path(f).resolve() for f in folders}, key=lambda p: len(p.parts)):
        if not any(folder == o or o in folder.parents for o in out):
            out.append(folder)
    return out
