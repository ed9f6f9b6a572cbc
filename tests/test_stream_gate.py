"""bench/stream_gate on a machine without a GPU: bad arguments, and no CUDA said."""
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench" / "stream_gate"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH), *args], capture_output=True, text=True,
                          timeout=120)


def test_bad_arguments_exit_2_naming_the_rule() -> None:
    for args in (("--seconds", "0"), ("--trials", "0"), ("--seconds", "x")):
        res = run(*args)
        assert res.returncode == 2, (args, res.stdout)
        assert "--seconds" in res.stderr or "--trials" in res.stderr, res.stderr


def test_without_cuda_it_says_so_and_exits_1() -> None:
    res = run("--seconds", "0.1", "--trials", "1")
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stdout.strip() == "not measured: no torch with CUDA here", res.stdout
