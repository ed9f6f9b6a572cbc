"""Structural checks of a CDI spec document against the package's JSON schema.

jsonschema is imported only when a check is asked for: the container start
path never validates a whole spec.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, Optional

from cdi.spec import SpecError

SCHEMA_PATH = Path(__file__).with_name("schema.json")


@lru_cache(maxsize=None)
def _validator() -> Any:
    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text())
    return jsonschema.Draft7Validator(schema)


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


def first_problem(validator: Any, doc: Any) -> Optional[str]:
    """The first schema violation in ``doc`` as one line: where, the value, the rule.

    Shared by spec and configuration checks, so both speak the same way.
    """
    errors = sorted(validator.iter_errors(doc),
                    key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if not errors:
        return None
    err = errors[0]
    where = _location(err.absolute_path)
    if err.validator == "additionalProperties":
        known = sorted(err.schema.get("properties", {}))
        extra = sorted(set(err.instance) - set(known))
        return f"{where}: unknown key {extra[0]!r}; known keys are {', '.join(known)}"
    if err.validator == "pattern" and err.validator_value in _PATTERN_RULES:
        return f"{where}: {err.instance!r} {_PATTERN_RULES[err.validator_value]}"
    return f"{where}: {err.message}"


def check_document(doc: Any) -> None:
    """Raise SpecError naming the first structural problem of a spec document."""
    problem = first_problem(_validator(), doc)
    if problem:
        raise SpecError(problem)


def load_document(text: str, source: str) -> Dict[str, Any]:
    """Parse a spec file's text (JSON or YAML) into a document."""
    import yaml

    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise SpecError(f"{source}: not valid YAML or JSON{where}") from None
    if not isinstance(doc, dict):
        raise SpecError(f"{source}: a CDI spec must be a mapping, found {type(doc).__name__}")
    return doc
