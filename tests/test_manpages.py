"""The man pages (packaging/man): one per command, checked against the
programs they describe so that they cannot drift.

The `gpuslice` pages are made from the click commands by
packaging/man/mkman.py and committed: they must be what it makes now, and
each page's OPTIONS must name exactly its command's options, read back from
the roff. gpuslice-hook(8) and gpuslice-runtime(8) are written by hand: their
OPTIONS must name exactly the options their C argument parsers' --help
gives. Every page has the sections of podman-run(1) and runc(8), renders
without a warning (man --warnings, as lintian runs it), names only pages
that exist, is installed by the packages (the deb's gpuslice.manpages and
the rpm's %files take every page) and by install.sh.

man and groff come with install.sh --with-tests (man-db, groff-base); a
missing one is a failure, not a skip.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Set

import click
import pytest

from fakehost import build_hook, build_runtime
from ocihook.cli import cli

REPO = Path(__file__).resolve().parent.parent
MAN = REPO / "packaging" / "man"
PAGES = sorted(MAN.glob("*.8"))
SECTIONS = ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXAMPLES", "ENVIRONMENT", "FILES",
            "EXIT STATUS", "SEE ALSO")


def sections(page: Path) -> Dict[str, List[str]]:
    """Each .SH section's source lines, by its title."""
    out: Dict[str, List[str]] = {}
    current = None
    for line in page.read_text().splitlines():
        if line.startswith(".SH "):
            current = line[4:].strip('"')
            out[current] = []
        elif current is not None:
            out[current].append(line)
    return out


def plain(roff: str) -> str:
    """A roff line as the reader sees its words: fonts and escapes gone."""
    text = re.sub(r"\\f[BIRP]", "", roff).replace("\\-", "-").replace("\\&", "")
    text = re.sub(r'^\.(B|I|BI|BR|IR|RB|RI|IB)\s+', "", text)
    return text.replace('"', "")


def options_named(lines: List[str]) -> Set[str]:
    """The options an OPTIONS section describes: those in each .TP tag."""
    found: Set[str] = set()
    for i, line in enumerate(lines[:-1]):
        if line == ".TP":
            found |= set(re.findall(r"(?:^|[\s,])(--?[a-z][a-z.-]*)", plain(lines[i + 1])))
    return found


def command_pages() -> Dict[str, click.Command]:
    """Page file name -> its leaf command (gpuslice-cdi-generate.8: cdi generate)."""
    out: Dict[str, click.Command] = {}

    def walk(prefix: str, cmd: click.Command) -> None:
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                walk(f"{prefix}-{name}", sub)
        else:
            out[f"{prefix}.8"] = cmd
    walk("gpuslice", cli)
    return out


def click_options(cmd: click.Command) -> Set[str]:
    return {name for p in cmd.params if isinstance(p, click.Option) and "--help" not in p.opts
            for name in p.opts + p.secondary_opts}


def test_pages_are_what_the_cli_makes_now() -> None:
    res = subprocess.run([sys.executable, str(MAN / "mkman.py"), "--check"], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr


def test_each_command_has_a_page_naming_exactly_its_options() -> None:
    pages = command_pages()
    assert len(pages) >= 18
    for name, cmd in pages.items():
        page = MAN / name
        assert page.exists(), f"no man page {name} for a command"
        assert options_named(sections(page)["OPTIONS"]) == click_options(cmd), name
    # gpuslice(8): the global options and every command's page, and no other.
    top = sections(MAN / "gpuslice.8")
    assert options_named(top["OPTIONS"]) == click_options(cli) | {"-h", "--help"}
    listed = {m.group(1) + ".8" for line in top["COMMANDS"]
              for m in [re.match(r"\.BR (gpuslice\S*) \(8\)$", line.replace("\\-", "-"))] if m}
    assert listed == set(pages)


def _help_options(text: str) -> Set[str]:
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z.-]*[a-z]|-[a-z])\b", text))


def test_hook_page_names_exactly_its_parsers_options() -> None:
    res = subprocess.run([str(build_hook()), "--help"], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    offered = _help_options(res.stdout) | {"-h"}  # main() takes -h as --help
    assert {"--device", "--slices", "--pid-start", "--version"} <= offered  # read, not empty
    assert options_named(sections(MAN / "gpuslice-hook.8")["OPTIONS"]) == offered


def test_runtime_page_names_exactly_its_own_options(tmp_path: Path) -> None:
    runc = tmp_path / "runc"
    runc.write_text("#!/bin/sh\necho 'runc help'\n")
    runc.chmod(0o755)
    res = subprocess.run([str(build_runtime()), "--gpuslice-runtime", str(runc), "--help"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout.endswith("runc help\n"), res
    own = res.stdout[:-len("runc help\n")]
    # -h and -v: runc's short spellings, which the wrapper reads as runc does.
    offered = _help_options(own) | {"-h", "-v"}
    assert {"--gpuslice-runtime", "--gpuslice-cache-tool", "--help", "--version"} <= offered
    assert options_named(sections(MAN / "gpuslice-runtime.8")["OPTIONS"]) == offered


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_page_has_every_section_and_names_pages_that_exist(page: Path) -> None:
    got = sections(page)
    missing = [s for s in SECTIONS if s not in got]
    assert not missing, f"{page.name} lacks {missing}"
    name = plain(got["NAME"][0])
    assert name.startswith(page.stem + " - "), name
    refs = re.findall(r"(gpuslice[a-z-]*) \((\d)\)", "\n".join(
        plain(line) for line in page.read_text().splitlines()))
    assert any("gpuslice" in line for line in got["SEE ALSO"]), page.name
    for ref, section in refs:
        assert (MAN / f"{ref}.{section}").exists(), f"{page.name} names {ref}({section})"


def test_pages_render_without_warnings(tmp_path: Path) -> None:
    man = shutil.which("man")
    assert man, "man missing: install.sh --with-tests installs man-db and groff-base"
    env = dict(os.environ, LC_ALL="C.UTF-8", MANROFFSEQ="", MANWIDTH="80")
    for page in PAGES:
        # As lintian checks a page: every groff warning on.
        res = subprocess.run([man, "--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z", str(page)],
                             capture_output=True, text=True, env=env, timeout=60)
        assert (res.returncode, res.stderr) == (0, ""), page.name
        assert res.stdout, page.name
    # The check sees a warning where there is one.
    bad = tmp_path / "bad.8"
    bad.write_text('.TH BAD 8\n.SH NAME\nbad \\- x\n.XY unknown macro\n\\fQ\n')
    res = subprocess.run([man, "--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z", str(bad)],
                         capture_output=True, text=True, env=env, timeout=60)
    assert res.stderr, "man --warnings said nothing of a broken page"


def test_packages_and_install_sh_install_every_page() -> None:
    assert (REPO / "packaging/deb/debian/gpuslice.manpages").read_text().split() == [
        "packaging/man/*.8"]
    spec = (REPO / "packaging/rpm/gpuslice.spec").read_text()
    assert "packaging/man/*.8" in spec and "%{_mandir}/man8/gpuslice*.8*" in spec
    assert "install -D -m 0644 -t /usr/local/share/man/man8 packaging/man/*.8" in \
        (REPO / "install.sh").read_text()
    # What install.sh installed on this machine (CI runs it first).
    for page in PAGES:
        found = subprocess.run(["man", "-w", page.stem], capture_output=True, text=True)
        assert found.returncode == 0, f"man -w {page.stem}: not installed: run ./install.sh"
        assert found.stdout.strip().startswith("/usr/local/"), found.stdout
