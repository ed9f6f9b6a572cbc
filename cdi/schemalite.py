"""A small checker for the JSON-schema keywords gpuslice's own schemas use.

Importing jsonschema costs over 100 ms, too much for commands that run on
every container start or spec refresh. This checker knows only the keywords
our schemas use (KEYWORDS), refuses a schema with any other, and yields
errors shaped like jsonschema's (same attributes, same messages) so that one
formatter, cdi.schema.first_problem, serves both. tests/test_schemalite.py
proves the two agree.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Tuple

KEYWORDS = frozenset({
    "$schema", "$id", "title", "description", "type", "enum", "pattern", "minimum",
    "maximum", "required", "properties", "additionalProperties", "items",
})
_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    # As JSON Schema counts: 20.0 is an integer, True is not.
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool))
    or (isinstance(v, float) and v.is_integer()),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


class UnsupportedSchema(ValueError):
    """The schema uses a keyword this checker does not implement."""


@dataclass
class SchemaError:
    validator: str
    validator_value: Any
    instance: Any
    schema: Dict[str, Any]
    message: str
    absolute_path: List[Any] = field(default_factory=list)


class Validator:
    def __init__(self, schema: Dict[str, Any]) -> None:
        self._check_keywords(schema)
        self.schema = schema

    def _check_keywords(self, schema: Any) -> None:
        if not isinstance(schema, dict):
            return
        unknown = set(schema) - KEYWORDS
        if unknown:
            raise UnsupportedSchema(f"schema keyword {sorted(unknown)[0]!r} is not supported")
        for sub in (schema.get("properties") or {}).values():
            self._check_keywords(sub)
        for key in ("items", "additionalProperties"):
            self._check_keywords(schema.get(key))

    def iter_errors(self, instance: Any) -> Iterator[SchemaError]:
        yield from self._errors(self.schema, instance, [])

    def _errors(self, schema: Dict[str, Any], inst: Any, path: List[Any]) -> Iterator[SchemaError]:
        def err(keyword: str, message: str) -> SchemaError:
            return SchemaError(keyword, schema[keyword], inst, schema, message, list(path))

        for keyword in schema:  # in schema order, as jsonschema walks it
            value = schema[keyword]
            if keyword == "type":
                types = value if isinstance(value, list) else [value]
                if not any(_TYPES[t](inst) for t in types):
                    yield err(keyword, f"{inst!r} is not of type "
                                       f"{', '.join(repr(t) for t in types)}")
            elif keyword == "enum":
                if not any(_equal(inst, v) for v in value):
                    yield err(keyword, f"{inst!r} is not one of {value!r}")
            elif keyword == "pattern" and isinstance(inst, str):
                if not re.search(value, inst):
                    yield err(keyword, f"{inst!r} does not match {value!r}")
            elif keyword == "minimum" and _TYPES["number"](inst) and inst < value:
                yield err(keyword, f"{inst!r} is less than the minimum of {value!r}")
            elif keyword == "maximum" and _TYPES["number"](inst) and inst > value:
                yield err(keyword, f"{inst!r} is greater than the maximum of {value!r}")
            elif keyword == "required" and isinstance(inst, dict):
                for name in value:
                    if name not in inst:
                        yield err(keyword, f"{name!r} is a required property")
            elif keyword == "properties" and isinstance(inst, dict):
                for name, sub in value.items():
                    if name in inst:
                        yield from self._errors(sub, inst[name], path + [name])
            elif keyword == "additionalProperties" and isinstance(inst, dict):
                extra = [k for k in inst if k not in schema.get("properties", {})]
                if value is False and extra:
                    yield err(keyword, f"Additional properties are not allowed "
                                       f"({', '.join(repr(k) for k in extra)} unexpected)")
                elif isinstance(value, dict):
                    for name in extra:
                        yield from self._errors(value, inst[name], path + [name])
            elif keyword == "items" and isinstance(inst, list):
                for i, item in enumerate(inst):
                    yield from self._errors(value, item, path + [i])


def _location(path: Any) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


# The schema's patterns, said as rules a person reads.
_PATTERN_RULES = {
    "^/": "must be an absolute path",
    "^[^=]+=.*$": "must have the form NAME=VALUE",
    "^[^/=]+/[^/=]+$": "must have the form vendor/class, e.g. gpuslice.io/gpu",
    "^[0-9]+\\.[0-9]+\\.[0-9]+$": "must be a version such as 0.5.0",
    "^[rwm]*$": "may hold only r, w and m",
}


def problems(validator: Any, doc: Any) -> List[Tuple[Tuple[Any, ...], str]]:
    """Every schema violation in ``doc``, shallowest first: (its path, one line
    saying where, the value, the rule). An unknown key is named with the
    known key nearest to it, if one is near.

    Shared by spec and configuration checks, so both speak the same way.
    """
    errors = sorted(validator.iter_errors(doc),
                    key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    out: List[Tuple[Tuple[Any, ...], str]] = []
    for err in errors:
        path = tuple(err.absolute_path)
        where = _location(path)
        if err.validator == "additionalProperties":
            known = sorted(err.schema.get("properties", {}))
            for key in sorted(set(err.instance) - set(known), key=str):  # YAML keys may be 1 or True
                out.append((path + (key,), f"{where}: unknown key {key!r}; {_nearest(key, known)}"))
        elif err.validator == "pattern" and err.validator_value in _PATTERN_RULES:
            out.append((path, f"{where}: {err.instance!r} {_PATTERN_RULES[err.validator_value]}"))
        else:
            out.append((path, f"{where}: {err.message}"))
    return out


def first_problem(validator: Any, doc: Any) -> Optional[str]:
    """The first of problems(): one line, or None for a valid document."""
    found = problems(validator, doc)
    return found[0][1] if found else None


def _nearest(key: Any, known: List[str]) -> str:
    import difflib  # only when a key is wrong: the commands' start-up stays lean

    near = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
    return f"did you mean {near[0]!r}?" if near else f"known keys are {', '.join(known)}"
