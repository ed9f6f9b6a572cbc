"""The result table every tests/gpu check prints: one row per check, then a count."""
from __future__ import annotations

from typing import List, Tuple

rows: List[Tuple[str, str, str, bool]] = []


def check(name: str, expected: object, got: object, ok: object) -> None:
    rows.append((name, str(expected), str(got), bool(ok)))


def measured(name: str, value: object) -> None:
    """A number reported, not judged."""
    rows.append((name, "(measured)", str(value), True))


def report() -> int:
    """Print the table; 1 if any check failed."""
    width = max(len(r[0]) for r in rows)
    print(f"{'check':{width}}  {'expected':>22}  {'got':>26}  result")
    for name, expected, got, ok in rows:
        print(f"{name:{width}}  {expected[:22]:>22}  {got[:26]:>26}  {'ok' if ok else 'FAIL'}")
    failed = sum(1 for r in rows if not r[3])
    print(f"{len(rows) - failed} passed, {failed} failed")
    return 1 if failed else 0
