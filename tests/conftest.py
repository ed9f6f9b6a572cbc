"""Shared fixtures: the fake NVIDIA driver and fake GPU descriptions."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from fakehost import fake_gpus_doc

REPO = Path(__file__).resolve().parent.parent
FAKEDRIVER_DIR = REPO / "tests" / "fakedriver"
FAKEDRIVER_BUILD = FAKEDRIVER_DIR / "build"


@pytest.fixture(scope="session")
def fakedriver() -> Path:
    """Build tests/fakedriver once per session; return its build folder."""
    subprocess.run(["make", "-s", "-C", str(FAKEDRIVER_DIR)], check=True)
    return FAKEDRIVER_BUILD


@pytest.fixture
def fake_env(tmp_path: Path, fakedriver: Path):
    """Return a function that writes a GPU JSON and gives the env that loads the fake NVML."""

    def make(count: int = 1, gpus: Optional[List[Dict[str, Any]]] = None) -> Dict[str, str]:
        doc = fake_gpus_doc(count, gpus)
        path = tmp_path / "gpus.json"
        path.write_text(json.dumps(doc))
        env = dict(os.environ)
        env["GPUSLICE_FAKE_GPUS"] = str(path)
        env["LD_LIBRARY_PATH"] = str(fakedriver)
        return env

    return make


@pytest.fixture(scope="session")
def driver_root(tmp_path_factory: pytest.TempPathFactory, fakedriver: Path) -> Path:
    """A fake driver root (read-only use): libraries, ld cache, nvidia-smi, firmware."""
    from fakehost import make_driver_root

    return make_driver_root(tmp_path_factory.mktemp("driver") / "root", fakedriver)


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    """What tests kept for the log (tests/ci_log.py), after the results."""
    from ci_log import KEPT

    for name, text in KEPT:
        terminalreporter.write_sep("=", name)
        terminalreporter.write_line(text.rstrip())
