"""Structural checks of a CDI spec document against the package's JSON schema.

jsonschema is imported only when a check is asked for: the container start
path never validates a whole spec.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict

from cdi.schemalite import first_problem
from cdi.spec import SpecError

SCHEMA_PATH = Path(__file__).with_name("schema.json")


@lru_cache(maxsize=None)
def _validator() -> Any:
    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text())
    return jsonschema.Draft7Validator(schema)


def check_document(doc: Any) -> None:
    """Raise SpecError naming the first structural problem of a spec document."""
    problem = first_problem(_validator(), doc)
    if problem:
        raise SpecError(problem)


def load_document(text: str, source: str) -> Dict[str, Any]:
    """Parse a spec file's text (JSON or YAML) into a document."""
    from cdi import yamlin

    try:
        doc = yamlin.load(text, aliases=True)  # the CDI spec is YAML; anchors are YAML
    except yamlin.YamlError as e:
        raise SpecError(f"{source}: not valid YAML or JSON: {e}") from None
    if not isinstance(doc, dict):
        raise SpecError(f"{source}: a CDI spec must be a mapping, found {type(doc).__name__}")
    return doc
