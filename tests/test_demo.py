"""tests/demo.py, what install.sh --with-tests shows on a machine without a
GPU, runs to its end and shows each thing it claims: the slice as the card
inside a container, an allocation past it refused, a third container
refused with the hook's line, and the books."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

DEMO = Path(__file__).resolve().parent / "demo.py"


def test_the_demo_shows_gpuslice_working() -> None:
    res = subprocess.run([sys.executable, str(DEMO)], capture_output=True, text=True,
                         timeout=600, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    assert "    gpuslice.io/gpu=0-8g\n" in out
    assert "inside, CUDA says the card has 8192 MiB" in out
    assert "allocating 4 GiB more: CUDA_ERROR_OUT_OF_MEMORY (past the slice)" in out
    assert ": 0-4g: card 0 (GPU-000000a0-1111-2222-3333-000000000000) has 2048 MiB free of " \
           "16384 MiB, 4096 MiB asked; stop a container on it or ask for less" in out
    assert "14336 of 16384 MiB reserved" in out
    assert " (inference)  0-8g       8192 MiB; 5888 MiB used" in out
    assert " (trainer)  0-6g       6144 MiB; 0 MiB used" in out
    assert out.rstrip().endswith("gpuslice works here.")
