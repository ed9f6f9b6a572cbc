"""tests/gpu/README.md names every wheel the GPU checks need: the GPU machine
has no package index, and a wheel missing from its `pip download` line was
found only there (cffi and pycparser: `gpuslice status` and the exporter
failed). The need is gpuslice's own dependencies (pyproject.toml) and theirs,
as the installed packages declare them, for the GPU machine's Python (3.12,
Linux); every one of them must be on the line."""
from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path
from typing import Set

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parent.parent
GPU_PYTHON = {"python_version": "3.12", "python_full_version": "3.12.0",
              "platform_system": "Linux", "sys_platform": "linux", "os_name": "posix",
              "implementation_name": "cpython", "platform_machine": "x86_64", "extra": ""}


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def needed() -> Set[str]:
    [block] = re.findall(r"^dependencies = \[(.*?)^\]", (REPO / "pyproject.toml").read_text(),
                         re.M | re.S)
    todo = [Requirement(r) for r in re.findall(r'^\s*"([^"]+)"', block, re.M)]
    found: Set[str] = set()
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate(GPU_PYTHON):
            continue
        if norm(req.name) in found:
            continue
        found.add(norm(req.name))
        todo += [Requirement(r) for r in metadata.requires(req.name) or []]
    return found


def listed() -> Set[str]:
    text = (REPO / "tests" / "gpu" / "README.md").read_text()
    [command] = re.findall(r"python3 -m pip download (.*?)\n(?!\s)", text, re.S)
    names: Set[str] = set()
    value_next = False
    for word in command.replace("\\\n", " ").split():
        if value_next:  # an option's value (--platform X, -d DIR)
            value_next = False
        elif word.startswith("-"):
            value_next = "=" not in word and word != "--no-deps"
        else:
            names.add(norm(word))
    return names


def test_the_readme_downloads_every_wheel_the_gpu_checks_need() -> None:
    need = needed()
    assert {"cffi", "pycparser", "jsonschema", "prometheus-client"} <= need, need
    missing = need - listed()
    assert not missing, f"tests/gpu/README.md's pip download lacks {sorted(missing)}"
