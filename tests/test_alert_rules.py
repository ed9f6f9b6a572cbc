"""The Prometheus rules we ship for the exporter (docs/prometheus/): Debian's
promtool checks them and runs their unit tests; every metric they read is
one the exporter documents (docs/metrics.md, which tests/test_exporter.py
holds to the exporter's output); and a rule changed under its tests fails
them, so the tests are not empty."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

RULES_DIR = Path(__file__).resolve().parent.parent / "docs" / "prometheus"
RULES, RULE_TESTS = RULES_DIR / "gpuslice-rules.yml", RULES_DIR / "gpuslice-rules.test.yml"
METRICS_DOC = RULES_DIR.parent / "metrics.md"


def promtool(*args: str, cwd: Path = RULES_DIR) -> subprocess.CompletedProcess:
    tool = shutil.which("promtool")
    assert tool, "promtool missing: install.sh --with-tests installs Debian's prometheus"
    return subprocess.run([tool, *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def test_the_rules_are_valid_and_pass_their_tests() -> None:
    res = promtool("check", "rules", RULES.name)
    assert res.returncode == 0, res.stdout + res.stderr
    res = promtool("test", "rules", RULE_TESTS.name)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


def test_every_metric_the_rules_read_is_documented() -> None:
    documented = set(re.findall(r"^\| `(gpuslice_[a-z_]+)` \|", METRICS_DOC.read_text(), re.M))
    read = set(re.findall(r"\b(gpuslice_[a-z_]+)\b", RULES.read_text()))
    assert read and read <= documented, sorted(read - documented)


def test_a_rule_changed_under_its_tests_fails_them(tmp_path: Path) -> None:
    text = RULES.read_text()
    assert "gpuslice_card_healthy == 0\n        for: 1m" in text
    (tmp_path / RULES.name).write_text(
        text.replace("gpuslice_card_healthy == 0\n        for: 1m",
                     "gpuslice_card_healthy == 0\n        for: 5m"))
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    res = promtool("test", "rules", RULE_TESTS.name, cwd=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode != 0 and "GpusliceCardOutOfService" in out, out
