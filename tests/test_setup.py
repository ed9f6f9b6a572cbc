"""`gpuslice setup docker|containerd|podman`: each edits one engine's
configuration file, shows the edit as a diff, keeps a backup, and a second run
changes nothing. Every file here lives in tmp_path; none is the host's own."""
from __future__ import annotations

import difflib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import List, Optional

import pytest

from ocihook import config as config_mod
from ocihook.setup import common, containerd, docker, engine_version, podman

try:
    import tomllib  # Python 3.11: CI's
except ImportError:  # pragma: no cover - Python 3.9 and 3.10
    tomllib = None
import tomlkit

BACKUP = common.BACKUP_SUFFIX
CRI = '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes'


class Setup:
    """A configuration file naming a spec dir and a runtime wrapper in tmp_path,
    and `gpuslice --config` run on it as a user runs it."""

    def __init__(self, tmp: Path, spec_dir: Optional[str] = None) -> None:
        self.tmp = tmp
        self.runtime = tmp / "bin" / "gpuslice-runtime"
        self.runtime.parent.mkdir(exist_ok=True)
        self.runtime.write_text("#!/bin/sh\nexec runc \"$@\"\n")
        self.runtime.chmod(0o755)
        self.spec_dir = spec_dir or str(tmp / "cdi")
        self.config = tmp / "config.yaml"
        self.config.write_text(f"spec_dir: {self.spec_dir}\nruntime_path: {self.runtime}\n"
                               f"state_dir: {tmp / 'state'}\ndatabase: {tmp / 'state.db'}\n")

    def cfg(self) -> config_mod.Config:
        return config_mod.load(str(self.config))

    def run(self, *args: str, path: Optional[str] = None) -> subprocess.CompletedProcess:
        """path: the PATH to run it with (where it finds dockerd and containerd)."""
        env = dict(os.environ, PATH=path) if path is not None else None
        gpuslice = shutil.which("gpuslice") or "gpuslice"
        return subprocess.run([gpuslice, "--config", str(self.config), "setup", *args],
                              capture_output=True, text=True, timeout=60, env=env)


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    return Setup(tmp_path)


def added_lines(old: str, new: str) -> List[str]:
    """The lines new adds to old; fails if it removes or changes any."""
    ops = list(difflib.ndiff(old.splitlines(), new.splitlines()))
    assert not [line for line in ops if line.startswith("- ")], "\n".join(ops)
    return [line[2:] for line in ops if line.startswith("+ ")]


def one_error_line(res: subprocess.CompletedProcess, *words: str) -> str:
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert res.stdout == ""
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuslice: error: "), res.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def snapshot(path: Path) -> tuple:
    st = path.stat()
    return path.read_bytes(), st.st_mtime_ns, st.st_ino


# -- docker -------------------------------------------------------------------------

DAEMON_JSON = """{
    "log-level": "warn",
    "runtimes": {
        "other": {"path": "/usr/sbin/runc", "runtimeArgs": ["--debug"]}
    },
    "storage-driver": "overlay2"
}
"""


def test_docker_merges_into_daemon_json_keeping_other_keys_and_runtimes(setup: Setup) -> None:
    daemon = setup.tmp / "daemon.json"
    daemon.write_text(DAEMON_JSON)
    res = setup.run("docker", "--daemon-json", str(daemon))
    assert res.returncode == 0, res.stderr
    doc = json.loads(daemon.read_text())
    assert list(doc) == ["log-level", "runtimes", "storage-driver"]
    assert doc["log-level"] == "warn" and doc["storage-driver"] == "overlay2"
    assert doc["runtimes"] == {
        "other": {"path": "/usr/sbin/runc", "runtimeArgs": ["--debug"]},
        "gpuslice": {"path": str(setup.runtime)},
    }
    # Only lines added, in the file's own layout: the other runtime's line
    # gains its comma, and nothing else is rewritten.
    old_lines = DAEMON_JSON.splitlines()
    new_lines = daemon.read_text().splitlines()
    assert new_lines[:3] == old_lines[:3] and new_lines[-2:] == old_lines[-2:]
    assert new_lines[3] == old_lines[3] + ","
    assert new_lines[4] == '        "gpuslice": {'
    # The diff on stdout is what was done: applying it to the old file gives the new.
    assert res.stdout.startswith(f"--- {daemon}\n+++ {daemon}\n@@ ")
    assert f'+            "path": "{setup.runtime}"' in res.stdout.splitlines()
    assert (setup.tmp / f"daemon.json{BACKUP}").read_text() == DAEMON_JSON
    assert "systemctl reload docker" in res.stderr
    assert "docker run --runtime gpuslice -e GPUSLICE=0-4g" in res.stderr


def test_docker_dry_run_writes_nothing(setup: Setup) -> None:
    daemon = setup.tmp / "daemon.json"
    daemon.write_text(DAEMON_JSON)
    before = snapshot(daemon)
    res = setup.run("docker", "--daemon-json", str(daemon), "--dry-run")
    assert res.returncode == 0, res.stderr
    assert '+        "gpuslice": {' in res.stdout.splitlines()
    assert "dry run" in res.stderr
    assert snapshot(daemon) == before
    assert sorted(os.listdir(setup.tmp)) == ["bin", "config.yaml", "daemon.json"]
    # Nor is a missing file created.
    missing = setup.tmp / "docker" / "daemon.json"
    res = setup.run("docker", "--daemon-json", str(missing), "--dry-run")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith(f"--- /dev/null\n+++ {missing}\n")
    assert not missing.parent.exists()


def test_docker_second_run_changes_nothing_and_backs_up_once(setup: Setup) -> None:
    daemon = setup.tmp / "daemon.json"
    backup = setup.tmp / f"daemon.json{BACKUP}"
    daemon.write_text(DAEMON_JSON)
    args = ("docker", "--daemon-json", str(daemon), "--real-runtime", str(setup.runtime))
    assert setup.run(*args).returncode == 0
    after_first, backup_first = snapshot(daemon), snapshot(backup)
    res = setup.run(*args)
    assert res.returncode == 0, res.stderr
    assert res.stdout == ""
    assert "already set up; nothing changed" in res.stderr
    assert "systemctl reload" not in res.stderr
    assert snapshot(daemon) == after_first and snapshot(backup) == backup_first
    assert backup.read_text() == DAEMON_JSON

    # A run that does change the file again keeps the file as it was just
    # before, so that the backup undoes the latest change.
    assert setup.run("docker", "--daemon-json", str(daemon), "--name", "slices").returncode == 0
    assert backup.read_bytes() == after_first[0]
    assert set(json.loads(daemon.read_text())["runtimes"]) == {"other", "gpuslice", "slices"}


def test_docker_replaces_an_entry_of_the_same_name_that_differs(setup: Setup) -> None:
    daemon = setup.tmp / "daemon.json"
    daemon.write_text('{"runtimes": {"gpuslice": {"path": "/opt/old/gpuslice-runtime"}, '
                      '"other": {"path": "/usr/sbin/runc"}}}\n')
    res = setup.run("docker", "--daemon-json", str(daemon), "--real-runtime", "/usr/sbin/runc")
    assert res.returncode == 0, res.stderr
    assert '-{"runtimes": {"gpuslice": {"path": "/opt/old/gpuslice-runtime"}, ' in res.stdout
    doc = json.loads(daemon.read_text())
    assert list(doc["runtimes"]) == ["gpuslice", "other"]
    assert doc["runtimes"]["gpuslice"] == {
        "path": str(setup.runtime), "runtimeArgs": ["--gpuslice-runtime", "/usr/sbin/runc"]}


def test_docker_creates_a_missing_file(setup: Setup) -> None:
    daemon = setup.tmp / "etc-docker" / "daemon.json"
    res = setup.run("docker", "--daemon-json", str(daemon), "--name", "gs")
    assert res.returncode == 0, res.stderr
    assert json.loads(daemon.read_text()) == {"runtimes": {"gs": {"path": str(setup.runtime)}}}
    assert daemon.stat().st_mode & 0o777 == 0o644
    assert not (daemon.parent / f"daemon.json{BACKUP}").exists()
    assert f"created {daemon}" in res.stderr
    assert "docker run --runtime gs " in res.stderr


def test_docker_refuses_invalid_json_and_leaves_it(setup: Setup) -> None:
    daemon = setup.tmp / "daemon.json"
    daemon.write_text('{\n  "log-level": "warn"\n  "debug": true\n}\n')
    before = snapshot(daemon)
    line = one_error_line(setup.run("docker", "--daemon-json", str(daemon)),
                          str(daemon), "line 3, column 3", "delimiter", "nothing written")
    assert line.startswith(f"gpuslice: error: {daemon}: ")
    assert snapshot(daemon) == before
    assert not (setup.tmp / f"daemon.json{BACKUP}").exists()
    # Valid JSON that is no daemon.json either.
    daemon.write_text('{"runtimes": ["gpuslice"]}')
    one_error_line(setup.run("docker", "--daemon-json", str(daemon)), '"runtimes" is an array')
    daemon.write_text('[]')
    one_error_line(setup.run("docker", "--daemon-json", str(daemon)), "top level is an array")


@pytest.mark.parametrize("engine, option", [("docker", "--daemon-json"),
                                            ("containerd", "--config"),
                                            ("podman", "--containers-conf")])
def test_a_fifo_or_a_device_for_the_file_is_refused_not_waited_on(setup: Setup, engine: str,
                                                                  option: str) -> None:
    fifo = setup.tmp / "engine.conf"
    os.mkfifo(fifo)
    one_error_line(setup.run(engine, option, str(fifo), "--dry-run"), str(fifo), "a FIFO")
    link = setup.tmp / "zero.conf"
    link.symlink_to("/dev/zero")
    one_error_line(setup.run(engine, option, str(link), "--dry-run"), str(link),
                   "a character device")


def test_docker_checks_its_options(setup: Setup) -> None:
    daemon = setup.tmp / "daemon.json"
    one_error_line(setup.run("docker", "--daemon-json", str(setup.tmp)), "a folder, not a file")
    one_error_line(setup.run("docker", "--daemon-json", str(setup.config / "daemon.json")),
                   f"{setup.config} is not a folder")
    one_error_line(setup.run("docker", "--daemon-json", str(daemon), "--real-runtime", "runc"),
                   "--real-runtime runc", "absolute path")
    one_error_line(setup.run("docker", "--daemon-json", str(daemon), "--real-runtime",
                             str(setup.tmp / "nope")), "no such file")
    one_error_line(setup.run("docker", "--daemon-json", str(daemon), "--real-runtime",
                             str(setup.config)), "not executable")
    one_error_line(setup.run("docker", "--daemon-json", str(daemon), "--name", "runc"),
                   "reserves")
    one_error_line(setup.run("docker", "--daemon-json", str(daemon), "--name", "a b"),
                   "--name 'a b'")
    assert not daemon.exists()


def test_docker_keeps_mode_and_writes_through_a_symlink(setup: Setup) -> None:
    real = setup.tmp / "real.json"
    real.write_text("{}\n")
    real.chmod(0o600)
    link = setup.tmp / "daemon.json"
    link.symlink_to(real)
    res = setup.run("docker", "--daemon-json", str(link))
    assert res.returncode == 0, res.stderr
    assert link.is_symlink()
    assert json.loads(real.read_text())["runtimes"] == {"gpuslice": {"path": str(setup.runtime)}}
    assert real.stat().st_mode & 0o777 == 0o600
    backup = setup.tmp / f"real.json{BACKUP}"
    assert backup.read_text() == "{}\n" and backup.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("text", [
    '{"debug":true}',
    '{\n\t"debug": true\n}\n',
    '{"runtimes": {}}\n',
    '{\n  "runtimes": {\n  }\n}\n',
    '{\n  "runtimes": {\n    "gpuslice": {\n      "path": "/old"\n    }\n  },\n  "x": [1, 2]\n}\n',
    '  \n',
])
def test_docker_edit_in_any_layout(text: str) -> None:
    entry = docker.runtime_entry("/usr/bin/gpuslice-runtime", "/usr/bin/crun")
    new = docker.edit(text, "daemon.json", "gpuslice", entry)
    doc = json.loads(new)
    assert doc["runtimes"]["gpuslice"] == {
        "path": "/usr/bin/gpuslice-runtime", "runtimeArgs": ["--gpuslice-runtime", "/usr/bin/crun"]}
    old = json.loads(text) if text.strip() else {}
    assert {k: v for k, v in doc.items() if k != "runtimes"} == \
        {k: v for k, v in old.items() if k != "runtimes"}
    assert docker.edit(new, "daemon.json", "gpuslice", entry) == new


# A real dockerd 20.10 starts with what `gpuslice setup docker` writes and runs
# containers through it: tests/test_runtime_e2e.py (Docker 20 has no --validate).


# -- containerd ---------------------------------------------------------------------

# The shape of `containerd config default` (1.6), cut short: other plugins,
# the CRI plugin with its runc runtime.
CONTAINERD_TOML = """\
disabled_plugins = []
root = "/var/lib/containerd"
version = 2

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins]

  [plugins."io.containerd.gc.v1.scheduler"]
    deletion_threshold = 0
    pause_threshold = 0.02

  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "registry.k8s.io/pause:3.6"

    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "runc"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes]

        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
          runtime_type = "io.containerd.runc.v2"

          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
            BinaryName = ""
            SystemdCgroup = false

      [plugins."io.containerd.grpc.v1.cri".containerd.untrusted_workload_runtime]
        runtime_type = ""

  [plugins."io.containerd.internal.v1.opt"]
    path = "/opt/containerd"
"""


def toml_loads(text: str) -> dict:
    """The document as a TOML reader other than the one the edits use reads
    it: Python 3.11's tomllib; tomlkit's on an older Python."""
    return tomllib.loads(text) if tomllib is not None else tomlkit.parse(text).unwrap()


def read_toml(path: Path) -> dict:
    return toml_loads(path.read_text())


def runtime_of(doc: dict, name: str = "gpuslice") -> dict:
    return doc["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"][name]


def test_containerd_new_file(setup: Setup) -> None:
    conf = setup.tmp / "containerd" / "config.toml"
    res = setup.run("containerd", "--config", str(conf))
    assert res.returncode == 0, res.stderr
    assert conf.read_text() == (
        "version = 2\n"
        "\n"
        f"{CRI}.gpuslice]\n"
        f'  runtime_type = "io.containerd.runc.v2"\n'
        f"  {CRI}.gpuslice.options]\n"
        f'    BinaryName = "{setup.runtime}"\n')
    doc = read_toml(conf)
    assert doc["version"] == 2
    assert runtime_of(doc) == {"runtime_type": "io.containerd.runc.v2",
                               "options": {"BinaryName": str(setup.runtime)}}
    assert "systemctl restart containerd" in res.stderr
    assert f"ctr run --runc-binary {setup.runtime} " in res.stderr


def test_containerd_existing_file_with_other_plugins(setup: Setup) -> None:
    conf = setup.tmp / "config.toml"
    conf.write_text(CONTAINERD_TOML)
    res = setup.run("containerd", "--config", str(conf), "--name", "gs")
    assert res.returncode == 0, res.stderr
    new = conf.read_text()
    # Added after the runc runtime, indented as its neighbours, nothing else touched.
    assert sorted(added_lines(CONTAINERD_TOML, new)) == sorted([
        "",
        f'        {CRI}.gs]',
        '          runtime_type = "io.containerd.runc.v2"',
        f'          {CRI}.gs.options]',
        f'            BinaryName = "{setup.runtime}"',
    ])
    assert new.index(".runtimes.runc.options]") < new.index(".runtimes.gs]") \
        < new.index("untrusted_workload_runtime]")
    assert (setup.tmp / f"config.toml{BACKUP}").read_text() == CONTAINERD_TOML
    doc = read_toml(conf)
    assert runtime_of(doc, "gs")["options"] == {"BinaryName": str(setup.runtime)}
    assert runtime_of(doc, "runc")["options"] == {"BinaryName": "", "SystemdCgroup": False}
    assert doc["plugins"]["io.containerd.gc.v1.scheduler"]["pause_threshold"] == 0.02
    # Twice: nothing more.
    res = setup.run("containerd", "--config", str(conf), "--name", "gs")
    assert res.returncode == 0 and res.stdout == "" and "already set up" in res.stderr
    assert conf.read_text() == new


def test_containerd_existing_block_updated(setup: Setup) -> None:
    conf = setup.tmp / "config.toml"
    text = (CONTAINERD_TOML.replace(
        "      [plugins.\"io.containerd.grpc.v1.cri\".containerd.untrusted_workload_runtime]",
        f"        {CRI}.gpuslice]\n"
        '          runtime_type = "io.containerd.runc.v2"\n'
        f"          {CRI}.gpuslice.options]\n"
        "            BinaryName = '/opt/old/gpuslice-runtime'  # from an older install\n"
        "            SystemdCgroup = true\n\n"
        "      [plugins.\"io.containerd.grpc.v1.cri\".containerd.untrusted_workload_runtime]"))
    conf.write_text(text)
    res = setup.run("containerd", "--config", str(conf))
    assert res.returncode == 0, res.stderr
    changed = [line for line in res.stdout.splitlines()
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert changed == [
        "-            BinaryName = '/opt/old/gpuslice-runtime'  # from an older install",
        f'+            BinaryName = "{setup.runtime}"  # from an older install',
    ]
    doc = read_toml(conf)
    assert runtime_of(doc)["options"] == {"BinaryName": str(setup.runtime),
                                          "SystemdCgroup": True}


GPUSLICE_TABLES = (f'{CRI}.gpuslice]\n'
                   '  runtime_type = "io.containerd.runc.v2"\n'
                   f'  {CRI}.gpuslice.options]\n'
                   '    BinaryName = "/usr/bin/gpuslice-runtime"\n')


@pytest.mark.parametrize("text, expected", [
    # The runtime's table without its options: they follow it, indented.
    (f'version = 2\n{CRI}.gpuslice]\n  runtime_type = "io.containerd.runsc.v1"\n',
     f"version = 2\n{GPUSLICE_TABLES}"),
    # The options without the runtime's own table, nor its type: the header
    # and the type come before them.
    (f'version = 2\n{CRI}.gpuslice.options]\n  BinaryName = "/x"\n',
     f'version = 2\n{CRI}.gpuslice]\n  runtime_type = "io.containerd.runc.v2"\n'
     f'{CRI}.gpuslice.options]\n  BinaryName = "/usr/bin/gpuslice-runtime"\n'),
    # A key added after the table's others (so before the blank lines that
    # end it), indented as they are.
    (f'version = 2\n{CRI}.gpuslice.options]\n      Root = "/r"\n\n\n[other]\n',
     f'version = 2\n{CRI}.gpuslice]\n  runtime_type = "io.containerd.runc.v2"\n'
     f'{CRI}.gpuslice.options]\n      Root = "/r"\n'
     '      BinaryName = "/usr/bin/gpuslice-runtime"\n\n\n[other]\n'),
    # A runtime after the others, indented as they are, a blank line before
    # it; the blank lines that ended the last one now end it.
    (f'version = 2\n\n  {CRI}.runc]\n    runtime_type = "x"\n\n\n[other]\n',
     f'version = 2\n\n  {CRI}.runc]\n    runtime_type = "x"\n\n'
     + "".join("  " + line for line in GPUSLICE_TABLES.splitlines(True)) + "\n\n[other]\n"),
    # An empty file, and one of comments only.
    ("", f"version = 2\n\n{GPUSLICE_TABLES}"),
    ("# containerd\n", f"# containerd\nversion = 2\n\n{GPUSLICE_TABLES}"),
])
def test_containerd_edit_lays_out_what_it_adds(text: str, expected: str) -> None:
    new = containerd.edit(text, "config.toml", "gpuslice", "/usr/bin/gpuslice-runtime")
    assert new == expected
    assert containerd.edit(new, "config.toml", "gpuslice", "/usr/bin/gpuslice-runtime") == new
    doc = toml_loads(new)
    assert doc["version"] == 2
    assert runtime_of(doc)["runtime_type"] == "io.containerd.runc.v2"
    assert runtime_of(doc)["options"]["BinaryName"] == "/usr/bin/gpuslice-runtime"


# A `[` in a list or a multi-line string is no table header; quoted keys and
# spaces in a header; no newline at the end.
TRICKY_TOML = "".join([
    'version = 2\n',
    '[plugins."io.containerd.grpc.v1.cri"]\n',
    '  pod_annotations = [\n',
    '    "[not.a.header]",\n',
    '  ]\n',
    '  note = """\n',
    '[also.not.a.header]\n',
    '"""\n',
    f'{CRI}.gpuslice]\n',
    '  runtime_type = "io.containerd.runc.v2"  # [x]\n',
    "  [plugins.'io.containerd.grpc.v1.cri' . containerd.runtimes.gpuslice.options]\n",
    '    BinaryName = "/g"',
])


@pytest.mark.parametrize("text", [CONTAINERD_TOML, TRICKY_TOML], ids=["default", "tricky"])
def test_containerd_edit_in_any_layout(text: str) -> None:
    new = containerd.edit(text, "config.toml", "gpuslice", "/g")
    assert new.count('BinaryName = "/g"') == 1
    assert runtime_of(toml_loads(new))["options"]["BinaryName"] == "/g"
    if text == TRICKY_TOML:
        assert new == text  # already set up, no final newline: left as it is
        assert toml_loads(text)["plugins"]["io.containerd.grpc.v1.cri"][
            "pod_annotations"] == ["[not.a.header]"]
        new = containerd.edit(text, "config.toml", "gpuslice", "/h")
        assert new == text.replace('"/g"', '"/h"') + "\n"  # that line alone


@pytest.mark.parametrize("text, words", [
    ('[plugins.cri.containerd]\n  snapshotter = "overlayfs"\n', ["no `version = 2` line",
                                                                 "version 1"]),
    ('version = 1\n[plugins.cri]\n', ["version = 1", "version 2 files only"]),
    ('version = 3\n', ["containerd 2", "enable_cdi"]),
    ('version = 2\n[plugins\n', ["line 2, column 9: "]),
    ('version = 2\nversion = 2\n', ["line 2, column 1: ", '"version" already exists']),
    ('version = "2"\n', ["line 1", 'version = "2": not a number']),
    ('\nversion = true\n', ["line 2", "version = true: not a number"]),
    (f'version = 2\n\n[{CRI}.gpuslice]]\n', ["line 3: ", ".gpuslice] is an array of tables"]),
    ('version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n  runtimes = {}\n',
     ["line 3: ", ".containerd.runtimes is an inline table here"]),
    ('version = 2\n[plugins]\n  "io.containerd.grpc.v1.cri" = 1\n',
     ['line 3: plugins."io.containerd.grpc.v1.cri" is a value here']),
])
def test_containerd_refuses_what_it_cannot_edit(setup: Setup, text: str, words: List[str]) -> None:
    conf = setup.tmp / "config.toml"
    conf.write_text(text)
    before = snapshot(conf)
    one_error_line(setup.run("containerd", "--config", str(conf)), str(conf), *words)
    assert snapshot(conf) == before
    assert not (setup.tmp / f"config.toml{BACKUP}").exists()


@pytest.mark.parametrize("text", [
    # Dotted keys that tomlkit does not render as the tables they stand for.
    '[plugins."io.containerd.grpc.v1.cri".containerd]\n  runtimes.gpuslice.runtime_type = "x"\n',
    # Tables out of order, on which tomlkit 0.11 and 0.15 fail (AttributeError).
    '[plugins]\n  [plugins."x".containerd.runtimes]\n  [plugins."y".containerd.runtimes.runc]\n'
    '  [plugins."x".containerd.runtimes.runc.options]\n',
])
def test_containerd_edit_right_or_refused(setup: Setup, text: str) -> None:
    """What tomlkit reads or renders otherwise than TOML means is refused with
    one line (the tables to add by hand, where it got that far), never
    written wrong; should a later tomlkit get it right, the edit must hold."""
    conf = setup.tmp / "config.toml"
    conf.write_text("version = 2\n" + text)
    res = setup.run("containerd", "--config", str(conf))
    if res.returncode == 0:
        assert runtime_of(read_toml(conf))["options"]["BinaryName"] == str(setup.runtime)
    else:
        one_error_line(res, str(conf), "nothing written")
        assert conf.read_text() == "version = 2\n" + text


def test_containerd_checks_its_options(setup: Setup) -> None:
    conf = setup.tmp / "config.toml"
    one_error_line(setup.run("containerd", "--config", str(conf), "--name", "a.b"), "--name 'a.b'")
    one_error_line(setup.run("containerd", "--config", str(conf), "--name", "runc"),
                   "default runtime")
    one_error_line(setup.run("containerd", "--config", str(setup.tmp)), "a folder, not a file")
    assert not conf.exists()


def test_containerd_warns_when_cri_is_disabled(setup: Setup) -> None:
    conf = setup.tmp / "config.toml"
    conf.write_text('version = 2\ndisabled_plugins = ["io.containerd.grpc.v1.cri"]\n')
    res = setup.run("containerd", "--config", str(conf), "--dry-run")
    assert res.returncode == 0, res.stderr
    assert "disables the CRI plugin" in res.stderr
    assert conf.read_text() == 'version = 2\ndisabled_plugins = ["io.containerd.grpc.v1.cri"]\n'


def test_containerd_reads_the_result(setup: Setup) -> None:
    conf = setup.tmp / "config.toml"
    conf.write_text(CONTAINERD_TOML)
    assert setup.run("containerd", "--config", str(conf)).returncode == 0
    binary = shutil.which("containerd")
    if binary is None:
        pytest.skip("containerd is not installed: the file was not read by containerd")
    res = subprocess.run([binary, "--config", str(conf), "config", "dump"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert f'BinaryName = "{setup.runtime}"' in res.stdout


# -- podman ---------------------------------------------------------------------------

# The edits below are for a Podman that reads cdi_spec_dirs (4.4 and later);
# the machine's own Podman may be older.
NEW_PODMAN = ("--podman-version", "5.4")


def test_podman_adds_the_spec_dir(setup: Setup) -> None:
    conf = setup.tmp / "containers.conf"
    res = setup.run("podman", "--containers-conf", str(conf), *NEW_PODMAN)
    assert res.returncode == 0, res.stderr
    assert conf.read_text() == (
        f'[engine]\ncdi_spec_dirs = ["/etc/cdi", "/var/run/cdi", "{setup.spec_dir}"]\n')
    assert "podman run --device gpuslice.io/gpu=0-4g" in res.stderr
    res = setup.run("podman", "--containers-conf", str(conf), *NEW_PODMAN)
    assert res.returncode == 0 and res.stdout == ""
    assert "already reads" in res.stderr


@pytest.mark.parametrize("spec_dir", ["/etc/cdi", "/var/run/cdi", "/etc/cdi/"])
def test_podman_not_needed(tmp_path: Path, spec_dir: str) -> None:
    setup = Setup(tmp_path, spec_dir=spec_dir)
    conf = tmp_path / "containers.conf"
    res = setup.run("podman", "--containers-conf", str(conf), *NEW_PODMAN)
    assert res.returncode == 0, res.stderr
    assert res.stdout == ""
    assert f"podman already reads {spec_dir}" in res.stderr
    assert not conf.exists()


def test_podman_engine_table_added_beside_other_tables(setup: Setup) -> None:
    conf = setup.tmp / "containers.conf"
    text = ('[containers]\nulimits = ["nofile=1024:1024"]\n\n'
            '[engine.runtimes]\nrunc = ["/usr/sbin/runc"]\n')
    conf.write_text(text)
    res = setup.run("podman", "--containers-conf", str(conf), *NEW_PODMAN)
    assert res.returncode == 0, res.stderr
    assert added_lines(text, conf.read_text()) == [
        "[engine]", f'cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi", "{setup.spec_dir}"]', ""]
    doc = read_toml(conf)
    assert doc["engine"]["runtimes"] == {"runc": ["/usr/sbin/runc"]}
    assert doc["engine"]["cdi_spec_dirs"][-1] == setup.spec_dir


@pytest.mark.parametrize("text, expected", [
    ('[engine]\ncgroup_manager = "cgroupfs"\ncdi_spec_dirs = ["/opt/cdi"]  # site\n',
     '[engine]\ncgroup_manager = "cgroupfs"\ncdi_spec_dirs = ["/opt/cdi", "{d}"]  # site\n'),
    ("[engine]\ncdi_spec_dirs = [\n    '/opt/cdi',\n    \"/etc/cdi\"\n]\nnum_locks = 2048\n",
     '[engine]\ncdi_spec_dirs = [\n    "/opt/cdi",\n    "/etc/cdi",\n    "{d}",\n]\n'
     'num_locks = 2048\n'),
])
def test_podman_existing_cdi_spec_dirs_extended(setup: Setup, text: str, expected: str) -> None:
    conf = setup.tmp / "containers.conf"
    conf.write_text(text)
    res = setup.run("podman", "--containers-conf", str(conf), *NEW_PODMAN)
    assert res.returncode == 0, res.stderr
    assert conf.read_text() == expected.replace("{d}", setup.spec_dir)
    assert (setup.tmp / f"containers.conf{BACKUP}").read_text() == text
    doc = read_toml(conf)
    assert setup.spec_dir in doc["engine"]["cdi_spec_dirs"]


def test_podman_cdi_spec_dirs_without_the_default_dir(tmp_path: Path) -> None:
    """A cdi_spec_dirs that leaves /etc/cdi out hides it from Podman: ours is added."""
    setup = Setup(tmp_path, spec_dir="/etc/cdi")
    conf = tmp_path / "containers.conf"
    conf.write_text('[engine]\ncdi_spec_dirs = ["/opt/cdi"]\n')
    res = setup.run("podman", "--containers-conf", str(conf), "--dry-run", *NEW_PODMAN)
    assert res.returncode == 0, res.stderr
    assert '+cdi_spec_dirs = ["/opt/cdi", "/etc/cdi"]' in res.stdout.splitlines()
    assert conf.read_text() == '[engine]\ncdi_spec_dirs = ["/opt/cdi"]\n'


@pytest.mark.parametrize("version", ["4.1", "4.3"])
def test_podman_before_4_4_with_a_spec_dir_it_cannot_read(setup: Setup, version: str) -> None:
    """Podman 4.1-4.3 ignore cdi_spec_dirs: one line that says what to do, and
    nothing written."""
    conf = setup.tmp / "containers.conf"
    res = setup.run("podman", "--containers-conf", str(conf), "--podman-version", version)
    line = one_error_line(res, f"podman {version} reads CDI specs only from /etc/cdi and "
                          f"/var/run/cdi (cdi_spec_dirs came with 4.4), not from spec_dir "
                          f"{setup.spec_dir}: set spec_dir: /etc/cdi in ")
    assert "run `gpuslice cdi generate`, or upgrade Podman; nothing written" in line
    assert not conf.exists()


@pytest.mark.parametrize("spec_dir", ["/etc/cdi", "/var/run/cdi"])
def test_podman_4_3_with_a_default_spec_dir(tmp_path: Path, spec_dir: str) -> None:
    """A cdi_spec_dirs that 4.4 would read is no matter to 4.3: it reads its defaults."""
    setup = Setup(tmp_path, spec_dir=spec_dir)
    conf = tmp_path / "containers.conf"
    conf.write_text('[engine]\ncdi_spec_dirs = ["/opt/cdi"]\n')
    res = setup.run("podman", "--containers-conf", str(conf), "--podman-version", "4.3")
    assert res.returncode == 0, res.stderr
    assert f"nothing to do: podman 4.3 reads {spec_dir}" in res.stderr and res.stdout == ""
    assert conf.read_text() == '[engine]\ncdi_spec_dirs = ["/opt/cdi"]\n'


def test_podman_before_4_1_is_told_to_upgrade(setup: Setup) -> None:
    conf = setup.tmp / "containers.conf"
    res = setup.run("podman", "--containers-conf", str(conf), "--podman-version", "4.0")
    one_error_line(res, "podman 4.0 applies no CDI specs of cdiVersion 0.5.0 and later "
                   "(Podman 4.1 is the first that does): upgrade Podman; nothing written")
    assert not conf.exists()


def test_podman_version_is_read_from_podman(setup: Setup) -> None:
    """This machine's Podman, asked as setup asks it: its own version's path."""
    found = subprocess.run(["podman", "--version"], capture_output=True, text=True,
                           timeout=60).stdout
    version = engine_version.parse_podman(found)
    assert version is not None, found
    conf = setup.tmp / "containers.conf"
    res = setup.run("podman", "--containers-conf", str(conf), "--dry-run")
    if version < podman.FIRST_SPEC_DIRS:
        assert res.returncode == 2 and "reads CDI specs only from" in res.stderr, res.stderr
    else:
        assert res.returncode == 0 and "+cdi_spec_dirs" in res.stdout, res.stderr


@pytest.mark.parametrize("text, words", [
    ('[engine]\ncdi_spec_dirs = "/opt/cdi"\n[engine\n', ["line 3, column 8: "]),
    ('[engine]\ncdi_spec_dirs = "/opt/cdi"\n', ["line 2: cdi_spec_dirs is not a list of strings"]),
    ('[engine]\ncdi_spec_dirs = [\n  "/opt/cdi",\n  2,\n]\n',
     ["line 2: ", "not a list of strings"]),
    ('[containers]\n[[engine]]\n', ["line 2: [engine] is an array of tables here"]),
    ('engine = "podman"\n', ["line 1: engine is a value here"]),
])
def test_podman_refuses_what_it_cannot_edit(setup: Setup, text: str, words: List[str]) -> None:
    conf = setup.tmp / "containers.conf"
    conf.write_text(text)
    before = snapshot(conf)
    one_error_line(setup.run("podman", "--containers-conf", str(conf), *NEW_PODMAN), str(conf), *words,
                   "nothing written")
    assert snapshot(conf) == before
    assert not (setup.tmp / f"containers.conf{BACKUP}").exists()


@pytest.mark.parametrize("text, expected", [
    ("", '[engine]\ncdi_spec_dirs = ["/etc/cdi", "/var/run/cdi", "/srv/cdi"]\n'),
    ("[containers]\n",
     '[containers]\n\n[engine]\ncdi_spec_dirs = ["/etc/cdi", "/var/run/cdi", "/srv/cdi"]\n'),
    ('[engine]\ncdi_spec_dirs = ["/opt/cdi"]\n',
     '[engine]\ncdi_spec_dirs = ["/opt/cdi", "/srv/cdi"]\n'),
    # Spread over lines: one dir a line, as indented as the first.
    ('[engine]\n  cdi_spec_dirs = [\n    "/opt/cdi",  # site\n  ]\n',
     '[engine]\n  cdi_spec_dirs = [\n    "/opt/cdi",\n    "/srv/cdi",\n]\n'),
    # Added after the table's other keys, indented as they are.
    ('[engine]\n  num_locks = 2048\n  [engine.runtimes]\n  runc = ["/usr/sbin/runc"]\n',
     '[engine]\n  num_locks = 2048\n'
     '  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi", "/srv/cdi"]\n'
     '  [engine.runtimes]\n  runc = ["/usr/sbin/runc"]\n'),
    # Dotted keys.
    ('engine.cdi_spec_dirs = ["/opt/cdi"]\n', 'engine.cdi_spec_dirs = ["/opt/cdi", "/srv/cdi"]\n'),
])
def test_podman_edit_in_any_layout(text: str, expected: str) -> None:
    new = podman.edit(text, "containers.conf", "/srv/cdi")
    assert new == expected
    assert podman.edit(new, "containers.conf", "/srv/cdi") == new
    assert podman.spec_dirs(new, "containers.conf")[0][-1] == "/srv/cdi"
    assert toml_loads(new)["engine"]["cdi_spec_dirs"][-1] == "/srv/cdi"


# -- the command line -------------------------------------------------------------------

def test_help_shows_the_default_files() -> None:
    for engine, default in (("docker", docker.DAEMON_JSON),
                            ("containerd", containerd.CONFIG_TOML),
                            ("podman", podman.CONTAINERS_CONF)):
        res = subprocess.run(["gpuslice", "setup", engine, "--help"], capture_output=True,
                             text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        assert default in " ".join(res.stdout.split()), res.stdout


def test_functions_return_the_status(setup: Setup, capsys: pytest.CaptureFixture) -> None:
    conf = setup.tmp / "config.toml"
    assert containerd.setup(setup.cfg(), str(conf), dry_run=True) == 0
    out = capsys.readouterr()
    assert out.out.startswith(f"--- /dev/null\n+++ {conf}\n") and not conf.exists()
    with pytest.raises(SystemExit) as exc:
        docker.setup(setup.cfg(), str(setup.tmp / "d.json"), name="runc")
    assert exc.value.code == 2


def test_config_runtime_path_default_and_key(tmp_path: Path) -> None:
    import sysconfig

    assert config_mod.Config().runtime_path == os.path.join(sysconfig.get_path("scripts"),
                                                            "gpuslice-runtime")
    path = tmp_path / "c.yaml"
    path.write_text("runtime_path: relative/gpuslice-runtime\n")
    with pytest.raises(config_mod.ConfigError, match="runtime_path"):
        config_mod.check_file(str(path))
    path.write_text("runtime_path: /opt/gpuslice-runtime\n")
    assert config_mod.check_file(str(path)).to_dict()["runtime_path"] == "/opt/gpuslice-runtime"



# -- the engine's version picks the path ---------------------------------------

@pytest.mark.parametrize("printed, expected", [
    ("Docker version 20.10.24+dfsg1, build 297e128", (20, 10)),
    ("Docker version 24.0.5, build 24.0.5-0ubuntu1~22.04.1", (24, 0)),
    ("Docker version 26.1.4, build 5650f9b", (26, 1)),
    ("Docker version 28.2.2, build e6534b4\n", (28, 2)),
    ("Docker version 28.1.1, build 01f442b", (28, 1)),
    ("dockerd: unknown flag --version", None),
    ("Docker version dev, build unknown", None),
    ("", None),
])
def test_dockerd_version_parsed_from_what_it_prints(printed: str, expected) -> None:
    assert engine_version.parse_dockerd(printed) == expected


@pytest.mark.parametrize("printed, expected", [
    ("containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+b1", (1, 6)),
    ("containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3", (1, 6)),
    ("containerd github.com/containerd/containerd v1.7.20 "
     "8fc6bcff51318944179630522a095cc9dbf9f353", (1, 7)),
    ("containerd containerd.io 1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da", (1, 7)),
    ("containerd github.com/containerd/containerd/v2 v2.0.0 "
     "207ad711eabd375a01713109a8a197d197ff6542", (2, 0)),
    ("containerd github.com/containerd/containerd/v2 v2.1.3 "
     "c787fb98911740dd3ff2d0e45ce88cdf01410486", (2, 1)),
    ("containerd: command not found", None),
    ("", None),
])
def test_containerd_version_parsed_from_what_it_prints(printed: str, expected) -> None:
    assert engine_version.parse_containerd(printed) == expected


def test_version_option_is_x_dot_y() -> None:
    assert engine_version.parse_option("26.1", "--docker-version") == (26, 1)
    assert engine_version.parse_option("28.2.0", "--docker-version") == (28, 2)
    assert engine_version.parse_option("v2.0", "--containerd-version") == (2, 0)
    for bad in ("26", "", "latest", "26.x"):
        with pytest.raises(common.SetupError, match="give the version as X.Y"):
            engine_version.parse_option(bad, "--docker-version")


DOCKER_CDI = [
    # Docker 25 to 28.1: features.cdi, in the file's layout, other features kept.
    (None, (26, 1), "/srv/cdi",
     '{\n  "features": {\n    "cdi": true\n  },\n  "cdi-spec-dirs": [\n    "/etc/cdi",\n'
     '    "/var/run/cdi",\n    "/srv/cdi"\n  ]\n}\n'),
    (None, (25, 0), "/etc/cdi", '{\n  "features": {\n    "cdi": true\n  }\n}\n'),
    ('{"log-level": "warn"}\n', (26, 1), "/var/run/cdi",
     '{"log-level": "warn", "features": {"cdi": true}}\n'),
    ('{\n    "features": {"buildkit": true},\n    "log-level": "warn"\n}\n', (28, 1), "/etc/cdi",
     '{\n    "features": {"buildkit": true, "cdi": true},\n    "log-level": "warn"\n}\n'),
    ('{\n  "features": {\n    "cdi": false\n  }\n}\n', (26, 1), "/etc/cdi",
     '{\n  "features": {\n    "cdi": true\n  }\n}\n'),
    # cdi-spec-dirs named already: ours added at its end.
    ('{"features": {"cdi": true}, "cdi-spec-dirs": ["/opt/cdi"]}\n', (26, 1), "/srv/cdi",
     '{"features": {"cdi": true}, "cdi-spec-dirs": ["/opt/cdi", "/srv/cdi"]}\n'),
    # 28.2 and later: CDI on by default; only the spec dir where it is needed.
    ('{"log-level": "warn"}\n', (28, 2), "/srv/cdi",
     '{"log-level": "warn", "cdi-spec-dirs": ["/etc/cdi", "/var/run/cdi", "/srv/cdi"]}\n'),
    ('{"log-level": "warn"}\n', (29, 0), "/etc/cdi", '{"log-level": "warn"}\n'),
    # Set up already: the text as it was.
    ('{"features": {"cdi": true}}', (26, 1), "/etc/cdi", '{"features": {"cdi": true}}'),
]


@pytest.mark.parametrize("text, version, spec_dir, expected", DOCKER_CDI)
def test_docker_cdi_edit(text: Optional[str], version, spec_dir: str, expected: str) -> None:
    assert docker.edit_cdi(text, "F", version, spec_dir) == expected


@pytest.mark.parametrize("text, words", [
    ('{"features": ["cdi"]}', ['"features" is an array, not an object']),
    ('{"cdi-spec-dirs": "/etc/cdi"}', ['"cdi-spec-dirs" is a string, not an array']),
    ('{"features": {', ["line 1, column"]),
])
def test_docker_cdi_edit_refuses(text: str, words: List[str]) -> None:
    with pytest.raises(common.SetupError) as exc:
        docker.edit_cdi(text, "F", (26, 1), "/srv/cdi")
    for word in words:
        assert word in str(exc.value)


def test_docker_26_enables_cdi_end_to_end(setup: Setup) -> None:
    daemon = setup.tmp / "daemon.json"
    daemon.write_text('{"log-level": "warn"}\n')
    before = snapshot(daemon)
    res = setup.run("docker", "--docker-version", "26.1", "--daemon-json", str(daemon),
                    "--dry-run")
    assert res.returncode == 0, res.stderr
    assert res.stderr.splitlines()[0] == (
        "gpuslice: docker 26.1: CDI is opt-in before 28.2; enabling it (features.cdi); "
        f"adding {setup.spec_dir} to cdi-spec-dirs")
    old = '{"log-level": "warn"}\n'
    assert res.stdout == common.unified_diff(str(daemon), old,
                                             docker.edit_cdi(old, "F", (26, 1), setup.spec_dir))
    assert snapshot(daemon) == before
    res = setup.run("docker", "--docker-version", "26.1", "--daemon-json", str(daemon))
    assert res.returncode == 0, res.stderr
    assert json.loads(daemon.read_text()) == {
        "log-level": "warn", "features": {"cdi": True},
        "cdi-spec-dirs": ["/etc/cdi", "/var/run/cdi", setup.spec_dir]}
    assert "runtimes" not in daemon.read_text()
    assert "systemctl restart docker" in res.stderr
    assert "run containers with: docker run --device gpuslice.io/gpu=0-4g IMAGE" in res.stderr
    res = setup.run("docker", "--docker-version", "26.1", "--daemon-json", str(daemon))
    assert res.returncode == 0 and res.stdout == ""
    assert "already set up; nothing changed" in res.stderr


def test_docker_28_2_enables_nothing(tmp_path: Path) -> None:
    setup = Setup(tmp_path, spec_dir="/etc/cdi")
    daemon = tmp_path / "docker" / "daemon.json"
    res = setup.run("docker", "--docker-version", "28.2", "--daemon-json", str(daemon))
    assert res.returncode == 0, res.stderr
    assert res.stdout == ""
    assert res.stderr.splitlines()[:2] == [
        "gpuslice: docker 28.2: CDI is on by default since 28.2; nothing to enable",
        "gpuslice: nothing to do: dockerd reads /etc/cdi (one of its default CDI spec dirs)"]
    assert not daemon.parent.exists()


def test_docker_version_chooses_the_runtime_before_25(setup: Setup) -> None:
    daemon = setup.tmp / "daemon.json"
    res = setup.run("docker", "--docker-version", "24.0", "--daemon-json", str(daemon),
                    "--dry-run")
    assert res.returncode == 0, res.stderr
    assert res.stderr.splitlines()[0] == \
        "gpuslice: docker 24.0: no CDI before 25; registering gpuslice-runtime as runtime gpuslice"
    assert '+  "runtimes": {' in res.stdout.splitlines()


def fake_engine(tmp: Path, program: str, prints: Optional[str]) -> str:
    """A PATH of one folder holding, unless prints is None, a
    `program` that prints that for --version."""
    folder = tmp / f"fake-{program}"
    folder.mkdir()
    if prints is not None:
        fake = folder / program
        fake.write_text(f"#!/bin/sh\necho '{prints}'\n")
        fake.chmod(0o755)
    return str(folder)


@pytest.mark.parametrize("engine, option, prints, words", [
    ("docker", "--daemon-json", None, ["no dockerd on PATH", "--docker-version X.Y"]),
    ("docker", "--daemon-json", "Docker version dev", ["printed 'Docker version dev'",
                                                       "--docker-version X.Y"]),
    ("containerd", "--config", None, ["no containerd on PATH", "--containerd-version X.Y"]),
    ("containerd", "--config", "containerd dev", ["printed 'containerd dev'",
                                                  "--containerd-version X.Y"]),
])
def test_unknown_version_is_one_line_and_writes_nothing(setup: Setup, engine: str, option: str,
                                                        prints: Optional[str],
                                                        words: List[str]) -> None:
    program = "dockerd" if engine == "docker" else "containerd"
    target = setup.tmp / "engine.conf"
    res = setup.run(engine, option, str(target), path=fake_engine(setup.tmp, program, prints))
    one_error_line(res, "cannot tell the " + program + " version", *words)
    assert not target.exists()


def test_bad_version_option_is_one_line(setup: Setup) -> None:
    target = setup.tmp / "daemon.json"
    one_error_line(setup.run("docker", "--docker-version", "26", "--daemon-json", str(target)),
                   "--docker-version '26'", "X.Y")
    one_error_line(setup.run("containerd", "--containerd-version", "two", "--config",
                             str(target)), "--containerd-version 'two'", "X.Y")
    assert not target.exists()


CONTAINERD_V2 = """version = 2

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "x"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"

[metrics]
  address = ""
"""
CONTAINERD_V2_CDI = """version = 2

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "x"
    enable_cdi = true
    cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi", "/srv/cdi"]
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"

[metrics]
  address = ""
"""
CONTAINERD_V3 = """version = 3

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
"""

CONTAINERD_CDI = [
    (None, (1, 7), "/srv/cdi", 'version = 2\n\n[plugins."io.containerd.grpc.v1.cri"]\n'
     '  enable_cdi = true\n  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi", "/srv/cdi"]\n'),
    ("", (1, 7), "/etc/cdi",
     'version = 2\n\n[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = true\n'),
    (None, (2, 0), "/var/run/cdi",
     'version = 3\n\n[plugins."io.containerd.cri.v1.runtime"]\n  enable_cdi = true\n'),
    (CONTAINERD_V2, (1, 7), "/srv/cdi", CONTAINERD_V2_CDI),
    # containerd 2 with a version 2 file: the version 2 keys, which it migrates.
    (CONTAINERD_V2, (2, 1), "/srv/cdi", CONTAINERD_V2_CDI),
    (CONTAINERD_V2_CDI, (1, 7), "/srv/cdi", CONTAINERD_V2_CDI),
    ('version = 2\n\n[plugins."io.containerd.grpc.v1.cri".containerd]\n  snapshotter = "x"\n',
     (1, 7), "/etc/cdi",
     'version = 2\n\n[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = true\n\n'
     '[plugins."io.containerd.grpc.v1.cri".containerd]\n  snapshotter = "x"\n'),
    (CONTAINERD_V3, (2, 0), "/srv/cdi",
     CONTAINERD_V3 + '\n[plugins."io.containerd.cri.v1.runtime"]\n  enable_cdi = true\n'
     '  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi", "/srv/cdi"]\n'),
    ('version = 3\n\n[plugins."io.containerd.cri.v1.runtime"]\n  enable_cdi = false # off\n'
     '  cdi_spec_dirs = ["/opt/cdi"]\n', (2, 0), "/srv/cdi",
     'version = 3\n\n[plugins."io.containerd.cri.v1.runtime"]\n  enable_cdi = true # off\n'
     '  cdi_spec_dirs = ["/opt/cdi", "/srv/cdi"]\n'),
]


@pytest.mark.parametrize("text, version, spec_dir, expected", CONTAINERD_CDI)
def test_containerd_cdi_edit(text: Optional[str], version, spec_dir: str, expected: str) -> None:
    assert containerd.edit_cdi(text, "F", version, spec_dir) == expected


@pytest.mark.parametrize("text, version, words", [
    (CONTAINERD_V3, (1, 7), ["version = 3 is containerd 2's format", "containerd 1.7 cannot"]),
    ('[plugins]\n', (1, 7), ["no `version = ` line", "version 1"]),
    ('version = 4\n', (2, 0), ["version = 4", "version 2 and 3 files only"]),
    ('version = 3\n[plugins."io.containerd.cri.v1.runtime"]\ncdi_spec_dirs = "/etc/cdi"\n', (2, 0),
     ["line 3: cdi_spec_dirs is not a list of strings"]),
])
def test_containerd_cdi_edit_refuses(text: str, version, words: List[str]) -> None:
    with pytest.raises(common.SetupError) as exc:
        containerd.edit_cdi(text, "F", version, "/srv/cdi")
    for word in words:
        assert word in str(exc.value)


def test_containerd_cdi_end_to_end(setup: Setup) -> None:
    conf = setup.tmp / "config.toml"
    res = setup.run("containerd", "--containerd-version", "1.7", "--config", str(conf),
                    "--dry-run")
    assert res.returncode == 0, res.stderr
    assert res.stderr.splitlines()[0] == (
        "gpuslice: containerd 1.7: reads CDI through CRI (CDI is off by default before 2.0); "
        'setting enable_cdi in [plugins."io.containerd.grpc.v1.cri"]')
    assert not conf.exists()
    res = setup.run("containerd", "--containerd-version", "2.0", "--config", str(conf))
    assert res.returncode == 0, res.stderr
    assert read_toml(conf)["plugins"]["io.containerd.cri.v1.runtime"] == {
        "enable_cdi": True, "cdi_spec_dirs": ["/etc/cdi", "/var/run/cdi", setup.spec_dir]}
    assert "runtimes" not in conf.read_text()
    conf.write_text(CONTAINERD_V2)
    res = setup.run("containerd", "--containerd-version", "2.0", "--config", str(conf),
                    "--dry-run")
    assert res.returncode == 0, res.stderr
    assert res.stderr.splitlines()[0].endswith(
        '[plugins."io.containerd.grpc.v1.cri"] (containerd 2 migrates this version 2 file '
        "on load)")
    conf.write_text(CONTAINERD_V3)
    one_error_line(setup.run("containerd", "--containerd-version", "1.7", "--config", str(conf)),
                   "containerd 1.7 cannot read")
    assert conf.read_text() == CONTAINERD_V3


def test_containerd_version_chooses_the_runtime_before_1_7(setup: Setup) -> None:
    conf = setup.tmp / "config.toml"
    res = setup.run("containerd", "--containerd-version", "1.6", "--config", str(conf),
                    "--dry-run")
    assert res.returncode == 0, res.stderr
    assert res.stderr.splitlines()[0] == ("gpuslice: containerd 1.6: no CDI before 1.7; "
                                          "adding the CRI runtime gpuslice that runs "
                                          "gpuslice-runtime")
    assert f"+{CRI}.gpuslice]" in res.stdout.splitlines()


def test_the_real_daemons_here_are_read(setup: Setup) -> None:
    """The daemons this host runs (install.sh --with-tests installs them): their
    own --version picks the path."""
    assert shutil.which("dockerd") and shutil.which("containerd"), \
        "the real dockerd and containerd are missing: run ./install.sh --with-tests"
    for engine, program, option in (("docker", "dockerd", "--daemon-json"),
                                    ("containerd", "containerd", "--config")):
        printed = subprocess.run([program, "--version"], capture_output=True, text=True,
                                 timeout=30).stdout
        parse = engine_version.parse_dockerd if program == "dockerd" else \
            engine_version.parse_containerd
        found = parse(printed)
        assert found is not None, printed
        res = setup.run(engine, option, str(setup.tmp / f"{engine}.conf"), "--dry-run")
        assert res.returncode == 0, res.stderr
        assert res.stderr.startswith(f"gpuslice: {engine} {found[0]}.{found[1]}: "), res.stderr


def test_runtime_options_unused_on_the_cdi_path_are_named(setup: Setup) -> None:
    res = setup.run("docker", "--docker-version", "27.0", "--name", "gs", "--real-runtime",
                    "/usr/bin/runc", "--daemon-json", str(setup.tmp / "d.json"), "--dry-run")
    assert res.returncode == 0, res.stderr
    assert res.stderr.splitlines()[0] == (
        "gpuslice: warning: --name and --real-runtime: not used with docker 27.0, which reads "
        "the CDI spec itself (no runtime is registered)")
    res = setup.run("containerd", "--containerd-version", "2.1", "--name", "gs", "--config",
                    str(setup.tmp / "c.toml"), "--dry-run")
    assert res.returncode == 0, res.stderr
    assert res.stderr.splitlines()[0].startswith("gpuslice: warning: --name: not used with "
                                                 "containerd 2.1")
