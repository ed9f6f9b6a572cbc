"""The limit contract has one definition, native/include/gpuslice/limits.h:
the environment names a slice is given and the priority's words and numbers.
cdi/limits.py repeats the names cdi/ needs (cdi/ reads no header) and must
say the same; the accountant's CHECK on its priority column (a migration,
never edited) must list the same words; and no other C or Python place
spells a contract name or word itself, nor an env name no header defines.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

from cdi import limits
from ocihook import accountant, cheader

REPO = Path(__file__).resolve().parent.parent
C_DIRS = ("native/shim/src", "native/shim/include", "native/hook/hook", "native/hook/runtime",
          "native/hook/common", "native/include/gpuslice/c")
PY_DIRS = ("cdi", "ocihook")
# Where the contract is written down: the header, and cdi/'s one copy.
OWNERS = {"native/include/gpuslice/limits.h", "cdi/limits.py"}
# Env names that are not the shim's contract: the runtime wrapper's and the
# CLI's own settings, each read in one place.
OTHER_ENV = {"GPUSLICE_CONFIG", "GPUSLICE_RUNTIME_BINARY", "GPUSLICE_CACHE_TOOL"}
# Each name of cdi/limits.py and the limits.h #define it repeats.
CDI_COPY = {
    "MEMORY_LIMIT_ENV": "GPUSLICE_ENV_MEMORY_LIMIT",
    "CORE_LIMIT_ENV": "GPUSLICE_ENV_CORE_LIMIT",
    "PRIORITY_ENV": "GPUSLICE_ENV_PRIORITY",
    "DRIVER_VERSION_ENV": "GPUSLICE_ENV_DRIVER_VERSION",
    "MPS_PIPE_ENV": "GPUSLICE_ENV_MPS_PIPE_DIRECTORY",
    "MPS_LOG_ENV": "GPUSLICE_ENV_MPS_LOG_DIRECTORY",
    "MPS_THREADS_ENV": "GPUSLICE_ENV_MPS_ACTIVE_THREAD_PERCENTAGE",
    "MPS_MEMORY_ENV": "GPUSLICE_ENV_MPS_PINNED_DEVICE_MEM_LIMIT",
    "MODE_TIME": "GPUSLICE_MODE_TIME",
    "MODE_MPS": "GPUSLICE_MODE_MPS",
    "PRIORITY_HIGH": "GPUSLICE_PRIORITY_HIGH_WORD",
    "PRIORITY_NORMAL": "GPUSLICE_PRIORITY_NORMAL_WORD",
    "PRIORITY_LOW": "GPUSLICE_PRIORITY_LOW_WORD",
}
_TOKEN = re.compile(r"\b(?:GPUSLICE|CUDA_DEVICE|CUDA_MPS)_[A-Z0-9_]*[A-Z0-9]")
_C_LITERAL = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
_C_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def header_defines(name: str) -> Dict[str, object]:
    return {k: v for k, v in cheader._defines().items()
            if f"#define {k} " in cheader.header_path(name).read_text()}


def contract() -> Tuple[Set[str], Set[str]]:
    """limits.h's env names and priority words."""
    d = header_defines("limits.h")
    names = {str(v) for k, v in d.items() if k.startswith("GPUSLICE_ENV_")}
    words = {str(v) for k, v in d.items() if k.endswith("_WORD")}
    return names, words


def c_literals(path: Path) -> Iterator[Tuple[int, str]]:
    text = _C_COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), path.read_text())
    for m in _C_LITERAL.finditer(text):
        yield text.count("\n", 0, m.start()) + 1, m.group(1)


def py_literals(path: Path) -> Iterator[Tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    prose = {id(n.value) for n in ast.walk(tree)
             if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in prose:
            yield n.lineno, n.value


def sources() -> Iterator[Tuple[str, Iterator[Tuple[int, str]]]]:
    for d in C_DIRS:
        for p in sorted((REPO / d).glob("*.[ch]")):
            yield str(p.relative_to(REPO)), c_literals(p)
    for d in PY_DIRS:
        for p in sorted((REPO / d).rglob("*.py")):
            if "proto" not in p.parts:
                yield str(p.relative_to(REPO)), py_literals(p)


def test_cdi_says_what_the_header_says() -> None:
    copied = {k for k, v in vars(limits).items() if k.isupper() and isinstance(v, str)}
    assert copied - {"DEFAULT_PRIORITY"} == set(CDI_COPY)  # each one is compared below
    for attr, define in CDI_COPY.items():
        assert getattr(limits, attr) == cheader.string(define), attr
    assert set(limits.PRIORITIES) == contract()[1]
    assert limits.DEFAULT_PRIORITY == cheader.string("GPUSLICE_PRIORITY_NORMAL_WORD")


def test_the_numbers_are_one_each_and_zero_is_normal() -> None:
    codes = {w: cheader.constant(f"GPUSLICE_PRIORITY_{w}") for w in ("NORMAL", "HIGH", "LOW")}
    assert sorted(codes.values()) == list(range(cheader.constant("GPUSLICE_PRIORITIES")))
    assert codes["NORMAL"] == 0  # a zeroed field reads as the default


def test_the_accountants_check_lists_the_headers_words() -> None:
    checks = [m.group(1) for script in accountant._MIGRATIONS
              for m in re.finditer(r"CHECK \(priority IN \(([^)]*)\)\)", script)]
    assert len(checks) == 1
    listed = [w.strip().strip("'") for w in checks[0].split(",")]
    assert listed == list(limits.PRIORITIES)


def test_no_place_spells_the_contract_itself() -> None:
    names, words = contract()
    known = set(cheader._defines()) | {str(v) for v in cheader._defines().values()} | OTHER_ENV
    found: List[str] = []
    for where, literals in sources():
        if where in OWNERS:
            continue
        for line, text in literals:
            for token in _TOKEN.findall(text):
                if token in names or token.rstrip("_") in names:
                    found.append(f"{where}:{line}: {token!r} is limits.h's; use its #define")
                elif token not in known:
                    found.append(f"{where}:{line}: {token!r} is an env name no header defines")
            if text in words:
                found.append(f"{where}:{line}: {text!r} is a priority word of limits.h")
    assert found == []


def test_the_check_above_finds_a_spelled_name(tmp_path: Path) -> None:
    c = tmp_path / "x.c"
    c.write_text('/* "GPUSLICE_PRIORITY" in a comment */\nconst char *a = "GPUSLICE_PRIORITY";\n')
    py = tmp_path / "x.py"
    py.write_text('"""GPUSLICE_PRIORITY in prose."""\nA = f"GPUSLICE_CORE_LIMIT={1}"\n')
    assert list(c_literals(c)) == [(2, "GPUSLICE_PRIORITY")]
    assert list(py_literals(py)) == [(2, "GPUSLICE_CORE_LIMIT=")]
