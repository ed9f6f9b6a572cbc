"""install.sh's way back (`--uninstall`, `--purge`), run for real from a copy
of this tree: a plain install into a virtual environment, then each removal.
The host's folders that install.sh writes are covered by empty tmpfs mounts
in a private mount namespace, so the machine's own gpuslice is never touched.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import venv
from pathlib import Path
from typing import Iterator, List

import pytest

REPO = Path(__file__).resolve().parent.parent
# What install.sh writes outside the environment, each covered by a tmpfs.
HOST_DIRS = ("/etc/gpuslice", "/etc/cdi", "/usr/lib/gpuslice", "/usr/local/share/man/man8",
             "/var/lib/gpuslice", "/run/gpuslice", "/var/cache/gpuslice")
DB = "/var/lib/gpuslice/state.db"

# Run in the namespace: each step's output is a listing of what is there.
LOOK = ("for p in {bin}/gpuslice {bin}/gpuslice-hook /usr/local/share/man/man8/gpuslice.8 "
        "/etc/gpuslice/config.yaml /etc/cdi/gpuslice.yaml /etc/cdi/other.yaml " + DB + "; do "
        "[ -e $p ] && echo \"there $p\"; done; true")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment over the system's packages (pyyaml, click, cffi,
    ...), so that installing gpuslice there needs nothing from the network
    but the build's own tools."""
    where = tmp_path_factory.mktemp("venv") / "env"
    venv.EnvBuilder(system_site_packages=True, with_pip=True).create(where)
    return where


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clean copy of the tree (git's files, as a clone has them)."""
    dest = tmp_path_factory.mktemp("tree") / "gpuslice"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def in_namespace(script: str, env_dir: Path, tree: Path) -> subprocess.CompletedProcess:
    mounts = "".join(f"mount -t tmpfs gs-test {d}\n" for d in HOST_DIRS)
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "bash", "-euo", "pipefail", "-c",
         mounts + script], cwd=tree, capture_output=True, text=True, timeout=900,
        env={"PATH": f"{env_dir}/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(tree),
             "LANG": "C.UTF-8"}, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def made_dirs() -> Iterator[List[str]]:
    """The folders tmpfs needs to sit on: those missing on this host are made,
    empty, and removed again after the module."""
    made = [d for d in HOST_DIRS if not Path(d).exists()]
    for d in made:
        Path(d).mkdir(parents=True)
    yield made
    for d in reversed(made):
        try:
            Path(d).rmdir()
        except OSError:
            pass


def there(res: subprocess.CompletedProcess) -> List[str]:
    return [line.split(" ", 1)[1] for line in res.stdout.splitlines() if line.startswith("there ")]


SEED = (f"printf 'cdiVersion: 0.5.0\\n' > /etc/cdi/gpuslice.yaml\n"
        f"printf 'cdiVersion: 0.5.0\\n' > /etc/cdi/other.yaml\n"
        f"python3 -c 'from ocihook import accountant as a; "
        f"x = a.Accountant(\"{DB}\"); x.sync_cards([a.Card(0, \"GPU-0\", 16384)]); x.close()'\n")
HOLD = (f"python3 -c 'import sqlite3; d = sqlite3.connect(\"{DB}\"); d.execute("
        "\"INSERT INTO reservations (container_id, device, card_uuid, memory_mib, cores, "
        "exclusive, created) VALUES (\\\"c1\\\", \\\"0-4g\\\", \\\"GPU-0\\\", 4096, 0, 0, 1)\"); "
        "d.commit()'\n")


def test_uninstall_then_purge(env: Path, tree: Path, made_dirs: List[str]) -> None:
    look = LOOK.format(bin=env / "bin")
    res = in_namespace(
        "./install.sh\n" + SEED + "echo '== installed'\n" + look + "\n"
        # A container holding a slice: refused, nothing removed.
        + HOLD + "set +e; ./install.sh --uninstall; echo \"status $?\"; set -e\n"
        "echo '== refused'\n" + look + "\n"
        f"python3 -c 'import sqlite3; d = sqlite3.connect(\"{DB}\"); "
        "d.execute(\"DELETE FROM reservations\"); d.commit()'\n"
        "./install.sh --uninstall\necho '== uninstalled'\n" + look + "\n"
        "./install.sh --purge\necho '== purged'\n" + look + "\n"
        "ls -A /etc/gpuslice /var/lib/gpuslice\n", env, tree)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    out = res.stdout
    installed, rest = out.split("== installed\n", 1)[1].split("status ", 1)
    assert there(subprocess.CompletedProcess([], 0, installed)) == [
        f"{env}/bin/gpuslice", f"{env}/bin/gpuslice-hook",
        "/usr/local/share/man/man8/gpuslice.8", "/etc/gpuslice/config.yaml",
        "/etc/cdi/gpuslice.yaml", "/etc/cdi/other.yaml", DB]
    status, rest = rest.split("\n", 1)
    assert status == "2"
    assert ("install.sh: 1 container(s) hold slices (gpuslice status): stop them first, so "
            "that their slices are given back; nothing removed") in res.stderr
    refused, rest = rest.split("== refused\n", 1)[1].split("== uninstalled\n", 1)
    assert there(subprocess.CompletedProcess([], 0, refused)) == there(
        subprocess.CompletedProcess([], 0, installed))
    uninstalled, purged = rest.split("== purged\n", 1)
    # The configuration, the accountant and others' specs stay; the rest goes.
    assert there(subprocess.CompletedProcess([], 0, uninstalled)) == [
        "/etc/gpuslice/config.yaml", "/etc/cdi/other.yaml", DB]
    assert "./install.sh --purge removes them" in out
    assert there(subprocess.CompletedProcess([], 0, purged)) == ["/etc/cdi/other.yaml"]
    assert purged.rstrip().endswith("/var/lib/gpuslice:")  # both emptied (tmpfs stay)


def test_uninstall_options_are_checked(tree: Path) -> None:
    res = subprocess.run(["bash", str(tree / "install.sh"), "--uninstall", "--with-tests"],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr == ("install.sh: --with-tests installs and --uninstall removes: give one "
                          "of them\n")
    res = subprocess.run(["bash", str(tree / "install.sh"), "--remove"], capture_output=True,
                         text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert res.returncode == 2
    assert res.stderr == ("install.sh: unknown option '--remove' (use --with-tests, --uninstall, "
                          "--purge or --help)\n")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
