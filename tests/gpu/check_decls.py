"""Our declarations of the driver's types against the real cuda.h and nvml.h.

The shim and the fake drivers declare what they use of the CUDA driver API
and NVML themselves (native/shim/include/gpuslice/cuda_api.h, and the NVML
ABI block of tests/fakedriver/fake_nvml.c), so that nothing needs the CUDA
toolkit to build. CI cannot tell a wrong value there: the fakes share those
declarations. This check can, on a host with the toolkit: every enum value
and object-like #define, every struct's size and every field's offset
(nested ones too) is printed by one C program compiled twice, once on our
declarations and once on the real headers, and the two outputs compared.

A struct named `X_prefix` (or `fake_X_prefix`) declares the leading fields
of the real `X` only: its offsets are compared, not its size. Names the real
headers no longer declare are listed in ONLY_OURS with why.

    python3 tests/gpu/check_decls.py
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from table import check, report  # noqa: E402

CUDA_API = REPO / "native" / "shim" / "include" / "gpuslice" / "cuda_api.h"
FAKE_NVML = REPO / "tests" / "fakedriver" / "fake_nvml.c"
# The legacy PCI info layout of the _v1/_v2 entry points: nvml.h declares
# only the current nvmlPciInfo_t (checked), not the older struct. The CUDA 2.0
# array descriptors (32-bit sizes) of cuArrayCreate/cuArray3DCreate: cuda.h
# declares them only for the driver's own build (__CUDA_API_VERSION_INTERNAL).
ONLY_OURS = {"nvmlPciInfoLegacy_t", "CUDA_ARRAY_DESCRIPTOR_v1", "CUDA_ARRAY3D_DESCRIPTOR_v1"}


def fake_nvml_abi() -> str:
    """fake_nvml.c's block between "NVML's ABI" and "state", without its own
    opaque handle struct and its static asserts."""
    text = FAKE_NVML.read_text()
    block = text.split("NVML's ABI */", 1)[1].split("/* ---", 1)[0]
    block = re.sub(r"struct nvmlDevice_st \{[^}]*\};", "", block)
    block = re.sub(r"^#define FAKE_\w+(?:.*\\\n)*.*$", "", block, flags=re.M)  # the fake's own
    return "\n".join(line for line in block.splitlines() if not line.startswith("_Static_assert"))


def toolkit_include() -> Optional[Path]:
    """The folder with cuda.h and nvml.h: $GPUSLICE_CUDA_INCLUDE, else nvcc's."""
    given = os.environ.get("GPUSLICE_CUDA_INCLUDE")
    if given:
        return Path(given) if (Path(given) / "cuda.h").is_file() else None
    nvcc = shutil.which("nvcc")
    roots = [Path(nvcc).resolve().parent.parent] if nvcc else []
    roots += [Path("/usr/local/cuda")]
    for root in roots:
        for inc in (root / "include", root / "targets" / "x86_64-linux" / "include"):
            if (inc / "cuda.h").is_file() and (inc / "nvml.h").is_file():
                return inc
    return None


def items(source: str) -> Tuple[List[str], List[Tuple[str, List[str], bool]], List[str]]:
    """(enum constants, [(struct, field paths, compare size)], numeric #defines)
    of our declarations, read by pycparser from their preprocessed text."""
    from pycparser import c_ast, c_parser

    # pycparser reads ISO C, not glibc's headers: stand-ins for the two ours include.
    stubs = Path(tempfile.mkdtemp(prefix="gs-decls-stubs-"))
    (stubs / "stddef.h").write_text("typedef unsigned long size_t;\n")
    (stubs / "stdint.h").write_text("typedef unsigned char uint8_t; typedef unsigned int "
                                    "uint32_t; typedef int int32_t; typedef unsigned long "
                                    "uint64_t; typedef long int64_t;\n")
    pre = subprocess.run(["gcc", "-E", "-P", "-nostdinc", f"-I{stubs}", "-x", "c", "-",
                          f"-I{CUDA_API.parent.parent}"],
                         input=source, capture_output=True, text=True, check=True).stdout
    shutil.rmtree(stubs)
    ast = c_parser.CParser().parse(pre)
    enums: List[str] = []
    structs: List[Tuple[str, List[str], bool]] = []

    def fields(decls, prefix: str) -> List[str]:
        out: List[str] = []
        for d in decls or []:
            out.append(prefix + d.name)
            inner = d.type.type if isinstance(d.type, c_ast.TypeDecl) else None
            if isinstance(inner, c_ast.Struct) and inner.decls:
                out += fields(inner.decls, prefix + d.name + ".")
        return out

    class Visitor(c_ast.NodeVisitor):
        def visit_Enumerator(self, node):  # noqa: N802 (pycparser's name)
            enums.append(node.name)

        def visit_Typedef(self, node):  # noqa: N802
            t = node.type.type if isinstance(node.type, c_ast.TypeDecl) else None
            if isinstance(t, c_ast.Struct) and t.decls:
                structs.append((node.name, fields(t.decls, ""), True))
            self.generic_visit(node)

    Visitor().visit(ast)
    defines = re.findall(r"^#define ((?:NVML|nvml|CU|CUDA)\w*) \S", source, re.M)
    return enums, structs, [d for d in defines if not d.endswith("_H")]


def program(enums: List[str], structs: List[Tuple[str, List[str], bool]],
            defines: List[str]) -> str:
    lines = ["#include <stddef.h>", "#include <stdio.h>", "int main(void) {"]
    for name in enums + defines:
        lines.append(f'printf("{name} %lld\\n", (long long)({name}));')
    for name, paths, _ in structs:
        real = re.sub(r"^fake_|_prefix$", "", name)
        t = f"GS_T({name}, {real})"  # our name on our side, the real one on theirs
        if not name.endswith("_prefix"):
            lines.append(f'printf("sizeof {real} %zu\\n", sizeof({t}));')
        for p in paths:
            lines.append(f'printf("offsetof {real}.{p} %zu\\n", offsetof({t}, {p}));')
    lines += ["return 0;", "}"]
    return "\n".join(lines) + "\n"


def run_program(header: str, body: str, include: List[str], work: Path, tag: str
                ) -> Tuple[Optional[Dict[str, str]], str]:
    src = work / f"{tag}.c"
    src.write_text(header + body)
    exe = work / tag
    res = subprocess.run(["gcc", "-std=gnu11", "-w", *include, "-o", str(exe), str(src)],
                         capture_output=True, text=True)
    if res.returncode:
        return None, res.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    return dict(line.rsplit(" ", 1) for line in out.splitlines()), ""


def first_error(stderr: str) -> str:
    found = [line for line in stderr.splitlines() if "error:" in line]
    if found:
        print(found[0], file=sys.stderr)
        return found[0].split("error:", 1)[1].strip()
    return "0 errors" if not stderr.strip() else stderr.strip().splitlines()[0]


def main() -> int:
    inc = toolkit_include()
    check("the toolkit's cuda.h and nvml.h", "present", inc, inc is not None)
    if inc is None:
        return report()
    ours_src = f'#include "gpuslice/cuda_api.h"\n{fake_nvml_abi()}\n'
    enums, structs, defines = items(ours_src)
    structs = [s for s in structs if s[0] not in ONLY_OURS]
    body = program(enums, structs, defines)
    work = Path(tempfile.mkdtemp(prefix="gs-decls-"))
    ours, err = run_program(ours_src + "#define GS_T(ours, real) ours\n", body,
                            [f"-I{CUDA_API.parent.parent}"], work, "ours")
    check("our declarations compile", "0 errors", first_error(err), ours is not None)
    real, err = run_program("#include <cuda.h>\n#include <nvml.h>\n"
                            "#define GS_T(ours, real) real\n", body, [f"-I{inc}"], work, "real")
    # A name the real headers lack fails the compile: say which.
    missing = sorted(set(re.findall(r"'(\w+)' undeclared|unknown type name '(\w+)'", err)))
    check("every name is the real headers'", "0 errors",
          ", ".join(a or b for a, b in missing) or first_error(err),
          real is not None)
    if ours is None or real is None:
        return report()
    for key in ours:
        check(key, real.get(key, "missing"), ours[key], ours[key] == real.get(key))
    print(f"compared {len(ours)} values: {len(enums)} enum values, {len(defines)} #defines, "
          f"{len(structs)} structs ({sum(len(s[1]) for s in structs)} fields) "
          f"against {inc}", file=sys.stderr)
    shutil.rmtree(work, ignore_errors=True)
    return report()


if __name__ == "__main__":
    sys.exit(main())
