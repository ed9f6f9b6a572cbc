"""The layouts and names that C and Python share, read from C's own headers.

native/include/gpuslice/ holds one header per contract between the hook, the
shim and the host tools: region.h (a container's shared region), cardfile.h
(a card's file), statedir.h (the state dir's names), statedb.h (how the
accountant's database names itself). This module parses them with cffi, so
that each contract has one definition. An installed package carries copies
in ocihook/native/ (setup.py puts them there).

cffi reads declarations and integer #defines; a ``#define NAME "text"`` line
(statedir.h's names) is taken out before cffi sees the header and offered by
:func:`string`. Any other macro form is refused: the headers stay plain.
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, Tuple

# Every shared header, in the order cffi reads them (none includes another).
HEADERS = ("region.h", "cardfile.h", "statedir.h", "statedb.h")
_DIRS = (
    Path(__file__).resolve().parent / "native",  # an installed package
    Path(__file__).resolve().parent.parent / "native" / "include" / "gpuslice",  # the tree
)
_STRING_DEFINE = re.compile(r'^#define (GPUSLICE_[A-Z0-9_]+) "([ -!#-\[\]-~]*)"$', re.M)


class HeaderError(RuntimeError):
    """A shared header that is missing or not in the plain form this module reads."""


def header_path(name: str) -> Path:
    """Where the header is: beside the installed package, else in the tree."""
    for d in _DIRS:
        if (d / name).is_file():
            return d / name
    raise HeaderError(f"{name} not found in {' nor '.join(str(d) for d in _DIRS)}; "
                      "reinstall gpuslice")


def _body(name: str) -> str:
    """The declarations between the include guard's #define and the last #endif."""
    text = header_path(name).read_text()
    guard = "GPUSLICE_" + name.replace(".", "_").upper()
    try:
        return text.split(f"#define {guard}\n", 1)[1].rsplit("#endif", 1)[0]
    except IndexError:
        raise HeaderError(f"{header_path(name)}: no include guard {guard}") from None


@lru_cache(maxsize=None)
def _parsed() -> Tuple[Any, Dict[str, str]]:
    import cffi

    ffi = cffi.FFI()
    strings: Dict[str, str] = {}
    for name in HEADERS:
        body = _body(name)
        strings.update(_STRING_DEFINE.findall(body))
        try:
            ffi.cdef(_STRING_DEFINE.sub("", body))
        except cffi.CDefError as e:
            said = [line.strip() for line in str(e).splitlines() if line.strip()]
            raise HeaderError(f"{header_path(name)}: not the plain C this reader takes: "
                              f"{'; '.join(said)}") from None
    return ffi, strings


def ffi() -> Any:
    """One cffi.FFI that knows every shared struct."""
    return _parsed()[0]


@lru_cache(maxsize=None)
def _lib() -> Any:
    return ffi().dlopen(None)


def constant(name: str) -> int:
    """An integer #define of a shared header."""
    return int(getattr(_lib(), name))


def string(name: str) -> str:
    """A string #define of a shared header (statedir.h's names)."""
    try:
        return _parsed()[1][name]
    except KeyError:
        raise HeaderError(f"{name}: no such string #define in {', '.join(HEADERS)}") from None
