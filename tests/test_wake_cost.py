"""bench/wake_cost on a machine without a GPU: its cpu rows, and bad arguments."""
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench" / "wake_cost"


def run(*args: str, out: Path = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("OUT", None)
    if out is not None:
        env["OUT"] = str(out)
    return subprocess.run([sys.executable, str(BENCH), *args], capture_output=True, text=True,
                          timeout=120, env=env)


def test_cpu_rows_for_each_pause_and_way(tmp_path: Path) -> None:
    res = run("--rounds", "2", "--pauses", "1,3", out=tmp_path)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    steady = next(line for line in lines if line.startswith("cpu: steady step"))
    assert float(steady.split()[3]) > 0
    rows = [line.split() for line in lines if line.strip().split()[:1] in (["1"], ["3"])]
    assert [(r[0], r[2]) for r in rows] == [("1", "sleep"), ("1", "spin"),
                                            ("3", "sleep"), ("3", "spin")]
    for r in rows:
        first, ratio, three = float(r[3]), float(r[4]), float(r[5])
        assert first > 0 and three >= first and ratio > 0
    assert (tmp_path / "wake_cost.txt").read_text().strip() == res.stdout.strip()


def test_bad_arguments_exit_2_naming_the_rule() -> None:
    for args in (("--rounds", "0"), ("--pauses", "0"), ("--pauses", "x")):
        res = run(*args)
        assert res.returncode == 2, (args, res.stdout)
        assert "--rounds" in res.stderr or "--pauses" in res.stderr, res.stderr
