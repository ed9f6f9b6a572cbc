"""Reading YAML (JSON included, being a subset) with errors that say where."""
from __future__ import annotations

from typing import Any


class YamlError(ValueError):
    """Text that is not YAML; the message gives the line, column and problem."""


def load(text: str) -> Any:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or "not valid YAML"
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise YamlError(f"{where}{problem}") from None
