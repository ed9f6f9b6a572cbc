"""The distribution packages (packaging/, Makefile, docs/packages.md).

Both are built once, from a clean clone of a snapshot of this working tree
(the files git knows, committed or not), with `make deb` (the Debian source
package too) and `make rpm`.
lintian and rpmlint must have nothing to say that packaging/ does not
override with a reason; their output goes to dist/lintian.txt and
dist/rpmlint.txt (here and in the clone) and to stderr. The rpm must have the
deb's layout and scriptlets. Then the deb is installed with apt-get, used from
its installed files alone (a private mount namespace hides /usr/local, where
install.sh's editable gpuslice lives, and this tree): `gpuslice cdi generate`
on the fake driver, a Podman container with a slice through the installed
hook and shim, the installed hooks.d file; removed, purged, and nothing it
installed may remain.

Runs as root on Debian with dpkg-buildpackage, rpmbuild, lintian, rpmlint
and Podman (install.sh --with-tests); in CI a missing tool is a failure, not
a skip. Whatever the install would overwrite (install.sh's
/etc/gpuslice/config.yaml and /usr/lib/gpuslice, a spec in /etc/cdi, the
accountant's /var/lib/gpuslice) is moved aside first and put back after;
packages that apt-get pulls in for the deb are purged again.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Set, Tuple

import pytest
import yaml

import ci_log
from fakehost import Host, fake_gpu
from podman_harness import Podman

REPO = Path(__file__).resolve().parent.parent
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
TOOLS = ("git", "make", "dpkg-buildpackage", "rpmbuild", "rpm", "rpm2cpio", "cpio", "lintian",
         "rpmlint", "apt-get", "dpkg", "unshare", "mount", "podman", "runc")

SHIM = "/usr/lib/gpuslice/libgpuslice.so"
HOOK = "/usr/bin/gpuslice-hook"
RUNTIME = "/usr/bin/gpuslice-runtime"
HOOKS_D = "/usr/share/containers/oci/hooks.d"
UNITS = ("gpuslice-cdi-refresh.path", "gpuslice-cdi-refresh.service", "gpuslice-health.service")
# What the packages must both hold, after normalisation (see _normal).
KEY_FILES = {
    "/usr/bin/gpuslice", HOOK, RUNTIME, "/usr/bin/gpuslice-cdi-cache", SHIM,
    "/usr/bin/gpuslice-nomad-device",
    "SITE/ocihook/nomad/proto/device.proto", "SITE/ocihook/nomad/proto/device_pb2.py",
    "/usr/libexec/gpuslice/nvidia-driver-present", "/etc/gpuslice/config.yaml",
    "/usr/lib/systemd/system/gpuslice-cdi-refresh.service",
    "/usr/lib/systemd/system/gpuslice-cdi-refresh.path",
    "/usr/lib/systemd/system/gpuslice-exporter.service",
    "/usr/lib/systemd/system/gpuslice-health.service",
    "/usr/lib/systemd/system/gpuslice-mps@.service",
    "/usr/lib/tmpfiles.d/gpuslice.conf", HOOKS_D + "/gpuslice-poststop.json",
    # Every man page (tests/test_manpages.py checks them).
    *(f"/usr/share/man/man8/{page.name}.gz" for page in (REPO / "packaging" / "man").glob("*.8")),
    "SITE/ocihook/cli.py", "SITE/cdi/nvml.py",
    *(f"SITE/ocihook/native/{h}" for h in ("region.h", "cardfile.h", "statedir.h", "statedb.h")),
}
# Not compared: documentation, the license (the rpm's %license file; the deb
# has it in /usr/share/doc/gpuslice/copyright), the Python metadata (dist-info
# from pybuild, egg-info from setup.py install), byte code, build-id links,
# and the rpm's systemd preset (Debian enables units with deb-systemd-helper
# instead), the deb's lintian overrides.
NOT_COMPARED = re.compile(r"^/usr/share/(doc|licenses)/|^SITE/gpuslice-[^/]*\.(dist|egg)-info/"
                          r"|/__pycache__/"
                          r"|^/usr/lib/\.build-id/|^/usr/lib/systemd/system-preset/"
                          r"|^/usr/share/lintian/overrides/")
# Everything the package or its use may leave, moved aside first.
STATE = ("/etc/gpuslice", "/usr/lib/gpuslice", "/var/lib/gpuslice", "/run/gpuslice",
         "/etc/cdi/gpuslice.yaml", "/etc/cdi/gpuslice.json")


def _require() -> None:
    missing = [t for t in TOOLS if shutil.which(t, path=SYSTEM_PATH) is None]
    why = None
    if os.geteuid() != 0:
        why = "needs root (installs a package)"
    elif not os.path.exists("/etc/debian_version"):
        why = "needs Debian or Ubuntu"
    elif missing:
        why = "missing %s (install.sh --with-tests installs them)" % " ".join(missing)
    if why:
        if os.environ.get("CI"):
            pytest.fail("package tests cannot run in CI: " + why)
        pytest.skip(why)


def sh(argv: Sequence[str], *, check: bool = True, timeout: float = 600,
       **kw: object) -> subprocess.CompletedProcess:
    res = subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                         timeout=timeout, stdin=subprocess.DEVNULL, **kw)  # type: ignore[call-overload]
    if check and res.returncode != 0:
        raise AssertionError("%s exited %d\n--- stdout\n%s\n--- stderr\n%s" % (
            " ".join(map(str, argv)), res.returncode, res.stdout[-6000:], res.stderr[-6000:]))
    return res


def report(name: str, text: str, *dirs: Path) -> None:
    """Into the CI log (stderr, shown for a failing test; -s shows it always)
    and into dist/NAME of this tree and of each of dirs."""
    sys.stderr.write("===== %s\n%s\n" % (name, text.rstrip()))
    ci_log.keep(name, text)
    for d in (REPO / "dist", *dirs):
        d.mkdir(parents=True, exist_ok=True)
        (d / name).write_text(text)


# -- building ----------------------------------------------------------------

@dataclass
class Packages:
    clone: Path
    deb: Path
    dsc: Path
    rpm: Path


def _snapshot_clone(top: Path) -> Path:
    """A commit of the working tree's git-known files, cloned: a clean clone
    of what is here now, whatever is committed."""
    snapshot = top / "snapshot"
    snapshot.mkdir()
    names = sh(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
               cwd=REPO).stdout.split("\0")
    for name in filter(None, names):
        src = REPO / name
        if not os.path.lexists(src):  # deleted in the working tree
            continue
        dest = snapshot / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest, follow_symlinks=False)
    sh(["git", "init", "-q"], cwd=snapshot)
    sh(["git", "add", "-A"], cwd=snapshot)
    sh(["git", "-c", "user.name=gpuslice tests", "-c", "user.email=tests@gpuslice.invalid",
        "commit", "-q", "-m", "snapshot of the working tree"], cwd=snapshot)
    clone = top / "clone"
    sh(["git", "clone", "-q", snapshot, clone])
    return clone


@pytest.fixture(scope="module")
def packages(tmp_path_factory: pytest.TempPathFactory) -> Packages:
    _require()
    top = tmp_path_factory.mktemp("packages")
    clone = _snapshot_clone(top)
    started = time.monotonic()
    builds = {}
    for target in ("deb", "rpm"):  # at once: each has its own build folder
        log = top / ("make-%s.log" % target)
        with open(log, "w") as out:
            builds[target] = (subprocess.Popen(["make", target], cwd=clone, stdout=out,
                                               stderr=subprocess.STDOUT,
                                               stdin=subprocess.DEVNULL), log)
    for target, (proc, log) in builds.items():
        rc = proc.wait(timeout=900)
        assert rc == 0, "make %s failed (%d):\n%s" % (target, rc, log.read_text()[-8000:])
    sys.stderr.write("make deb + make rpm: %.1f s\n" % (time.monotonic() - started))
    [deb] = sorted((clone / "dist").glob("gpuslice_*.deb"))
    [dsc] = sorted((clone / "dist").glob("gpuslice_*.dsc"))
    [rpm] = sorted((clone / "dist").glob("gpuslice-*.rpm"))
    return Packages(clone, deb, dsc, rpm)


# -- linting -----------------------------------------------------------------

def test_lintian_has_nothing_left(packages: Packages) -> None:
    res = sh(["lintian", "--pedantic", "--display-info", "--show-overrides", packages.deb,
              packages.dsc], check=False)
    text = res.stdout + res.stderr
    report("lintian.txt", text, packages.clone / "dist")
    left = [line for line in text.splitlines() if re.match(r"[EW]: ", line)]
    assert res.returncode == 0 and not left, \
        "lintian errors or warnings not overridden (packaging/deb/debian/" \
        "gpuslice.lintian-overrides):\n" + "\n".join(left or [text])
    # Every override is still used: lintian shows the overridden tags as O:.
    debian = REPO / "packaging/deb/debian"
    for package, overrides in (("gpuslice", debian / "gpuslice.lintian-overrides"),
                               ("gpuslice source", debian / "source/lintian-overrides")):
        for tag in re.findall(r"^([a-z0-9-]+)", overrides.read_text(), re.M):
            assert re.search(r"^O: %s: %s\b" % (package, tag), text, re.M), \
                "unused lintian override %s" % tag


def test_rpmlint_has_nothing_left(packages: Packages) -> None:
    rc = packages.clone / "packaging/rpm/gpuslice.rpmlintrc"
    res = sh(["rpmlint", "-r", rc, packages.rpm, packages.clone / "packaging/rpm/gpuslice.spec"],
             check=False)
    text = res.stdout + res.stderr
    report("rpmlint.txt", text, packages.clone / "dist")
    left = [line for line in text.splitlines() if re.search(r": [EW]: ", line)]
    assert not left and " 0 errors, 0 warnings" in text, \
        "rpmlint errors or warnings not filtered (packaging/rpm/gpuslice.rpmlintrc):\n" + \
        "\n".join(left or [text])


# -- the rpm against the deb ---------------------------------------------------

def _normal(path: str) -> str:
    # Debian 12's packages still ship /lib/systemd (merged /usr makes it
    # /usr/lib); the Python folder is each distribution's own.
    path = re.sub(r"^/lib/", "/usr/lib/", path)
    # Each distribution's Slurm plugin folder (docs/slurm.md).
    path = re.sub(r"^(/usr/lib/[^/]+/slurm-wlm|/usr/lib64/slurm)/", "SLURM_PLUGINS/", path)
    return re.sub(r"^/usr/lib/python3(\.\d+)?/(dist|site)-packages/", "SITE/", path)


def deb_files(deb: Path) -> Dict[str, str]:
    """path -> permissions string (drwxr-xr-x), from dpkg -c."""
    out = {}
    for line in sh(["dpkg", "-c", deb]).stdout.splitlines():
        perms, _owner, _size, _date, _time, name = line.split(None, 5)
        name = name.split(" -> ")[0].rstrip("/")
        out[name[1:] or "/"] = perms
    return out


def rpm_files(rpm: Path) -> Dict[str, str]:
    out = {}
    for line in sh(["rpm", "-qp", "--qf", "[%{FILEMODES:perms} %{FILENAMES}\n]", rpm]).stdout.splitlines():
        perms, name = line.split(" ", 1)
        out[name] = perms
    return out


def _plain(files: Dict[str, str]) -> Dict[str, str]:
    """Non-directories, normalised, without what is not compared."""
    out = {}
    for path, perms in files.items():
        norm = _normal(path)
        if perms.startswith("d") or NOT_COMPARED.search(norm):
            continue
        out[norm] = perms
    return out


def _rpm_scripts(rpm: Path) -> Dict[str, str]:
    text = sh(["rpm", "-qp", "--scripts", rpm]).stdout
    parts = re.split(r"^(\w+) scriptlet \(using [^)]*\):\n", text, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def _deb_script(deb: Path, name: str) -> str:
    return sh(["dpkg-deb", "--info", deb, name]).stdout


def _deb_member(deb: Path, path: str) -> str:
    tar = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True)
    return subprocess.run(["tar", "-xO", "." + path], input=tar.stdout, capture_output=True,
                          check=True).stdout.decode()


def _rpm_member(rpm: Path, path: str) -> str:
    cpio = subprocess.run(["rpm2cpio", str(rpm)], capture_output=True, check=True)
    return subprocess.run(["cpio", "-i", "--quiet", "--to-stdout", "." + path], input=cpio.stdout,
                          capture_output=True, check=True).stdout.decode()


def test_rpm_has_the_debs_layout_and_scriptlets(packages: Packages) -> None:
    deb, rpm = _plain(deb_files(packages.deb)), _plain(rpm_files(packages.rpm))
    sys.stderr.write("deb files (normalised):\n  %s\n" % "\n  ".join(sorted(deb)))
    assert sorted(set(deb) - set(rpm)) == [] and sorted(set(rpm) - set(deb)) == [], \
        "deb only: %s; rpm only: %s" % (sorted(set(deb) - set(rpm)), sorted(set(rpm) - set(deb)))
    assert KEY_FILES <= set(deb), sorted(KEY_FILES - set(deb))
    modes = {p: (deb[p], rpm[p]) for p in deb if deb[p] != rpm[p]}
    assert not modes, "modes differ (deb, rpm): %s" % modes
    for path in ("/usr/bin/gpuslice-hook", "/usr/bin/gpuslice-runtime", "/usr/bin/gpuslice",
                 "/usr/libexec/gpuslice/nvidia-driver-present"):
        assert deb[path] == "-rwxr-xr-x", (path, deb[path])
    assert deb[SHIM] == "-rw-r--r--"
    assert deb["SLURM_PLUGINS/spank_gpuslice.so"] == "-rw-r--r--"
    # The rpm also owns the state folders (the deb's postinst makes them).
    rpm_all = rpm_files(packages.rpm)
    assert rpm_all["/var/lib/gpuslice"] == "drwx------" and "/run/gpuslice" in rpm_all

    # One conffile, the same text, naming the packaged paths.
    conffiles = _deb_script(packages.deb, "conffiles").split()
    assert conffiles == ["/etc/gpuslice/config.yaml"]
    assert sh(["rpm", "-qcp", packages.rpm]).stdout.split() == conffiles
    config = _deb_member(packages.deb, "/etc/gpuslice/config.yaml")
    assert config == _rpm_member(packages.rpm, "/etc/gpuslice/config.yaml")
    doc = yaml.safe_load(config)
    assert (doc["shim_path"], doc["hook_path"], doc["runtime_path"]) == (SHIM, HOOK, RUNTIME)
    assert doc["database"] == "/var/lib/gpuslice/state.db" and doc["state_dir"] == "/run/gpuslice"

    # The same steps at the same points of an install's life.
    scripts = _rpm_scripts(packages.rpm)
    deb_scripts = {n: _deb_script(packages.deb, n) for n in ("postinst", "prerm", "postrm")}
    steps = {  # (rpm scriptlet, deb script): what both must do
        ("postinstall", "postinst"): ["/usr/libexec/gpuslice/nvidia-driver-present",
                                      "gpuslice cdi generate", "install -d -m 0755 /run/gpuslice",
                                      "gpuslice-cdi-refresh.path"],
        ("preuninstall", "prerm"): ["config show --format json",
                                    'rm -f "$dir/gpuslice.yaml" "$dir/gpuslice.json"',
                                    "gpuslice-cdi-refresh.path"],
        ("postuninstall", "postrm"): ["rm -f /etc/cdi/gpuslice.yaml /etc/cdi/gpuslice.json",
                                      "rm -rf /var/lib/gpuslice /run/gpuslice"],
    }
    for (rpm_name, deb_name), needles in steps.items():
        for needle in needles:
            assert needle in scripts[rpm_name], (rpm_name, needle, scripts[rpm_name])
            assert needle in deb_scripts[deb_name], (deb_name, needle, deb_scripts[deb_name])
    # Units: enabled on install, stopped and disabled on removal.
    for unit in UNITS:
        assert "deb-systemd-helper enable '%s'" % unit in deb_scripts["postinst"]
        assert "deb-systemd-helper purge '%s'" % unit in deb_scripts["postrm"]
        assert unit in scripts["postinstall"] and unit in scripts["preuninstall"]
    for unit in ("gpuslice-cdi-refresh.path", "gpuslice-health.service"):
        assert "deb-systemd-invoke stop '%s'" % unit in deb_scripts["prerm"]
        assert "systemctl start %s" % unit in scripts["postinstall"]
    # The watcher runs on after an upgrade as the new version (the rpm's
    # scriptlet restarts it: try-restart, or systemd 254's update helper; the
    # deb's postinst restarts it).
    assert "gpuslice-health.service" in scripts["postuninstall"]
    assert "try-restart" in scripts["postuninstall"] or \
        "mark-restart-system-units" in scripts["postuninstall"]
    # dh_installsystemd's: restart on an upgrade ($2, the old version, set), else start.
    assert "deb-systemd-invoke $_dh_action 'gpuslice-health.service'" in deb_scripts["postinst"]
    assert "_dh_action=restart" in deb_scripts["postinst"]
    # The exporter opens a port: installed, not enabled; stopped on removal and
    # restarted after an upgrade only where it runs.
    exporter = "gpuslice-exporter.service"
    # dh_installsystemd --no-enable: enabled again only where the operator had it
    # enabled (was-enabled), never on a first install.
    assert "deb-systemd-helper debian-installed '%s'" % exporter in deb_scripts["postinst"]
    assert "deb-systemd-helper update-state '%s'" % exporter in deb_scripts["postinst"]
    assert [line for line in deb_scripts["postinst"].splitlines()
            if "deb-systemd-invoke try-restart" in line and exporter in line], \
        deb_scripts["postinst"]
    assert "deb-systemd-invoke stop '%s'" % exporter in deb_scripts["prerm"]
    assert "deb-systemd-helper purge '%s'" % exporter in deb_scripts["postrm"]
    assert exporter in scripts["postinstall"] and exporter in scripts["preuninstall"]
    assert exporter in scripts["postuninstall"]
    preset = packages.clone / "packaging/rpm/50-gpuslice.preset"
    assert "disable %s" % exporter in preset.read_text().splitlines()


# -- installing, using, removing the deb ------------------------------------

def _installed_packages() -> Set[str]:
    out = sh(["dpkg-query", "-W", "-f", "${db:Status-Abbrev} ${Package}\n"]).stdout
    return {line.split()[1] for line in out.splitlines() if line.startswith("ii")}


class Aside:
    """Moves paths out of the way, and puts them back."""

    def __init__(self, store: Path) -> None:
        self.store = store
        self.moved: List[Tuple[str, Path]] = []
        self.created: List[str] = []

    def move(self, path: str) -> None:
        if os.path.lexists(path):
            dest = self.store / str(len(self.moved))
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(path, dest)
            self.moved.append((path, dest))

    def restore(self) -> None:
        for path in reversed(self.created):
            if os.path.isdir(path) and not os.listdir(path):
                os.rmdir(path)
        for path, dest in reversed(self.moved):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            elif os.path.lexists(path):
                os.unlink(path)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            shutil.move(str(dest), path)


_HIDE = r"""set -e
empty=$1; shift
while [ "$1" != -- ]; do mount --bind "$empty" "$1"; shift; done
shift
exec "$@"
"""


class Installed:
    """Runs the installed commands with nothing else to import from: a
    private mount namespace with empty folders over /usr/local and the trees."""

    def __init__(self, empty: Path, hide: Sequence[Path], cwd: Path) -> None:
        self.empty, self.hide, self.cwd = empty, [str(h) for h in hide], cwd

    def run(self, *argv: str, env: Optional[Dict[str, str]] = None,
            check: bool = True) -> subprocess.CompletedProcess:
        clean = {"PATH": SYSTEM_PATH, "LANG": "C.UTF-8", "HOME": "/root", "PYTHONNOUSERSITE": "1"}
        clean.update(env or {})
        return sh(["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", _HIDE,
                   "hide", self.empty, *self.hide, "--", *argv], env=clean, cwd=self.cwd,
                  check=check, timeout=120)


def _apt(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive", PATH=SYSTEM_PATH)
    return sh(["apt-get", "-y", "-q", "-o", "Dpkg::Options::=--force-confnew",
               "-o", "Dpkg::Options::=--force-confdef", *args], env=env, timeout=600)


def _nvml_on_host() -> bool:
    """Whether this host has an NVIDIA driver's NVML, asked in a fresh
    process: this one may hold the fake NVML of an earlier test, which would
    answer for its soname."""
    return subprocess.run(["/usr/bin/python3", "-c", "import ctypes; ctypes.CDLL('libnvidia-ml.so.1')"],
                          env={"PATH": SYSTEM_PATH}, capture_output=True).returncode == 0


def test_deb_installs_works_and_purges_clean(packages: Packages, driver_root: Path,
                                             tmp_path: Path) -> None:
    assert sh(["dpkg-query", "-W", "-f", "${db:Status-Abbrev}", "gpuslice"],
              check=False).stdout[:2] not in ("ii", "rc", "iU", "iF"), \
        "a gpuslice package is installed already: this test installs and purges its own"
    listing = deb_files(packages.deb)
    aside = Aside(tmp_path / "aside")
    for path in STATE:
        aside.move(path)
    for path, perms in listing.items():  # files of no package that the install would replace
        if not perms.startswith("d") and os.path.lexists(path) and \
                sh(["dpkg-query", "-S", path], check=False).returncode != 0:
            aside.move(path)
    dirs_before = {p for p, perms in listing.items() if perms.startswith("d") and os.path.isdir(p)}
    before = _installed_packages()
    try:
        _install_use_remove_purge(packages, listing, dirs_before, driver_root, tmp_path, aside)
    finally:
        try:
            if sh(["dpkg-query", "-W", "-f", "${db:Status-Abbrev}", "gpuslice"],
                  check=False).stdout[:1] in ("i", "r"):
                sh(["dpkg", "--purge", "gpuslice"], check=False)
            pulled = sorted(_installed_packages() - before - {"gpuslice"})
            if pulled:  # the deb's dependencies that this host did not have
                sys.stderr.write("purging what the install pulled in: %s\n" % " ".join(pulled))
                _apt("purge", *pulled)
        finally:
            aside.restore()


def _install_use_remove_purge(packages: Packages, listing: Dict[str, str], dirs_before: Set[str],
                              driver_root: Path, tmp_path: Path, aside: Aside) -> None:
    res = _apt("install", "--no-install-recommends", str(packages.deb))
    if not _nvml_on_host():
        assert "gpuslice: no NVIDIA driver found" in res.stdout + res.stderr, res.stdout
    files = sh(["dpkg", "-L", "gpuslice"]).stdout.split()
    sys.stderr.write("dpkg -L gpuslice:\n  %s\n" % "\n  ".join(files))
    assert set(files) >= {SHIM, HOOK, RUNTIME, "/usr/bin/gpuslice", "/etc/gpuslice/config.yaml"}
    assert os.stat(SHIM).st_mode & 0o777 == 0o644
    assert stat.S_IMODE(os.stat("/var/lib/gpuslice").st_mode) == 0o700
    assert os.path.isdir("/run/gpuslice")
    assert Path("/etc/gpuslice/config.yaml").read_text() == \
        _deb_member(packages.deb, "/etc/gpuslice/config.yaml")
    wants = Path("/etc/systemd/system/multi-user.target.wants")
    for unit in UNITS:
        assert (wants / unit).is_symlink(), "%s is not enabled" % unit
    assert not (wants / "gpuslice-exporter.service").exists(), "the exporter is enabled"

    empty = tmp_path / "empty"
    empty.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    installed = Installed(empty, ["/usr/local", REPO, packages.clone], work)

    # Only the packaged modules and Debian's packages of the dependencies.
    res = installed.run("python3", "-c", "import cdi, ocihook, yaml, click, jsonschema, cffi, "
                        "tomlkit, prometheus_client; print('\\n'.join(m.__file__ for m in (cdi, "
                        "ocihook, yaml, click, jsonschema, cffi, tomlkit, prometheus_client)))")
    for module in res.stdout.split():
        assert module.startswith("/usr/lib/python3/dist-packages/"), res.stdout
    # gpuslice setup's TOML edit, with Debian's tomlkit.
    res = installed.run("gpuslice", "setup", "containerd", "--config", str(work / "config.toml"),
                        "--dry-run")
    assert '+    BinaryName = "%s"' % RUNTIME in res.stdout.splitlines(), res.stdout
    res = installed.run("gpuslice", "config", "show", "--format", "json")
    shown = json.loads(res.stdout)
    assert (shown["shim_path"], shown["hook_path"], shown["runtime_path"]) == (SHIM, HOOK, RUNTIME)
    installed.run("gpuslice", "config", "check", "/etc/gpuslice/config.yaml")
    # One version, pyproject.toml's, in each installed program; runc's follows the runtime's.
    version = re.findall(r'^version = "(.+)"$', (REPO / "pyproject.toml").read_text(), re.M)[0]
    for program in ("gpuslice", HOOK, RUNTIME):
        out = installed.run(program, "--version").stdout
        assert out.startswith("%s version %s\n" % (os.path.basename(program), version)), out
    assert "runc version" in installed.run(RUNTIME, "--version").stdout
    # man finds the packaged pages (install.sh's in /usr/local are hidden here).
    assert installed.run("man", "-w", "gpuslice-resize").stdout == \
        "/usr/share/man/man8/gpuslice-resize.8.gz\n"
    assert installed.run("/usr/libexec/gpuslice/nvidia-driver-present",
                         check=False).returncode == (0 if _nvml_on_host() else 1)

    # The CDI spec from the installed gpuslice, on the fake driver, naming
    # the installed hook and shim; a container through Podman with a slice.
    podman = Podman(tmp_path / "podman")
    try:
        (tmp_path / "host").mkdir()
        host = Host(tmp_path / "host", driver_root, [fake_gpu(0, memory_mib=16384)],
                    spec_dir=podman.cdi_dir)
        text = host.config.read_text()
        for key, stand_in, real in (("shim_path", host.shim, SHIM), ("hook_path", host.hook, HOOK)):
            assert "%s: %s\n" % (key, stand_in) in text
            text = text.replace("%s: %s\n" % (key, stand_in), "%s: %s\n" % (key, real))
        host.config.write_text(text)
        env = {"GPUSLICE_CONFIG": str(host.config), "GPUSLICE_FAKE_GPUS": str(host.gpus_json)}
        installed.run("gpuslice", "cdi", "generate", env=env)
        host_spec = podman.cdi_dir / "gpuslice.yaml"
        hook_args = host.spec_hook("0-4g")
        spec = yaml.safe_load(host_spec.read_text())
        [dev] = [d for d in spec["devices"] if d["name"] == "0-4g"]
        assert {h["path"] for h in dev["containerEdits"]["hooks"]} == {HOOK}
        assert [m["hostPath"] for m in dev["containerEdits"]["mounts"]
                if m["containerPath"] == SHIM] == [SHIM]
        assert hook_args[:3] == ["gpuslice-hook", "create", "--device"]

        # A card-less slice: the installed hook places it, writes the card it
        # chose into the container's state folder, and mounts that.
        res = podman.run(["sh", "-c", "cat /run/gpuslice/placement; echo $GPUSLICE_MEMORY_LIMIT; "
                          "wc -c < %s; head -c 4 %s | od -An -c" % (SHIM, SHIM)],
                         devices=["gpuslice.io/gpu=4g"])
        assert res.returncode == 0, res.stderr
        lines = res.stdout.splitlines()
        assert lines[0] == "0 %s" % fake_gpu(0)["uuid"], res.stdout
        assert lines[1] == "4096MiB"
        assert int(lines[2]) == os.path.getsize(SHIM)
        assert lines[3].split() == ["177", "E", "L", "F"]
        for _ in range(50):  # the poststop hook releases it as the container goes
            status = json.loads(installed.run("gpuslice", "status", "--json", env=env).stdout)
            if not status["cards"][0]["containers"]:
                break
            time.sleep(0.1)
        assert status["cards"][0]["containers"] == [], status

        _check_hooks_d(podman, installed)
    finally:
        podman.cleanup()

    # Remove: the program files go; the spec gpuslice generated goes with
    # them; the configuration and the accountant's data stay until purge.
    if not os.path.isdir("/etc/cdi"):
        os.makedirs("/etc/cdi")
        aside.created.append("/etc/cdi")
    Path("/etc/cdi/gpuslice.yaml").write_text("# a generated spec stands here\n")
    _apt("remove", "gpuslice")
    assert not os.path.exists("/etc/cdi/gpuslice.yaml")
    for path in (SHIM, HOOK, RUNTIME, "/usr/bin/gpuslice"):
        assert not os.path.lexists(path), path
    assert os.path.exists("/etc/gpuslice/config.yaml")
    assert os.path.exists("/var/lib/gpuslice/state.db")

    # Purge: nothing the package listed, nothing it made.
    _apt("purge", "gpuslice")
    left = []
    for path in files:
        if not os.path.lexists(path) or path in ("/.", "/") or path in dirs_before:
            continue  # gone, or a folder that was there before
        if os.path.isdir(path) and not os.path.islink(path) and \
                sh(["dpkg-query", "-S", path], check=False).returncode == 0:
            continue  # a folder that another package installed meanwhile
        left.append(path)
    sys.stderr.write("after purge, of dpkg -L's %d paths: %s\n" % (
        len(files), "remain: %s" % left if left else "none remains"))
    assert not left, left
    for path in ("/var/lib/gpuslice", "/run/gpuslice", "/etc/gpuslice", "/usr/lib/gpuslice",
                 "/usr/libexec/gpuslice"):
        assert not os.path.lexists(path), path
    leftovers = sorted(str(p) for p in Path("/etc/systemd/system").rglob("gpuslice*"))
    assert not leftovers, leftovers


def _check_hooks_d(podman: Podman, installed: Installed) -> None:
    """The installed hooks.d file, read by Podman: containers annotated
    gpuslice.io/request get the poststop release against the default
    database and state dir (made by `gpuslice status` from the installed
    configuration); others do not."""
    installed.run("gpuslice", "status")  # makes /var/lib/gpuslice/state.db
    conf = podman.containers_conf.read_text()
    old = "hooks_dir = %s\n" % json.dumps([str(podman.hooks_dir)])
    assert old in conf
    podman.containers_conf.write_text(conf.replace(old, "hooks_dir = %s\n" % json.dumps([HOOKS_D])))
    ids = {}
    for name, extra in (("annotated", ["--annotation", "gpuslice.io/request=0-4g"]), ("plain", [])):
        res = podman.run(["sleep", "300"], extra_args=["--detach", *extra])
        assert res.returncode == 0, res.stderr
        ids[name] = res.stdout.strip()
        # What the hook removes on release: the container's state folder.
        os.makedirs("/run/gpuslice/containers/%s" % ids[name])
    rm = podman.podman(["rm", "--force", "--time", "0", *ids.values()], timeout=120)
    assert rm.returncode == 0, rm.stderr
    for _ in range(50):  # runc runs poststop hooks as it deletes the container
        if not os.path.exists("/run/gpuslice/containers/%s" % ids["annotated"]):
            break
        time.sleep(0.1)
    assert not os.path.exists("/run/gpuslice/containers/%s" % ids["annotated"]), \
        "the hooks.d poststop hook did not release the annotated container"
    assert os.path.isdir("/run/gpuslice/containers/%s" % ids["plain"])
