"""The layouts and names that C and Python share, read from C's own headers.

native/include/gpuslice/ holds one header per contract between the hook, the
shim and the host tools: region.h (a container's shared region), cardfile.h
(a card's file), statedir.h (the state dir's names), statedb.h (how the
accountant's database names itself), limits.h (a slice's environment names
and the priority's words and numbers). This module parses them with cffi, so
that each contract has one definition. An installed package carries copies
in ocihook/native/ (setup.py puts them there).

The #defines (a number, or one string literal: statedir.h's names) are read
here line by line, strictly, so that a name costs no cffi import; cffi reads
the structs (:func:`ffi`). Any other macro form is refused: the headers stay
plain.
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, Union

# Every shared header, in the order cffi reads them (none includes another).
HEADERS = ("region.h", "cardfile.h", "statedir.h", "statedb.h", "cdicache.h", "claim.h",
           "text.h", "limits.h")
_DIRS = (
    Path(__file__).resolve().parent / "native",  # an installed package
    Path(__file__).resolve().parent.parent / "native" / "include" / "gpuslice",  # the tree
)
_STRING_DEFINE = re.compile(r'^#define (GPUSLICE_[A-Z0-9_]+) "([ -!#-\[\]-~]*)"$', re.M)
_INT_DEFINE = re.compile(r"^#define (GPUSLICE_[A-Z0-9_]+) (0x[0-9a-fA-F]+|[1-9][0-9]*|0)(?:u|ull)?"
                         r"(?: +/\*.*\*/)?$")


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
def _defines() -> Dict[str, Union[int, str]]:
    """Every #define of the shared headers but the guards: a number or one
    string literal, read without cffi (whose import and parse cost ~50 ms, too
    much for a path name on a container's start). Any other form is refused,
    as cffi would refuse it."""
    found: Dict[str, Union[int, str]] = {}
    for name in HEADERS:
        for line in _body(name).splitlines():
            if not line.startswith("#"):
                continue
            m = _INT_DEFINE.match(line) or _STRING_DEFINE.match(line)
            if not m:
                raise HeaderError(f"{header_path(name)}: {line.strip()!r} is not a #define of "
                                  "a number or of one string literal, the only macros a "
                                  "shared header may hold")
            value = m.group(2)
            found[m.group(1)] = value if m.re is _STRING_DEFINE else int(value, 0)
    return found


@lru_cache(maxsize=None)
def ffi() -> Any:
    """One cffi.FFI that knows every shared struct (and the integer #defines)."""
    import cffi

    _defines()  # a header with a macro of another form is refused by name first
    result = cffi.FFI()
    for name in HEADERS:
        try:
            result.cdef(_STRING_DEFINE.sub("", _body(name)))
        except cffi.CDefError as e:
            said = [line.strip() for line in str(e).splitlines() if line.strip()]
            raise HeaderError(f"{header_path(name)}: not the plain C this reader takes: "
                              f"{'; '.join(said)}") from None
    return result


def _define(name: str, kind: type) -> Any:
    value = _defines().get(name)
    if not isinstance(value, kind):
        raise HeaderError(f"{name}: no such {kind.__name__} #define in {', '.join(HEADERS)}")
    return value


def constant(name: str) -> int:
    """An integer #define of a shared header."""
    return int(_define(name, int))


def string(name: str) -> str:
    """A string #define of a shared header (statedir.h's names)."""
    return str(_define(name, str))
