"""The one rule for text a tenant chose (a container's name from its
annotations, a profile or device name read back from the accountant) where
it reaches a terminal or a label: native/include/gpuslice/text.h lists the
code points never shown as they are (controls with the C1 CSI, bidi
overrides and isolates, invisible format characters, line separators,
surrogates) and says why. The hook cleans a name as it enters; the readers
(`gpuslice status`, `top`, the exporter) clean again as they print, so a row
written by an older hook, or by hand, shows nothing the rule bars either.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Dict

from ocihook import cheader


@lru_cache(maxsize=None)
def _table() -> Dict[int, str]:
    """str.translate's table: every barred code point to a space."""
    table: Dict[int, str] = {}
    for span in cheader.string("GPUSLICE_TEXT_BARRED").split():
        lo, _, hi = span.partition("-")
        for cp in range(int(lo, 16), int(hi or lo, 16) + 1):
            table[cp] = " "
    return table


def shown(text: str) -> str:
    """text with every code point the rule bars made a space (as the hook does;
    text that was not UTF-8 reaches Python as surrogates, which are barred)."""
    return text.translate(_table())
