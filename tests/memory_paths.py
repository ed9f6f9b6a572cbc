"""The audit of every driver entry point that makes device memory (issue 26).

Three sources must agree, and this module reads each:

- the shim's table of driver functions (native/shim/src/functions.h): what
  it hooks;
- the table "Every path to device memory" in native/shim/README.md: each
  entry point, what the shim does, how it is tested;
- the driver's entry points themselves: MEMORY_API names the families that
  can make memory resident or reserve it. In CI the fake driver's exports
  are checked against it; on a GPU host (tests/gpu/check_memory_paths.py)
  the real libcuda.so.1's, so that a new driver entry point of one of those
  families cannot slip in unseen.

A per-thread variant (_ptsz, _ptds) of an entry point the shim does not hook
is accounted for by its base name: the two differ only in the default stream
they use. A hooked one must be hooked in every variant the driver exports:
the table lists each.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, NamedTuple, Set

REPO = Path(__file__).resolve().parent.parent
FUNCTIONS_H = REPO / "native" / "shim" / "src" / "functions.h"
README = REPO / "native" / "shim" / "README.md"
HEADING = "## Every path to device memory"

# What the shim does, the first word of a row's second column.
HOOKED_ACTIONS = {"charged", "released", "tracked", "view"}
ACTIONS = HOOKED_ACTIONS | {"context", "none", "host", "imported"}

# The families of driver entry points that can make device memory resident
# or reserve it, or that a reader would ask about (host memory, imports).
MEMORY_API = re.compile(r"""^cu(?:
    Mem(?:Alloc|Free|Create|Release|Map|Unmap|Address(?:Reserve|Free)|Import|Export|Retain
        |Pool|Host(?:Alloc|Register|Unregister|GetDevicePointer)|Prefetch|Advise|Discard
        |GetInfo|(?:Set|Get|GetDefault)MemPool|SetAccess)
  | Device(?:Get|Set|GetDefault)MemPool | DeviceTotalMem
  | (?:Array|Array3D|MipmappedArray)(?:Create|Destroy)
  | Graph(?:Instantiate|Upload|Launch|ExecUpdate|ExecDestroy|AddMemAllocNode|AddMemFreeNode
        |AddNode|NodeSetParams|ExecNodeSetParams|AddChildGraphNode|MemAllocNodeGetParams
        |ConditionalHandleCreate|Create$|Destroy$|Clone$)
  | DeviceGraphMemTrim | Device(?:Get|Set)GraphMemAttribute
  | StreamBeginCapture | StreamEndCapture | StreamAttachMemAsync
  | Ipc(?:Open|Get)MemHandle
  | ImportExternalMemory | ExternalMemoryGetMapped | DestroyExternalMemory
  | Graphics\w*Register(?!Resource) | GraphicsMapResources | GraphicsResourceGetMapped
  | GraphicsSubResourceGetMappedArray | GL(?:MapBufferObject|RegisterBufferObject)
  | (?:GL|VDPAU)?CtxCreate | CtxDestroy | CtxSetLimit | DevicePrimaryCtx(?:Retain|Release|Reset)
  | GreenCtx(?:Create|Destroy) | CtxFromGreenCtx | Ctx(?:Attach|Detach)
  | Module(?:Load|Unload) | Library(?:Load|Unload)
  | Multicast(?:Create|AddDevice|BindMem|BindAddr|Unbind)
  | (?:Tex|Surf)ObjectCreate
  | CheckpointProcess(?:Checkpoint|Restore)
  | Launch(?:Kernel|CooperativeKernel)
)""", re.X)

PER_THREAD = re.compile(r"_(?:ptsz|ptds)$")


class Row(NamedTuple):
    names: List[str]
    action: str
    text: str
    tests: str


def hooks() -> Dict[str, str]:
    """The shim's CUDA rows: name -> HOOK or REAL."""
    text = FUNCTIONS_H.read_text()
    return {m.group(2): m.group(1) for m in
            re.finditer(r"\b(HOOK|REAL)\(CUDA,\s*(cu\w+),", text)}


def launch_rows() -> Set[str]:
    """The compute limiter's rows (GS_LAUNCH_FUNCTIONS, GS_SYNC_FUNCTIONS)."""
    text = FUNCTIONS_H.read_text()
    block = text.split("#define GS_LAUNCH_FUNCTIONS", 1)[1].split("#define GS_FUNCTIONS", 1)[0]
    return set(re.findall(r"HOOK\(CUDA,\s*(cu\w+),", block))


def table(readme: Path = README) -> List[Row]:
    """The rows of the README's table, in order."""
    text = readme.read_text()
    if HEADING not in text:
        raise AssertionError(f"{readme}: no {HEADING!r} section")
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) != 3 or set(cells[0]) <= {"-", " "}:
            continue
        names = re.findall(r"`(cu\w+)`", cells[0])
        if not names:
            continue  # the header
        action = re.match(r"\*\*(\w+)\*\*", cells[1])
        rows.append(Row(names, action.group(1) if action else "", cells[1], cells[2]))
    return rows


def accounted(name: str, rows: List[Row]) -> bool:
    """Whether the table accounts for a driver export: listed, or the
    per-thread variant of a listed entry point the shim does not hook."""
    listed = {n: r.action for r in rows for n in r.names}
    if name in listed:
        return True
    base = PER_THREAD.sub("", name)
    return base != name and base in listed and listed[base] not in HOOKED_ACTIONS


def problems(rows: List[Row], hooked: Dict[str, str], launches: Set[str]) -> List[str]:
    """Everything that makes the table disagree with the shim; [] when none."""
    out: List[str] = []
    seen: Dict[str, int] = {}
    for i, r in enumerate(rows):
        if r.action not in ACTIONS:
            out.append(f"{r.names}: action {r.action!r} is none of {sorted(ACTIONS)}")
        for n in r.names:
            if n in seen:
                out.append(f"{n}: listed twice")
            seen[n] = i
            if r.action in HOOKED_ACTIONS and hooked.get(n) != "HOOK":
                out.append(f"{n}: the table says {r.action}, but functions.h does not hook it")
            if not MEMORY_API.match(n) and hooked.get(n) != "HOOK":
                out.append(f"{n}: neither a memory entry point (MEMORY_API) nor hooked")
        if r.action in {"charged", "released", "tracked"} and "::test_" not in r.tests:
            out.append(f"{r.names}: {r.action}, but no CI test is named")
        for ref in re.findall(r"`(tests/[\w/]+\.py)::(test_\w+)`", r.tests):
            path = REPO / ref[0]
            if not path.is_file() or f"def {ref[1]}(" not in path.read_text():
                out.append(f"{r.names}: {ref[0]}::{ref[1]} does not exist")
    entry = {"cuInit", "cuGetProcAddress", "cuGetProcAddress_v2"}
    for n, kind in sorted(hooked.items()):
        if kind == "HOOK" and n not in seen and n not in launches and n not in entry:
            out.append(f"{n}: hooked in functions.h but missing from the README's table")
    return out


def unaccounted(exports: List[str], rows: List[Row]) -> List[str]:
    """Driver exports of the memory families the table does not account for."""
    return sorted({e for e in exports if MEMORY_API.match(e) and not accounted(e, rows)})
