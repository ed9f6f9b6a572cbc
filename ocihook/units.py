"""Parsing of the two limits a slice carries: memory and compute.

Memory: ``4GiB``, ``4096MiB``, ``4g``, ``512m`` or plain bytes; at least
128 MiB and a multiple of 128 MiB. Compute: a whole percent, 1 to 100, with 0
or empty meaning no cap. Every refusal names the value and the rule.
"""
from __future__ import annotations

import re
from typing import Union

MIB = 1024 * 1024
MEMORY_STEP_MIB = 128
MEMORY_MIN_MIB = 128

_SUFFIX_MIB = {
    "k": 1 / 1024, "kb": 1 / 1024, "kib": 1 / 1024,
    "m": 1, "mb": 1, "mib": 1,
    "g": 1024, "gb": 1024, "gib": 1024,
    "t": 1024 * 1024, "tb": 1024 * 1024, "tib": 1024 * 1024,
}
# Docker's and Kubernetes' habits (g, Gi, GiB) all mean powers of 1024 here:
# a GPU's memory is counted in MiB, never in decimal megabytes.
_MEMORY_RE = re.compile(r"^\s*([0-9]+)\s*([a-zA-Z]*)\s*$")
_CORES_RE = re.compile(r"[0-9]{1,9}")
# More digits than any card's bytes need; int() of thousands of them is
# refused by Python itself (sys.set_int_max_str_digits).
_MEMORY_MAX_DIGITS = 24


class LimitError(ValueError):
    """A limit that breaks a rule; the message names the value and the rule."""


def parse_memory_mib(value: Union[str, int]) -> int:
    """Return the memory limit in MiB, or raise LimitError."""
    if isinstance(value, bool):
        raise LimitError(f"memory {value!r} is not a size; use e.g. 4GiB, 4096MiB or 512m")
    if isinstance(value, int):
        text = str(value)
    elif isinstance(value, str):
        text = value
    else:
        raise LimitError(f"memory {value!r} is not a size; use e.g. 4GiB, 4096MiB or 512m")
    m = _MEMORY_RE.match(text)
    if not m:
        raise LimitError(f"memory {text!r} is not a size; use e.g. 4GiB, 4096MiB, 4g, 512m "
                         "or plain bytes")
    if len(m.group(1)) > _MEMORY_MAX_DIGITS:
        raise LimitError(f"memory {text[:40]!r}... has more digits than any GPU's memory "
                         "needs; use e.g. 4GiB, 4096MiB or 512m")
    number, suffix = int(m.group(1)), m.group(2).lower()
    if suffix in ("", "b"):
        size_bytes = number
    elif suffix in ("gi", "mi", "ki", "ti"):
        size_bytes = int(number * _SUFFIX_MIB[suffix[0]] * MIB)
    elif suffix in _SUFFIX_MIB:
        size_bytes = int(number * _SUFFIX_MIB[suffix] * MIB)
    else:
        raise LimitError(f"memory {text!r} has unknown unit {m.group(2)!r}; use B, KiB, MiB, "
                         "GiB or TiB (k, m, g, t)")
    if size_bytes % MIB:
        raise LimitError(f"memory {text!r} is not a whole number of MiB; it must be a "
                         f"multiple of {MEMORY_STEP_MIB} MiB: {_nearest(size_bytes / MIB)}")
    mib = size_bytes // MIB
    if mib < MEMORY_MIN_MIB:
        raise LimitError(f"memory {text!r} is under the minimum of {MEMORY_MIN_MIB} MiB; "
                         f"write {format_mib(MEMORY_MIN_MIB)} or more")
    if mib % MEMORY_STEP_MIB:
        shown = text if text.strip() == f"{mib}MiB" else f"{text} ({mib} MiB)"
        raise LimitError(f"memory {shown!r} is not a multiple of {MEMORY_STEP_MIB} MiB: "
                         f"{_nearest(mib)}")
    return mib


def _nearest(mib: float) -> str:
    """The valid sizes on either side of mib (which is off the grain), as a fix
    to write; only the one above where the one below is under the minimum."""
    below = int(mib // MEMORY_STEP_MIB) * MEMORY_STEP_MIB
    above = below + MEMORY_STEP_MIB
    if below < MEMORY_MIN_MIB:
        return f"write {format_mib(above)}"
    return f"write {format_mib(below)} or {format_mib(above)}"


def parse_cores(value: Union[str, int, None]) -> int:
    """Return the compute cap in percent (0 = no cap), or raise LimitError."""
    if value is None or value == "":
        return 0
    not_percent = LimitError(f"cores {value!r} is not a whole percent from 0 to 100; write "
                             "e.g. 30 or 30%, or leave cores out for no cap")
    if isinstance(value, bool):
        raise not_percent
    if isinstance(value, str):
        # ASCII digits only: str.isdigit() also takes '²', which int() does not.
        text = value.strip().rstrip("%")
        if not _CORES_RE.fullmatch(text):
            raise not_percent
        number = int(text)
    elif isinstance(value, int):
        number = value
    else:
        raise not_percent
    if not 0 <= number <= 100:
        raise LimitError(f"cores {value!r} is out of range; it must be 1 to 100 "
                         "(0 or empty for no cap)")
    return number


def format_mib(mib: int) -> str:
    """Shortest exact form of a memory size: 4096 -> '4GiB', 640 -> '640MiB'."""
    if mib % 1024 == 0:
        return f"{mib // 1024}GiB"
    return f"{mib}MiB"
