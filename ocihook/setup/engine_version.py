"""The version of the engine that setup configures: read from what its
daemon's `--version` prints, or given as an option (`--docker-version X.Y`),
so that setup takes the path that engine's version needs."""
from __future__ import annotations

import re
import shutil
import subprocess
from typing import Optional, Tuple

from ocihook.setup.common import SetupError

Version = Tuple[int, int]

# `dockerd --version`, Docker 20 to 28: "Docker version 26.1.4, build 5650f9b"
# (Debian's: "Docker version 20.10.24+dfsg1, build 297e128").
_DOCKERD = re.compile(r"Docker version v?(\d+)\.(\d+)\b")
# `containerd --version`: "containerd github.com/containerd/containerd 1.6.20~ds1 ...",
# "containerd github.com/containerd/containerd v1.7.20 SHA", "containerd
# containerd.io 1.7.27 SHA", "containerd github.com/containerd/containerd/v2 v2.0.0 SHA".
_CONTAINERD = re.compile(r"containerd \S+ v?(\d+)\.(\d+)\b")
# `podman --version`: "podman version 4.3.1", "podman version 5.4.2".
_PODMAN = re.compile(r"podman version v?(\d+)\.(\d+)\b")


def parse_option(value: str, option: str) -> Version:
    """X.Y (or X.Y.Z) as given on the command line."""
    m = re.fullmatch(r"v?(\d+)\.(\d+)(\.\d+)?", value.strip())
    if not m:
        raise SetupError(f"{option} {value!r}: give the version as X.Y, such as 26.1")
    return int(m.group(1)), int(m.group(2))


def _parse(pattern: "re.Pattern[str]", printed: str) -> Optional[Version]:
    m = pattern.match(printed.strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


def parse_dockerd(printed: str) -> Optional[Version]:
    return _parse(_DOCKERD, printed)


def parse_containerd(printed: str) -> Optional[Version]:
    return _parse(_CONTAINERD, printed)


def parse_podman(printed: str) -> Optional[Version]:
    return _parse(_PODMAN, printed)


_PARSERS = {"dockerd": parse_dockerd, "containerd": parse_containerd, "podman": parse_podman}


def show(version: Version) -> str:
    return f"{version[0]}.{version[1]}"


def detect(program: str, option: str, example: str) -> Version:
    """The version `program --version` prints; a SetupError naming what was
    found, and the option that gives the version instead."""
    parse = _PARSERS[program]
    fix = f"give it with {option} X.Y (such as {option} {example})"
    path = shutil.which(program)
    if path is None:
        raise SetupError(f"cannot tell the {program} version: no {program} on PATH; {fix}")
    try:
        res = subprocess.run([path, "--version"], capture_output=True, text=True,
                             timeout=30, errors="replace")
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SetupError(f"cannot tell the {program} version: {path} --version: {e}; "
                         f"{fix}") from None
    printed = (res.stdout.strip() or res.stderr.strip()).splitlines()
    first = printed[0] if printed else ""
    found = parse(first) if res.returncode == 0 else None
    if found is None:
        raise SetupError(f"cannot tell the {program} version: {path} --version printed "
                         f"{first[:120]!r} (exit status {res.returncode}); {fix}")
    return found


def version_of(program: str, given: Optional[str], option: str, example: str) -> Version:
    return parse_option(given, option) if given is not None else detect(program, option, example)
