"""A small, exact YAML writer for spec documents (maps, lists, scalars).

PyYAML's emitter costs more time than the rest of `cdi generate` together.
Our documents need no anchors, tags or multi-line text, so every string is
written as a double-quoted scalar with YAML's own escapes; block style keeps
the file readable. A round-trip test proves
yaml.safe_load gives back the document.
"""
from __future__ import annotations

import json
import re
from typing import Any, List

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Plain words YAML 1.1 reads as booleans or null, in any case.
_RESERVED_WORDS = frozenset({"true", "false", "yes", "no", "on", "off", "null"})


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _printable(code: int) -> bool:
    # YAML's printable set, less the characters YAML reads as line breaks
    # (U+0085, U+2028, U+2029) and the byte-order mark.
    return (0x20 <= code <= 0x7E or 0xA0 <= code <= 0xD7FF
            or (0xE000 <= code <= 0xFFFD and code not in (0x2028, 0x2029, 0xFEFF))
            or code >= 0x10000)


# Strings that need no escape at all: most of a spec (paths, names, env).
_NO_ESCAPE = re.compile(r'^[ !#-\[\]-~]*$')


def quote(text: str) -> str:
    """``text`` as a YAML double-quoted scalar."""
    if _NO_ESCAPE.match(text):
        return f'"{text}"'
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif _printable(code):
            out.append(ch)
        elif code <= 0xFF:
            out.append(f"\\x{code:02x}")
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, float) and value != value:  # NaN has no JSON form
        return ".nan"
    return json.dumps(value)


def _key(key: Any) -> str:
    text = str(key)
    plain = _PLAIN_KEY.match(text) and text.lower() not in _RESERVED_WORDS
    return text if plain else quote(text)


def _emit(value: Any, indent: str, out: List[str], first_prefix: str) -> None:
    """Write ``value`` whose first line starts with ``first_prefix`` (the rest with indent)."""
    if isinstance(value, dict) and value:
        prefix = first_prefix
        for k, v in value.items():
            head = f"{prefix}{_key(k)}:"
            if isinstance(v, (dict, list)) and v:
                out.append(head)
                _emit(v, indent + "  ", out, indent + "  ")
            else:
                out.append(f"{head} {_empty_or_scalar(v)}")
            prefix = indent
    elif isinstance(value, list) and value:
        prefix = first_prefix
        for item in value:
            if isinstance(item, (dict, list)) and item:
                _emit(item, indent + "  ", out, prefix + "- ")
            else:
                out.append(f"{prefix}- {_empty_or_scalar(item)}")
            prefix = indent
    else:
        out.append(first_prefix + _empty_or_scalar(value))


def _empty_or_scalar(value: Any) -> str:
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    return _scalar(value)


def dump(doc: Any) -> str:
    out: List[str] = []
    _emit(doc, "", out, "")
    return "\n".join(out) + "\n"
