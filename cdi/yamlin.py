"""Reading YAML (JSON included, being a subset) with errors that say where.

The text may come from anyone who can write the file, so what it costs to
read is bounded before a Python object is built: nesting at most MAX_DEPTH
collections deep (libyaml's scanner slows with the square of the depth, and
building and printing the objects recurses), and anchors and aliases
(``&name``, ``*name``) either refused or bounded, so that a few lines of
aliases (a "billion laughs") cannot stand for more than MAX_ALIAS_VALUES
values. A first pass over libyaml's events checks both and stops at the first
breach; only then are objects built.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

MAX_DEPTH = 64  # gpuslice's own files nest 7 deep at most (a CDI mount's options)
MAX_ALIAS_VALUES = 100_000


class YamlError(ValueError):
    """Text that is not YAML, or that breaks a bound; the message gives the
    line, column and problem."""


def _where(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""


_LOADER: Any = None


def _loader() -> Any:
    """libyaml's safe loader, whose conversion errors (a timestamp such as
    2001-13-01, an integer of thousands of digits, `!!timestamp x`) say where,
    as its other errors do."""
    global _LOADER
    if _LOADER is None:
        import yaml

        class Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
            def construct_object(self, node: Any, deep: bool = False) -> Any:
                try:
                    return super().construct_object(node, deep)
                except yaml.YAMLError:
                    raise
                except Exception as e:  # noqa: BLE001 - the constructor's, for a tag's text:
                    # ValueError, or AttributeError for `!!timestamp x`
                    tag = node.tag.rsplit(":", 1)[-1]
                    raise yaml.constructor.ConstructorError(
                        None, None, f"{str(node.value)[:40]!r} cannot be read as {tag} ({e}); "
                        "quote it if it is meant as text", node.start_mark) from None

        _LOADER = Loader
    return _LOADER


def _check_bounds(text: str, aliases: bool) -> None:
    """Walk the events: depth, and what aliases stand for, counted as if each
    were written out where it is used."""
    import yaml

    depth = 0
    written = expanded = 0
    opened = []  # per open collection: (anchor, expanded count at its start)
    stands_for: Dict[str, int] = {}
    for event in yaml.parse(text, Loader=_loader()):
        anchor: Optional[str] = getattr(event, "anchor", None)
        if anchor is not None and not aliases:
            sign = "*" if isinstance(event, yaml.AliasEvent) else "&"
            raise YamlError(f"{_where(event.start_mark)}YAML anchor or alias {sign}{anchor} is "
                            "not accepted in this file; write the value out in full where it "
                            "is used")
        if isinstance(event, yaml.AliasEvent):
            expanded += stands_for.get(event.anchor, 1)  # an unknown one: the load says so
            if expanded - written > MAX_ALIAS_VALUES:
                raise YamlError(f"{_where(event.start_mark)}aliases stand for more than "
                                f"{MAX_ALIAS_VALUES} values (an alias bomb?); write the "
                                "values out instead")
        elif isinstance(event, yaml.ScalarEvent):
            written += 1
            expanded += 1
            if anchor is not None:
                stands_for[anchor] = 1
        elif isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise YamlError(f"{_where(event.start_mark)}nested more than {MAX_DEPTH} "
                                "collections deep, far deeper than any file gpuslice reads; "
                                "is this the right file?")
            written += 1
            expanded += 1
            opened.append((anchor, expanded - 1))
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
            start_anchor, start = opened.pop()
            if start_anchor is not None:
                stands_for[start_anchor] = expanded - start


def load(text: str, aliases: bool = False) -> Any:
    """The document in text. aliases: accept anchors and aliases (bounded by
    MAX_ALIAS_VALUES); without it any anchor or alias is refused."""
    import yaml

    try:
        _check_bounds(text, aliases)
        return yaml.load(text, Loader=_loader())  # noqa: S506 - a safe loader
    except YamlError:
        raise
    except yaml.YAMLError as e:
        problem = getattr(e, "problem", None) or "not valid YAML"
        raise YamlError(f"{_where(getattr(e, 'problem_mark', None))}{problem}") from None
