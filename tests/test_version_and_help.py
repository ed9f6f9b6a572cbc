"""The basics every tool has: `--version` of gpuslice, gpuslice-hook and
gpuslice-runtime, one version from pyproject.toml (ocihook/version.py,
version.mk); every command's --help ends with an example, and the groups'
lists of commands are not cut short (click cuts a summary with "..." where
it runs past the line)."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Iterator, Tuple

import click
from click.testing import CliRunner

from fakehost import build_hook, build_runtime
from ocihook.cli import cli

REPO = Path(__file__).resolve().parent.parent


def project_version() -> str:
    found = re.findall(r'^version = "(.+)"$', (REPO / "pyproject.toml").read_text(), re.M)
    assert len(found) == 1, found
    return found[0]


def test_each_program_prints_the_one_version() -> None:
    version = project_version()
    res = subprocess.run(["gpuslice", "--version"], capture_output=True, text=True, timeout=60)
    assert (res.returncode, res.stdout, res.stderr) == (0, f"gpuslice version {version}\n", "")
    for asan in (False, True):
        res = subprocess.run([str(build_hook(asan)), "--version"], capture_output=True,
                             text=True, timeout=60)
        assert (res.returncode, res.stdout, res.stderr) == (
            0, f"gpuslice-hook version {version}\n", ""), asan


def test_runtime_version_comes_before_the_real_runtimes(tmp_path: Path) -> None:
    # Docker's `info` reads the last line that names a version: runc's must stay last.
    runc = tmp_path / "runc"
    runc.write_text('#!/bin/sh\ncase "$*" in --version|-v) ;; *) exit 9 ;; esac\n'
                    'printf "runc version 1.1.5\\ncommit: v1.1.5\\n"\n')
    runc.chmod(0o755)
    for asan in (False, True):
        for flag in ("--version", "-v"):
            res = subprocess.run([str(build_runtime(asan)), "--gpuslice-runtime", str(runc), flag],
                                 capture_output=True, text=True, timeout=60)
            assert (res.returncode, res.stderr) == (0, ""), (asan, flag, res)
            assert res.stdout == (f"gpuslice-runtime version {project_version()}\n"
                                  "runc version 1.1.5\ncommit: v1.1.5\n"), (asan, flag)


def test_the_exporter_reports_the_same_version() -> None:
    from ocihook import exporter, version

    assert version.version() == project_version()
    assert exporter.version is version.version


def _commands() -> Iterator[Tuple[str, click.Command]]:
    def walk(prefix: str, cmd: click.Command) -> Iterator[Tuple[str, click.Command]]:
        yield prefix, cmd
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                yield from walk(f"{prefix} {name}".strip(), sub)
    return walk("", cli)


def test_every_help_ends_with_an_example() -> None:
    runner = CliRunner()
    seen = 0
    for path, cmd in _commands():
        res = runner.invoke(cli, [*path.split(), "--help"], prog_name="gpuslice",
                            terminal_width=80)
        assert res.exit_code == 0, (path, res.output)
        _, sep, tail = res.output.partition("\n  Examples:\n\n")
        assert sep, f"gpuslice {path} --help has no Examples:\n{res.output}"
        lines = tail.rstrip("\n").splitlines()
        assert lines and all(line.startswith("    ") for line in lines), (path, tail)
        # A command's examples run that command (a group's may show another).
        if not isinstance(cmd, click.Group):
            assert f"gpuslice {path}" in tail, (path, tail)
        seen += 1
    assert seen >= 20  # every group and command, not an empty walk


def test_group_lists_are_not_cut_short() -> None:
    runner = CliRunner()
    for path, cmd in _commands():
        if not isinstance(cmd, click.Group):
            continue
        res = runner.invoke(cli, [*path.split(), "--help"], prog_name="gpuslice",
                            terminal_width=80)
        listing = res.output.split("\nCommands:\n", 1)[1].split("\n\n", 1)[0]
        names = [line.split()[0] for line in listing.splitlines()]
        assert sorted(names) == sorted(cmd.commands), (path, listing)
        assert "..." not in listing, f"gpuslice {path} --help cuts a summary:\n{listing}"
    # The misleading one the issue saw: docker presented as Docker 20-24 only.
    res = runner.invoke(cli, ["setup", "--help"], prog_name="gpuslice", terminal_width=80)
    assert re.search(r"^  docker +Make Docker run gpuslice's devices \(by its version\)\.$",
                     res.output, re.M), res.output
