"""Text a test wants in the CI log whether it passes or not (lintian's and
rpmlint's reports): pytest -q shows a passing test's output nowhere, so
tests/conftest.py prints what is kept here at the end of the run."""
from __future__ import annotations

from typing import List, Tuple

KEPT: List[Tuple[str, str]] = []


def keep(name: str, text: str) -> None:
    KEPT.append((name, text))
