"""docs/architecture.md's layering: cdi/ never imports ocihook/ (ocihook/ builds on cdi/)."""
from __future__ import annotations

import ast
from pathlib import Path

CDI = Path(__file__).resolve().parent.parent / "cdi"


def imported_modules(path: Path) -> set:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def test_cdi_imports_nothing_of_ocihook() -> None:
    sources = sorted(CDI.glob("*.py"))
    assert len(sources) > 10
    offenders = {p.name: sorted(m for m in imported_modules(p) if m.split(".")[0] == "ocihook")
                 for p in sources}
    assert {name: mods for name, mods in offenders.items() if mods} == {}
