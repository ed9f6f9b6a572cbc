"""The parsers of hostile input, fuzzed: native/hook/fuzz/ holds a libFuzzer
harness for each (json.c; the OCI state and config.json as the hook reads
them, oci.c; config.json as gpuslice-runtime reads it, runtime_request.c,
and as it applies CDI edits to it, runtime/apply.c; a tenant's text made fit
for a terminal, common/text.c),
built with clang under ASan and UBSan (`make -C native/hook fuzz`).

Each harness replays its seed corpus (native/hook/fuzz/corpus/<name>: the
tests' inputs, and every input a campaign found a fault with), then fuzzes
for a bounded time and number of runs. A crash, a leak, undefined behaviour,
a timeout or a message of more than one line fails the test; the fuzzer's
final stats go into the CI log. clang and libFuzzer come with
`./install.sh --with-tests`: without them this fails, it does not skip.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import ci_log

REPO = Path(__file__).resolve().parent.parent
HOOK = REPO / "native" / "hook"
BUILD = HOOK / "build-fuzz"
CORPUS = HOOK / "fuzz" / "corpus"
HARNESSES = ["json", "oci_state", "oci_config", "runtime_request", "runtime_apply",
             "tenant_text"]
# Bounds for one harness (six of them: about two and a half minutes in all).
SECONDS = 25
RUNS = 3_000_000


@pytest.fixture(scope="module")
def built() -> Path:
    if shutil.which("clang") is None:
        pytest.fail("clang is not installed; ./install.sh --with-tests installs clang and "
                    "libclang-rt-dev (libFuzzer), which the fuzz harnesses need")
    res = subprocess.run(["make", "-s", "-C", str(HOOK), "fuzz"], capture_output=True,
                         text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    return BUILD


def run(argv: list, tmp: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*map(str, argv), f"-artifact_prefix={tmp}/"], capture_output=True,
                          text=True, errors="replace", timeout=SECONDS * 10)


def assert_clean(res: subprocess.CompletedProcess, tmp: Path) -> None:
    found = sorted(p.name for p in tmp.iterdir()
                   if p.name.startswith(("crash-", "leak-", "timeout-", "oom-", "slow-unit-")))
    assert res.returncode == 0 and not found, (found, res.stderr[-6000:])
    for word in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                 "MemorySanitizer"):
        assert word not in res.stderr, res.stderr[-6000:]


@pytest.mark.parametrize("name", HARNESSES)
def test_the_seed_corpus_replays_clean(built: Path, name: str, tmp_path: Path) -> None:
    """Every seed, and every input a fault was once found with, runs clean."""
    seeds = sorted((CORPUS / name).iterdir())
    assert len(seeds) >= 5, name
    res = run([built / f"fuzz_{name}", *seeds], tmp_path)
    assert_clean(res, tmp_path)
    assert f"Running: {seeds[-1]}" in res.stderr


def test_an_array_config_reads_nothing_uninitialised(built: Path, tmp_path: Path) -> None:
    """F3: gpuslice-runtime read the key of an array's element, which nothing had
    set, on a config.json such as ["x", {"process": 1}, 3]. MemorySanitizer sees
    such a read; gs_json_next now always sets the key."""
    seed = CORPUS / "runtime_request" / "f3-array-top.json"
    assert seed.read_text() == '["x", {"process": 1}, 3]'
    res = run([built / "msan_runtime_request", *sorted((CORPUS / "runtime_request").iterdir())],
              tmp_path)
    assert_clean(res, tmp_path)
    assert f"Running: {seed}" in res.stderr


@pytest.mark.parametrize("name", HARNESSES)
def test_a_bounded_fuzz_run_finds_nothing(built: Path, name: str, tmp_path: Path) -> None:
    work = tmp_path / "corpus"  # what the run adds stays out of the tree
    work.mkdir()
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    res = run([built / f"fuzz_{name}", f"-max_total_time={SECONDS}", f"-runs={RUNS}",
               "-print_final_stats=1", "-timeout=10", "-rss_limit_mb=2048", work,
               CORPUS / name], artifacts)
    # The last status line ("#N DONE cov: ... exec/s: ..."), "Done N runs in S
    # second(s)" and the stat:: lines of -print_final_stats.
    stats = "\n".join(line for line in res.stderr.splitlines()
                      if line.startswith(("stat::", "Done ")) or " DONE " in line)
    ci_log.keep(f"fuzz_{name} (libFuzzer, ASan+UBSan, {SECONDS} s or {RUNS} runs)", stats)
    assert_clean(res, artifacts)
    assert "stat::number_of_executed_units:" in stats, res.stderr[-3000:]
