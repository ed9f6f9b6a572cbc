"""native/include/gpuslice/: the headers that the hook, the shim and the host
tools share are read by Python (ocihook.cheader, through cffi) exactly as the
C compiler reads them."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Dict, List

import pytest

from ocihook import cheader

INCLUDE = Path(__file__).resolve().parent.parent / "native" / "include"


def _structs() -> Dict[str, List[str]]:
    """Every struct of the shared headers and its fields, as cffi knows them."""
    ffi = cheader.ffi()
    out: Dict[str, List[str]] = {}
    for header in cheader.HEADERS:
        for name in re.findall(r"^struct (\w+) \{", (INCLUDE / "gpuslice" / header).read_text(),
                               re.M):
            out[name] = [f for f, _ in ffi.typeof(f"struct {name}").fields]
    return out


def _defines() -> Dict[str, str]:
    """Every #define of the shared headers but the include guards: name -> kind."""
    found: Dict[str, str] = {}
    for header in cheader.HEADERS:
        text = (INCLUDE / "gpuslice" / header).read_text()
        for name, value in re.findall(r"^#define (\w+)(?: (.*))?$", text, re.M):
            if name.endswith("_H"):
                continue
            found[name] = "string" if value.lstrip().startswith('"') else "int"
    return found


def test_every_shared_header_is_read() -> None:
    on_disk = sorted(p.name for p in (INCLUDE / "gpuslice").glob("*.h"))
    assert sorted(cheader.HEADERS) == on_disk


def test_python_and_c_agree_on_every_layout_and_name(tmp_path: Path) -> None:
    structs, defines = _structs(), _defines()
    assert structs and any(kind == "string" for kind in defines.values())
    lines = ["#include <stddef.h>", "#include <stdio.h>"]
    lines += [f'#include "gpuslice/{h}"' for h in cheader.HEADERS]
    lines.append("int main(void) {")
    for name, fields in structs.items():
        lines.append(f'printf("sizeof {name} %zu\\n", sizeof(struct {name}));')
        lines += [f'printf("offsetof {name}.{f} %zu\\n", offsetof(struct {name}, {f}));'
                  for f in fields]
    for name, kind in defines.items():
        fmt = "%s" if kind == "string" else "%llu"
        cast = "" if kind == "string" else "(unsigned long long)"
        lines.append(f'printf("define {name} {fmt}\\n", {cast}{name});')
    lines.append("return 0; }")
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines) + "\n")
    subprocess.run(["gcc", "-std=c11", "-Wall", "-Werror", "-I", str(INCLUDE), "-o",
                    str(tmp_path / "layout"), str(src)], check=True)
    c_says = subprocess.run([str(tmp_path / "layout")], check=True, capture_output=True,
                            text=True).stdout.splitlines()

    ffi = cheader.ffi()
    python_says = []
    for name, fields in structs.items():
        python_says.append(f"sizeof {name} {ffi.sizeof(f'struct {name}')}")
        python_says += [f"offsetof {name}.{f} {ffi.offsetof(f'struct {name}', f)}"
                        for f in fields]
    for name, kind in defines.items():
        value = cheader.string(name) if kind == "string" else cheader.constant(name)
        python_says.append(f"define {name} {value}")
    assert python_says == c_says


def test_a_header_that_is_not_plain_is_refused(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    for header in cheader.HEADERS:
        (tmp_path / header).write_text((INCLUDE / "gpuslice" / header).read_text())
    statedir = tmp_path / "statedir.h"
    statedir.write_text(statedir.read_text().replace(
        '#define GPUSLICE_REGION_FILE "region"', '#define GPUSLICE_REGION_FILE ("reg" "ion")'))
    monkeypatch.setattr(cheader, "_DIRS", (tmp_path,))
    cheader._defines.cache_clear()
    cheader.ffi.cache_clear()
    try:
        for use in (cheader.ffi, lambda: cheader.string("GPUSLICE_CONTAINERS_DIR")):
            with pytest.raises(cheader.HeaderError,
                               match=r"statedir\.h: .*GPUSLICE_REGION_FILE.* is not a #define "
                                     "of a number or of one string literal"):
                use()
    finally:
        cheader._defines.cache_clear()
        cheader.ffi.cache_clear()


def test_a_missing_header_says_where_it_looked(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cheader, "_DIRS", (tmp_path,))
    with pytest.raises(cheader.HeaderError, match=f"region.h not found in {tmp_path}; "
                                                  "reinstall gpuslice"):
        cheader.header_path("region.h")
