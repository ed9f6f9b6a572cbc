"""TOML configuration files as tomlkit documents (containerd's config.toml,
Podman's containers.conf): reading one, with a syntax error as one line;
finding the tables an edit goes into; adding to them; reading the edit back.

tomlkit writes again what it parsed as it was (comments, layout, quoting) and
renders only what is changed. What it adds, it lays out by rules that differ
between its versions (0.11, Debian 12's, and later), touching up the items
around it too: insert() undoes those touches, and the engines' edits give
every item they add its layout themselves, so one edit gives one text.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Iterator, List, Optional, Sequence, Union

import tomlkit
from tomlkit.container import Container, OutOfOrderTableProxy
from tomlkit.exceptions import ParseError, TOMLKitError
from tomlkit.items import AoT, InlineTable, Item, Null, Table, Whitespace
from tomlkit.toml_document import TOMLDocument

from ocihook.setup.common import SetupError

# What holds keys: the document, a table, or the pieces of one table that the
# file spreads over several places (tomlkit's OutOfOrderTableProxy).
Holder = Union[Container, Table, OutOfOrderTableProxy]

# A key that TOML writes without quotes.
BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
# A value no file holds, put in a copy of the document to find a line.
_MARK = "gpuslice:line-mark:8d0c51"


def parse(text: Optional[str], source: str) -> TOMLDocument:
    """The document of text; a missing file reads as an empty one, and a last
    line without its newline gets one (as any edit then writes it). A syntax
    error is a SetupError naming the line and the column."""
    text = text or ""
    if text and not text.endswith("\n"):
        text += "\n"
    try:
        return tomlkit.parse(text)
    except ParseError as e:
        what = re.sub(r" at line \d+ col \d+$", "", str(e))
        raise SetupError(f"{source}: line {e.line}, column {e.col + 1}: {what}") from None
    except TOMLKitError as e:
        raise SetupError(f"{source}: {e}") from None
    except Exception as e:  # tomlkit's own failures, on some tables out of order
        raise SetupError(f"{source}: tomlkit {tomlkit.__version__} cannot read this layout "
                         f"({type(e).__name__}: {e}); make the change by hand") from None


def render_key(keys: Sequence[str]) -> str:
    """A dotted key as a header writes it: `plugins."io.containerd.grpc.v1.cri"`."""
    return ".".join(k if BARE_KEY.fullmatch(k) else tomlkit.string(k).as_string() for k in keys)


def line_of(doc: TOMLDocument, keys: Sequence[str]) -> int:
    """The line (from 1) where the value at keys starts, or the first header
    of the array of tables there: that item marked in a copy of the document,
    and the mark looked for in the copy's text."""
    copy = tomlkit.parse(doc.as_string())
    parent: Any = copy
    for key in keys[:-1]:
        parent = parent[key]
    if isinstance(parent[keys[-1]], AoT):
        parent[keys[-1]][0].comment(_MARK)
    else:
        parent[keys[-1]] = _MARK
    text = copy.as_string()
    return text.count("\n", 0, text.index(_MARK)) + 1


def table_at(doc: TOMLDocument, keys: Sequence[str], source: str) -> Optional[Holder]:
    """The table at keys, None where there is none; a key on the way that
    holds anything but a table (a value, an inline table, an array of tables)
    is a SetupError: no edit of ours can go there."""
    here: Holder = doc
    for depth in range(len(keys)):
        if keys[depth] not in here:
            return None
        value = here[keys[depth]]
        if not isinstance(value, (Table, OutOfOrderTableProxy)):
            where = keys[:depth + 1]
            what, name = ("an array of tables", f"[{render_key(where)}]") \
                if isinstance(value, AoT) else \
                ("an inline table" if isinstance(value, InlineTable) else "a value",
                 render_key(where))
            raise SetupError(f"{source}: line {line_of(doc, where)}: {name} is {what} here; "
                             "this command edits a plain table")
        here = value
    return here


def has_header(table: Any) -> bool:
    """Whether the table has a [header] line of its own (a table that only
    holds tables, as `a` in `[a.b]`, has none until a key is set in it)."""
    return isinstance(table, Table) and not table.is_super_table()


def header_indent(table: Holder) -> str:
    """The spaces before the table's header; for one without a header, those
    of its first sub-table's."""
    if has_header(table):
        assert isinstance(table, Table)
        return table.trivia.indent.rsplit("\n", 1)[-1]
    subtables = [v for v in table.values() if isinstance(v, Table)]
    return header_indent(subtables[0]) if subtables else ""


def key_indent(table: Holder, default: str) -> str:
    """The spaces before the last key of the table, default where it has none:
    a key added after the others is indented as they are."""
    if isinstance(table, OutOfOrderTableProxy):
        return default
    body = table if isinstance(table, Container) else table.value
    keys = [v for k, v in body.body if k is not None and not isinstance(v, (Table, AoT))]
    return keys[-1].trivia.indent if keys else default


def take_blank_lines_after(table: Holder) -> str:
    """The blank lines that end the text of the table and its sub-tables,
    taken out of it: what an edit adds after that text goes before them
    instead, so that they still part it from what follows (none are taken
    from a table in pieces)."""
    if isinstance(table, OutOfOrderTableProxy):
        return ""
    body = table if isinstance(table, Container) else table.value
    while True:  # down to the table whose text comes last
        items = [v for _k, v in body.body if not isinstance(v, (Whitespace, Null))]
        if items and isinstance(items[-1], Table):
            body = items[-1].value
        elif items and isinstance(items[-1], AoT) and items[-1].body:
            body = items[-1].body[-1].value
        else:
            break
    taken: List[str] = []
    for i in range(len(body.body) - 1, -1, -1):
        item = body.body[i][1]
        if isinstance(item, Null):
            continue
        if not isinstance(item, Whitespace):
            break
        taken.append(item.s)
        body.body[i] = (None, Null())  # as tomlkit itself blanks out what it removes
    return "".join(reversed(taken))


def insert(doc: TOMLDocument, holder: Holder, key: str, item: Item) -> None:
    """holder[key] = item, with the layout of everything that was in doc kept
    as it was; the caller lays out what it adds."""
    kept = [(old, old.trivia.indent, old.trivia.trail) for old in _items(doc)]
    holder[key] = item
    for old, indent, trail in kept:
        old.trivia.indent = indent
        old.trivia.trail = trail


def lay_out(item: Item, indent: str, trail: str = "\n") -> Item:
    """The item with the spaces (and blank lines) before it and the text after
    it set: for a table, around its header."""
    item.trivia.indent = indent
    item.trivia.trail = trail
    return item


def _items(body: Container) -> Iterator[Item]:
    for _key, item in body.body:
        if isinstance(item, (Whitespace, Null)):
            continue
        yield item
        if isinstance(item, Table):
            yield from _items(item.value)
        elif isinstance(item, AoT):
            for table in item.body:
                yield table
                yield from _items(table.value)


def dig(doc: Any, *keys: str) -> Any:
    """doc[k1][k2]...; None where a key is missing or a value is no table."""
    for key in keys:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(key)
    return doc


def check_reads_back(new: str, source: str, holds: Callable[[TOMLDocument], bool],
                     by_hand: str) -> None:
    """Parse the edited text again; refuse an edit that does not read back as
    meant (a layout that tomlkit renders otherwise than it reads)."""
    try:
        problem: Optional[str] = None if holds(parse(new, source)) else \
            "the edit did not read back as meant"
    except SetupError as e:
        problem = str(e)[len(source) + 2:]  # what and where, the file named below
    if problem:
        raise SetupError(f"{source}: this command cannot edit its layout safely ({problem}); "
                         f"add by hand: {by_hand}")

