"""The shim's charging rules call down only (native/shim/README.md, "How it works").

The API families (cuda_ctx.c, cuda_mem.c, graphs.c, nvml_hooks.c, launch.c)
call the charging rules (account.c); it calls what lies beneath it (the
region's books in ledger.c, what the driver holds in pools.c, graph_mem.c
and ctx_cost.c, devices.c); nothing beneath calls back up. Read from the
sources: which file defines each gs_ function, and which files call it.
"""
import re
from pathlib import Path
from typing import Dict, Set

SRC = Path(__file__).resolve().parent.parent / "native" / "shim" / "src"

FAMILIES = {"cuda_ctx.c", "cuda_mem.c", "graphs.c", "nvml_hooks.c", "launch.c"}
RULES = "account.c"
BENEATH = {"ledger.c", "pools.c", "graph_mem.c", "ctx_cost.c", "devices.c"}

DEFINITION = re.compile(r"^[A-Za-z_][\w \*]*?\b(gs_\w+)\s*\([^;{]*?\)\s*\{", re.M | re.S)
CALL = re.compile(r"\b(gs_\w+)\s*\(")


def _code(path: Path) -> str:
    return re.sub(r"/\*.*?\*/", "", path.read_text(), flags=re.S)


def calls_between_files(src: Path = SRC) -> Dict[str, Set[str]]:
    """file -> the files whose gs_ functions it calls (itself left out)."""
    codes = {p.name: _code(p) for p in sorted(src.glob("*.c"))}
    owner = {m.group(1): name for name, code in codes.items() for m in DEFINITION.finditer(code)}
    return {name: {owner[c] for c in CALL.findall(code) if c in owner and owner[c] != name}
            for name, code in codes.items()}


def test_the_parts_named_here_exist() -> None:
    names = {p.name for p in SRC.glob("*.c")}
    assert FAMILIES | {RULES} | BENEATH <= names


def test_the_reader_sees_the_calls_it_must() -> None:
    # Without these the checks below would pass on a reader that sees nothing.
    edges = calls_between_files()
    assert {"ledger.c", "pools.c", "graph_mem.c", "ctx_cost.c"} <= edges[RULES]
    assert RULES in edges["cuda_mem.c"] and RULES in edges["graphs.c"]


def test_the_charging_rules_never_call_up_into_an_api_family() -> None:
    assert calls_between_files()[RULES] & FAMILIES == set()


def test_what_lies_beneath_the_rules_never_calls_up() -> None:
    edges = calls_between_files()
    up = {f: sorted(edges[f] & (FAMILIES | {RULES})) for f in sorted(BENEATH)}
    assert {f: u for f, u in up.items() if u} == {}


def test_a_call_up_is_seen(tmp_path: Path) -> None:
    (tmp_path / "account.c").write_text("int gs_rules(void)\n{\n    return gs_family();\n}\n")
    (tmp_path / "cuda_mem.c").write_text("int gs_family(void) { return gs_rules(); }\n")
    assert calls_between_files(tmp_path) == {"account.c": {"cuda_mem.c"},
                                             "cuda_mem.c": {"account.c"}}


def test_the_readme_and_the_internal_header_name_every_source_file() -> None:
    # The lists of parts are kept by hand: a file added or gone shows here.
    readme = (SRC.parent / "README.md").read_text()
    table = set(re.findall(r"`src/([\w.]+)`", readme.split("## How it works", 1)[1]))
    files = {p.name for p in SRC.iterdir() if p.suffix in (".c", ".h")}
    assert table == files
    header = (SRC / "gpuslice.h").read_text().split("*/", 1)[0]
    assert set(re.findall(r"^ \*\s+(\w+\.c)\b", header, re.M)) == {f for f in files
                                                                   if f.endswith(".c")}
