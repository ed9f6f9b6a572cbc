"""Shared fixtures: the fake NVIDIA driver, fake GPU descriptions and the
Debian 13 root (tests/trixie_root.py)."""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional

import pytest

from fakehost import fake_gpus_doc

if TYPE_CHECKING:
    from trixie_root import TrixieRoot

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


@pytest.fixture(scope="session")
def trixie(tmp_path_factory: pytest.TempPathFactory) -> Iterator["TrixieRoot"]:
    """The Debian 13 root with its runtimes, made once per run and shared by
    the tests that ask for it; /tmp, the run's tmp folders and this repository
    are seen in it at their own paths. If it cannot be made, each of those
    tests fails with the one line that says why (never a skip)."""
    import ci_log
    from fakehost import HOOK_DIR, build_runtime
    from trixie_root import RootError, TrixieRoot

    start = time.monotonic()
    root = TrixieRoot(tmp_path_factory.mktemp("trixie"))
    failure = None
    try:
        build_runtime()  # and the hook: the libraries they link to go into the root
        root.build(shared=[Path("/tmp"), tmp_path_factory.getbasetemp(), REPO],
                   binaries=[HOOK_DIR / "build" / "gpuslice-hook",
                             HOOK_DIR / "build" / "gpuslice-runtime"])
        versions = root.versions()
    except RootError as e:
        failure = str(e)
    if failure is not None:  # out of the except: the line alone, no chained traceback
        root.close()
        pytest.fail(failure, pytrace=False)
    made = time.monotonic() - start
    try:
        yield root
    finally:
        root.close()
        steps = ", ".join(f"{k} {v:.0f} s" for k, v in root.timings.items())
        ci_log.keep("Debian 13 (trixie) root (tests/trixie_root.py)",
                    "\n".join(versions) + f"\nmade in {made:.0f} s ({steps}); its tests and "
                    f"its removal took {time.monotonic() - start - made:.0f} s more")


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    """What tests kept for the log (tests/ci_log.py), after the results."""
    from ci_log import KEPT

    for name, text in KEPT:
        terminalreporter.write_sep("=", name)
        terminalreporter.write_line(text.rstrip())
