"""`gpuslice setup docker|containerd|podman`: point a container engine at gpuslice.

Docker 20-24 and containerd 1.6 read no CDI: they get gpuslice-runtime, the
OCI runtime wrapper, as a named runtime. Podman reads CDI itself: it only
needs our spec dir among its CDI spec dirs.

Each engine's edit is a pure function of the file's text (docker_edit,
containerd_edit, podman_edit: the old text, or None for a missing file, in;
the new text out; SetupError, one line naming the file, where and what, for
a file they cannot read). change_file() then shows the edit as a unified diff
on stdout and writes it; every other line goes to stderr, so that
`gpuslice setup docker --dry-run > docker.diff` holds the diff alone.

Writing: atomic (cdi.specfile.write_atomic), the file's mode and owner kept,
the target of a symbolic link written rather than the link replaced. Before a
change the old file is copied to `<file>.gpuslice-backup`: the backup is the
file as it was just before the latest change setup made to it, so copying it
back undoes that change. A run that changes nothing writes nothing, backup
included; a file that setup creates has no backup (remove the file to undo).

Docker's daemon.json is JSON, read and written with the json module (object
order kept; the file's indentation reused). containerd's config.toml and
Podman's containers.conf are TOML, which Python 3.9 cannot read: both are
edited as text, through a line scanner that finds the table headers and the
keys the edits touch. Where tomllib (Python 3.11) or tomli is present, the
file is parsed with it first (a syntax error is refused before any edit) and
the result is parsed again and checked, so that an edit the scanner got wrong
is refused instead of written.
"""
from __future__ import annotations

import json
import os
import re
import stat
import sys
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ocihook.config import Config
from ocihook.messages import error, say, warn

BACKUP_SUFFIX = ".gpuslice-backup"
DEFAULT_NAME = "gpuslice"
DOCKER_DAEMON_JSON = "/etc/docker/daemon.json"
CONTAINERD_CONFIG = "/etc/containerd/config.toml"
PODMAN_CONTAINERS_CONF = "/etc/containers/containers.conf"

# Runtime names dockerd keeps for itself: a daemon.json entry with one of
# them stops dockerd from starting.
DOCKER_RESERVED = ("runc", "io.containerd.runc.v1", "io.containerd.runc.v2",
                   "io.containerd.runtime.v1.linux")
CRI_RUNTIMES = ("plugins", "io.containerd.grpc.v1.cri", "containerd", "runtimes")
RUNC_V2 = "io.containerd.runc.v2"
# Podman 4's CDI spec dirs when containers.conf names none.
PODMAN_CDI_DIRS = ("/etc/cdi", "/var/run/cdi")


class SetupError(ValueError):
    """A file or an option that setup cannot work with; one line."""


# -- writing ------------------------------------------------------------------

def unified_diff(path: str, old: Optional[str], new: str) -> str:
    """The change as `diff -u` prints it; /dev/null stands for a missing file."""
    import difflib

    lines = difflib.unified_diff(split_lines(old or ""), split_lines(new),
                                 fromfile=path if old is not None else "/dev/null", tofile=path)
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                   for line in lines)


def split_lines(text: str) -> List[str]:
    """Lines with their ends, split at \\n only (str.splitlines also splits at
    form feeds and the like, which a value may hold)."""
    return re.findall(r"[^\n]*\n|[^\n]+$", text)


def check_file_option(path: str, option: str) -> None:
    """The file to edit: a regular file, or a name that one can be created at."""
    if not path:
        raise SetupError(f"{option}: the path is empty")
    if os.path.islink(path) and not os.path.exists(path):
        raise SetupError(f"{option} {path}: a symbolic link to {os.readlink(path)}, "
                         "which does not exist")
    if os.path.isdir(path):
        raise SetupError(f"{option} {path}: a folder, not a file")
    if os.path.exists(path):
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise SetupError(f"{option} {path}: not a regular file")
        return
    folder = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        raise SetupError(f"{option} {path}: {folder} is not a folder")


def read_text(path: str) -> Optional[str]:
    """The file's text, line ends as they are; None when there is no such file."""
    try:
        with open(path, encoding="utf-8", newline="") as f:
            return f.read()
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as e:
        raise SetupError(f"{path}: byte {e.start}: not UTF-8 text") from None
    except OSError as e:
        raise SetupError(f"cannot read {path}: {e.strerror}") from None


def change_file(path: str, old: Optional[str], new: str, dry_run: bool) -> bool:
    """Print the diff from old to new and, unless dry_run, write new with a
    backup of old (see the module's docstring). False when they are the same."""
    if old == new:
        return False
    sys.stdout.write(unified_diff(path, old, new))
    sys.stdout.flush()
    if dry_run:
        return True
    target = os.path.realpath(path)
    st = os.stat(target) if old is not None else None
    if old is not None:
        backup = target + BACKUP_SUFFIX
        try:
            same = read_text(backup) == old
        except SetupError:
            same = False
        if not same:
            _write(backup, old, st)
    _write(target, new, st)
    return True


def _write(path: str, text: str, like: Optional[os.stat_result]) -> None:
    """Write atomically with the mode and owner of `like` (0644 and ours without)."""
    from cdi.specfile import write_atomic

    try:
        write_atomic(path, text, stat.S_IMODE(like.st_mode) if like else 0o644)
        _keep_owner(path, like)
    except OSError as e:
        raise SetupError(f"cannot write {path}: {e.strerror}") from None


def _keep_owner(path: str, st: Optional[os.stat_result]) -> None:
    if st is not None and os.geteuid() == 0:
        new = os.stat(path)
        if (new.st_uid, new.st_gid) != (st.st_uid, st.st_gid):
            os.chown(path, st.st_uid, st.st_gid)


# -- Docker: daemon.json ----------------------------------------------------------

def check_docker_name(name: str) -> None:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise SetupError(f"--name {name!r}: a runtime name is letters, digits, '_', '.' "
                         "and '-', starting with a letter or digit")
    if name in DOCKER_RESERVED:
        raise SetupError(f"--name {name}: dockerd reserves this runtime name; "
                         f"choose another, such as {DEFAULT_NAME}")


def check_real_runtime(path: str) -> None:
    if not os.path.isabs(path):
        raise SetupError(f"--real-runtime {path}: give an absolute path; dockerd passes "
                         "it to gpuslice-runtime as written, from its own folder")
    if not os.path.isfile(path):
        raise SetupError(f"--real-runtime {path}: no such file")
    if not os.access(path, os.X_OK):
        raise SetupError(f"--real-runtime {path}: not executable")


def docker_entry(runtime_path: str, real_runtime: Optional[str] = None) -> Dict[str, Any]:
    entry: Dict[str, Any] = {"path": runtime_path}
    if real_runtime:
        entry["runtimeArgs"] = ["--gpuslice-runtime", real_runtime]
    return entry


def docker_edit(text: Optional[str], source: str, name: str, entry: Dict[str, Any]) -> str:
    """daemon.json with `runtimes[name] = entry`. The rest of the text stays
    as it was, byte for byte: the entry is put in, or replaced, in place and in
    the file's own layout."""
    if text is None or not text.strip():
        doc: Any = {}
    else:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise SetupError(f"{source}: line {e.lineno}, column {e.colno}: {e.msg}") from None
    if not isinstance(doc, dict):
        raise SetupError(f"{source}: the top level is {_json_type(doc)}, not an object")
    runtimes = doc.get("runtimes", {})
    if not isinstance(runtimes, dict):
        raise SetupError(f"{source}: \"runtimes\" is {_json_type(runtimes)}, not an object")
    if text is not None and runtimes.get(name) == entry:
        return text
    wanted = dict(doc)
    wanted["runtimes"] = dict(runtimes, **{name: entry})
    if text is not None and doc:
        new = _json_put(text, ("runtimes", name), entry)
        if json.loads(new) == wanted:
            return new
    # A new or empty file; or, should the edit in place ever miss, the whole
    # document written again (the same content, in json.dumps' layout).
    return json.dumps(wanted, indent=_json_unit(text or ""), ensure_ascii=False) + "\n"


def _json_put(text: str, keys: Sequence[str], value: Any) -> str:
    """text with the value at keys set (the last key replaced or added), the
    objects on the way there already in place."""
    brace = _json_ws(text, 0)
    for depth, key in enumerate(keys):
        members, close = _json_members(text, brace)
        found = [m for m in members if m[0] == key]  # the last of twins is the one read
        nested = value
        for inner in reversed(keys[depth + 1:]):
            nested = {inner: nested}
        if not found:
            return _json_insert(text, brace, close, members, key, nested)
        _key, key_at, start, end = found[-1]
        if depth == len(keys) - 1:
            rendered = _json_render(value, _line_indent(text, key_at), _json_unit(text),
                                    "\n" in text[start:end])
            return text[:start] + rendered + text[end:]
        brace = start
    raise AssertionError("no keys")


def _json_insert(text: str, brace: int, close: int, members: List[Tuple[str, int, int, int]],
                 key: str, value: Any) -> str:
    unit = _json_unit(text)
    if not members:
        rendered = _json_render({key: value}, _line_indent(text, brace), unit,
                                "\n" in text.strip())
        return text[:brace] + rendered + text[close + 1:]
    _last, key_at, _start, end = members[-1]
    own_line = not text[text.rfind("\n", 0, key_at) + 1:key_at].strip()
    indent = _line_indent(text, key_at)
    member = f"{json.dumps(key, ensure_ascii=False)}: {_json_render(value, indent, unit, own_line)}"
    return text[:end] + "," + ("\n" + indent if own_line else " ") + member + text[end:]


def _json_members(text: str, brace: int) -> Tuple[List[Tuple[str, int, int, int]], int]:
    """The members of the object that opens at text[brace], each (key, where
    the key starts, where the value starts, where it ends), and where it closes."""
    decoder = json.JSONDecoder()
    members: List[Tuple[str, int, int, int]] = []
    i = _json_ws(text, brace + 1)
    while text[i] != "}":
        key, colon = decoder.raw_decode(text, i)
        start = _json_ws(text, _json_ws(text, colon) + 1)
        _value, end = decoder.raw_decode(text, start)
        members.append((key, i, start, end))
        i = _json_ws(text, end)
        if text[i] == ",":
            i = _json_ws(text, i + 1)
    return members, i


def _json_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def _line_indent(text: str, at: int) -> str:
    line = text[text.rfind("\n", 0, at) + 1:]
    return line[:len(line) - len(line.lstrip(" \t"))]


def _json_unit(text: str) -> str:
    """The file's indentation step: that of its first indented key; two spaces."""
    m = re.search(r'^([ \t]+)"', text, re.M)
    return m.group(1) if m else "  "


def _json_render(value: Any, indent: str, unit: str, multiline: bool) -> str:
    if not multiline:
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(value, indent=unit, ensure_ascii=False).replace("\n", "\n" + indent)


def _json_type(value: Any) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", type(None): "null",
            int: "a number", float: "a number"}.get(type(value), "an object")


# -- TOML as text ---------------------------------------------------------------

@dataclass
class Table:
    """One table of a TOML file: its key, its header line and where it ends."""
    key: Tuple[str, ...]      # () for the root table, before any header
    header: int               # index of the header line; -1 for the root
    end: int                  # index of the next header line, or len(lines)
    indent: str = ""
    array: bool = False       # an [[array of tables]] entry

    def content_end(self, lines: List[str]) -> int:
        """Just after the table's last line that is not blank."""
        end = self.end
        while end > self.header + 1 and not lines[end - 1].strip():
            end -= 1
        return end


class _Lines:
    """The lines of a TOML text, with what the scanner learnt of each: a
    table header, a line that starts a key (`key_lines`), or the rest of a
    value that runs over several lines (neither)."""

    def __init__(self, text: str, source: str) -> None:
        self.source = source
        self.lines = split_lines(text)
        if self.lines and not self.lines[-1].endswith("\n"):
            self.lines[-1] += "\n"
        self.tables: List[Table] = [Table((), -1, len(self.lines))]
        self.key_lines: Dict[int, str] = {}
        open_string: Optional[str] = None  # the quote of a multi-line string
        depth = 0                           # [ and { of a value still open
        for i, line in enumerate(self.lines):
            starts = open_string is None and depth == 0
            stripped = line.strip()
            if starts and stripped.startswith("["):
                key, array = self._header(stripped, i)
                self.tables[-1].end = i
                self.tables.append(Table(key, i, len(self.lines),
                                         line[:len(line) - len(line.lstrip())], array))
                continue
            if starts and stripped and not stripped.startswith("#"):
                m = re.match(r"\s*([A-Za-z0-9_-]+)\s*=", line)
                if m:
                    self.key_lines[i] = m.group(1)
            open_string, depth = _scan_value(line, open_string, depth)

    def _header(self, stripped: str, i: int) -> Tuple[Tuple[str, ...], bool]:
        try:
            return _parse_header(stripped)
        except ValueError as e:
            raise SetupError(f"{self.source}: line {i + 1}: {e}: {stripped}") from None

    def table(self, key: Tuple[str, ...]) -> Optional[Table]:
        found = [t for t in self.tables if t.key == key]
        if any(t.array for t in found):
            raise SetupError(f"{self.source}: line {found[0].header + 1}: "
                             f"[{_render_key(key)}] is an array of tables here; "
                             "this command edits a plain table")
        return found[0] if found else None

    def key_line(self, table: Table, key: str) -> Optional[int]:
        for i in range(table.header + 1, table.end):
            if self.key_lines.get(i) == key:
                return i
        return None

    def value_end(self, i: int) -> int:
        """Just after the last line of the value that starts on line i."""
        j = i + 1
        while j < len(self.lines) and j not in self.key_lines and not self._is_header(j) \
                and _continues(self.lines[i:j]):
            j += 1
        return j

    def _is_header(self, i: int) -> bool:
        return any(t.header == i for t in self.tables)

    def text(self) -> str:
        return "".join(self.lines)


def _continues(lines: List[str]) -> bool:
    open_string: Optional[str] = None
    depth = 0
    for line in lines:
        open_string, depth = _scan_value(line, open_string, depth)
    return open_string is not None or depth > 0


def _scan_value(line: str, open_string: Optional[str], depth: int) -> Tuple[Optional[str], int]:
    """Follow strings, comments and brackets through one line: the multi-line
    string and the bracket depth still open at its end."""
    i = 0
    while i < len(line):
        if open_string is not None:
            end = line.find(open_string, i)
            while end > 0 and open_string == '"""' and line[end - 1] == "\\":
                end = line.find(open_string, end + 1)
            if end < 0:
                return open_string, depth
            i, open_string = end + 3, None
            continue
        c = line[i]
        if c == "#":
            break
        if line.startswith(('"""', "'''"), i):
            open_string = line[i:i + 3]
            i += 3
            continue
        if c in "\"'":
            m = (_BASIC if c == '"' else _LITERAL).match(line, i)
            i = m.end() if m else len(line)
            continue
        if c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
        i += 1
    return open_string, depth


_BARE = re.compile(r"[A-Za-z0-9_-]+")
_BASIC = re.compile(r'"((?:[^"\\]|\\.)*)"')
_LITERAL = re.compile(r"'([^']*)'")


def _parse_header(s: str) -> Tuple[Tuple[str, ...], bool]:
    """`[a."b.c".d]` -> (("a", "b.c", "d"), False); `[[x]]` -> (("x",), True)."""
    array = s.startswith("[[")
    i = 2 if array else 1
    parts: List[str] = []
    while True:
        while i < len(s) and s[i] in " \t":
            i += 1
        m = _BASIC.match(s, i) or _LITERAL.match(s, i) or _BARE.match(s, i)
        if not m:
            raise ValueError("cannot read the table header")
        parts.append(_decode_string(m.group(0)) if m.group(0)[0] in "\"'" else m.group(0))
        i = m.end()
        while i < len(s) and s[i] in " \t":
            i += 1
        if not s.startswith(".", i):
            break
        i += 1
    close = "]]" if array else "]"
    rest = s[i + len(close):].strip() if s.startswith(close, i) else None
    if rest is None or (rest and not rest.startswith("#")):
        raise ValueError("cannot read the table header")
    return tuple(parts), array


def _decode_string(token: str) -> str:
    if token.startswith("'"):
        return token[1:-1]
    try:
        return json.loads(token)  # TOML's basic string escapes are JSON's, but \U and \e
    except ValueError:
        return token[1:-1]


def _toml_string(value: str) -> str:
    return json.dumps(value)  # JSON's escapes are all valid in a TOML basic string


def _render_key(key: Sequence[str]) -> str:
    return ".".join(k if _BARE.fullmatch(k) else _toml_string(k) for k in key)


def _string_value(lines: _Lines, i: int, key: str) -> Tuple[str, str, str]:
    """(before, value, after) of `key = "string"` on line i."""
    m = re.match(r"(\s*" + re.escape(key) + r"\s*=\s*)(" + _BASIC.pattern + "|"
                 + _LITERAL.pattern + r")(.*)$", lines.lines[i], re.S)
    if not m:
        raise SetupError(f"{lines.source}: line {i + 1}: {key} is not a one-line string; "
                         "this command cannot edit it")
    return m.group(1), _decode_string(m.group(2)), m.group(5)


def _toml_parser() -> Any:
    try:
        import tomllib as parser  # Python 3.11
    except ImportError:
        try:
            import tomli as parser  # type: ignore[no-redef]
        except ImportError:
            return None
    return parser


def toml_loads(text: str, source: str) -> Optional[Dict[str, Any]]:
    """The document, where a TOML parser is present (None where not); a
    syntax error is a SetupError that names the line and the column."""
    parser = _toml_parser()
    if parser is None:
        return None
    try:
        return parser.loads(text)
    except parser.TOMLDecodeError as e:
        m = re.match(r"(.*) \(at line (\d+), column (\d+)\)$", str(e))
        where = f"line {m.group(2)}, column {m.group(3)}: {m.group(1)}" if m else str(e)
        raise SetupError(f"{source}: {where}") from None


def _dig(doc: Optional[Dict[str, Any]], *keys: str) -> Any:
    for key in keys:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(key)
    return doc


def _verify(new: str, source: str, ok: Any, by_hand: str) -> None:
    """Parse the edited text again where a TOML parser is present; refuse an
    edit that does not read back as meant (a layout the scanner misread)."""
    try:
        doc = toml_loads(new, source)
    except SetupError as e:
        doc, problem = None, str(e)
    else:
        problem = None if doc is None or ok(doc) else "the edit did not read back as meant"
    if problem:
        raise SetupError(f"{source}: this command cannot edit its layout safely ({problem}); "
                         f"add by hand: {by_hand}")


# -- containerd 1.6: config.toml -------------------------------------------------

def check_containerd_name(name: str) -> None:
    if not _BARE.fullmatch(name):
        raise SetupError(f"--name {name!r}: a runtime name here is letters, digits, '_' and '-'")
    if name == "runc":
        raise SetupError("--name runc: that is containerd's default runtime; setup adds a "
                         f"runtime of its own, such as {DEFAULT_NAME}")


def containerd_block(name: str, binary: str, indent: str = "") -> List[str]:
    table = _render_key(CRI_RUNTIMES + (name,))
    return [f"{indent}[{table}]\n",
            f"{indent}  runtime_type = {_toml_string(RUNC_V2)}\n",
            f"{indent}  [{table}.options]\n",
            f"{indent}    BinaryName = {_toml_string(binary)}\n"]


def _containerd_ready(doc: Dict[str, Any], name: str, binary: str) -> bool:
    runtime = _dig(doc, *CRI_RUNTIMES, name)
    return (isinstance(runtime, dict) and runtime.get("runtime_type") == RUNC_V2
            and _dig(runtime, "options", "BinaryName") == binary)


def containerd_version(lines: _Lines) -> Optional[int]:
    """The root's `version`, None when there is none (containerd then reads version 1)."""
    i = lines.key_line(lines.tables[0], "version")
    if i is None:
        return None
    raw = lines.lines[i].split("=", 1)[1].split("#", 1)[0].strip()
    if not raw.isdigit():
        raise SetupError(f"{lines.source}: line {i + 1}: version = {raw}: not a number")
    return int(raw)


def containerd_edit(text: Optional[str], source: str, name: str, binary: str) -> str:
    """config.toml with the CRI runtime `name` of type runc v2 whose binary is
    `binary`; a missing or empty file becomes a version 2 file holding it."""
    doc = toml_loads(text, source) if text is not None else None
    lines = _Lines(text or "", source)
    content = [i for i in lines.key_lines] + [t.header for t in lines.tables[1:]]
    version = containerd_version(lines)
    if not content:
        lines.lines += ["version = 2\n"]
    elif version is None:
        raise SetupError(f"{source}: no `version = 2` line, so containerd reads it as a "
                         "version 1 file; this command edits version 2 files only "
                         "(`containerd config default` prints one to start from)")
    elif version == 3:
        raise SetupError(f"{source}: version = 3 is containerd 2's format; containerd 2 "
                         "reads CDI specs itself (enable_cdi) and needs no runtime wrapper")
    elif version != 2:
        raise SetupError(f"{source}: version = {version}: this command edits version 2 "
                         "files only (containerd 1.6)")
    if doc is not None and _containerd_ready(doc, name, binary):
        return text or ""

    runtime = lines.table(CRI_RUNTIMES + (name,))
    options = lines.table(CRI_RUNTIMES + (name, "options"))
    edits: List[Tuple[int, int, List[str]]] = []  # (from, to, new lines)
    if runtime is None and options is None:
        others = [t for t in lines.tables if t.key[:len(CRI_RUNTIMES)] == CRI_RUNTIMES]
        siblings = [t for t in others if len(t.key) == len(CRI_RUNTIMES) + 1]
        indent = siblings[0].indent if siblings else ""
        at = others[-1].content_end(lines.lines) if others else len(lines.lines)
        block = containerd_block(name, binary, indent)
        edits.append((at, at, (["\n"] if at else []) + block))
    else:
        if runtime is None:
            assert options is not None
            edits.append((options.header, options.header,
                          containerd_block(name, binary, options.indent)[:2]))
        else:
            edits += _set_string(lines, runtime, "runtime_type", RUNC_V2)
        if options is None:
            assert runtime is not None
            at = runtime.content_end(lines.lines)
            edits.append((at, at, containerd_block(name, binary, runtime.indent)[2:]))
        else:
            edits += _set_string(lines, options, "BinaryName", binary)
    # Back to front, so that each edit's line numbers still hold; two at one
    # place land in the order they were made.
    if not edits:
        return text or ""
    for _seq, (start, stop, new_lines) in sorted(enumerate(edits), key=lambda e: (e[1][0], e[0]),
                                                 reverse=True):
        lines.lines[start:stop] = new_lines
    new = lines.text()
    _verify(new, source, lambda d: _containerd_ready(d, name, binary),
            "".join(containerd_block(name, binary)).replace("\n", " "))
    return new


def _set_string(lines: _Lines, table: Table, key: str,
                value: str) -> List[Tuple[int, int, List[str]]]:
    """The edit that makes `key = "value"` in the table: the line changed,
    or added just under the header; none when it already holds."""
    i = lines.key_line(table, key)
    if i is None:
        line = f"{table.indent}  {key} = {_toml_string(value)}\n"
        return [(table.header + 1, table.header + 1, [line])]
    before, current, after = _string_value(lines, i, key)
    if current == value:
        return []
    return [(i, i + 1, [before + _toml_string(value) + after])]


def cri_disabled(text: Optional[str]) -> bool:
    """Whether the file's disabled_plugins turns off the CRI plugin (as the
    config.toml that Docker's containerd.io package ships does)."""
    m = re.search(r"^\s*disabled_plugins\s*=\s*\[([^\]]*)\]", text or "", re.M)
    return bool(m and re.search(r"[\"'](cri|io\.containerd\.grpc\.v1\.cri)[\"']", m.group(1)))


# -- Podman: containers.conf -----------------------------------------------------

def _same_dir(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def podman_spec_dirs(text: Optional[str], source: str) -> Tuple[List[str], bool]:
    """(the CDI spec dirs Podman reads with this file, whether the file names them)."""
    doc = toml_loads(text, source) if text is not None else None
    lines = _Lines(text or "", source)
    engine = lines.table(("engine",))
    i = lines.key_line(engine, "cdi_spec_dirs") if engine else None
    if i is None:
        if doc is not None and isinstance(_dig(doc, "engine", "cdi_spec_dirs"), list):
            return list(_dig(doc, "engine", "cdi_spec_dirs")), True
        return list(PODMAN_CDI_DIRS), False
    return _string_list(lines, i), True


def _string_list(lines: _Lines, i: int) -> List[str]:
    value = "".join(lines.lines[i:lines.value_end(i)]).split("=", 1)[1]
    items: List[str] = []
    for m in re.finditer("(" + _BASIC.pattern + "|" + _LITERAL.pattern + r")|#[^\n]*|(\S)", value):
        if m.group(1):
            items.append(_decode_string(m.group(1)))
        elif m.group(4) and m.group(4) not in "[],":
            raise SetupError(f"{lines.source}: line {i + 1}: cdi_spec_dirs is not a list of "
                             "strings; this command cannot edit it")
    return items


def _split_comment(line: str) -> Tuple[str, str]:
    """(code, comment) of one line; the comment keeps the spaces before it."""
    i = 0
    while i < len(line):
        c = line[i]
        if c == "#":
            code = line[:i].rstrip()
            return code, line[len(code):]
        if c in "\"'":
            m = (_BASIC if c == '"' else _LITERAL).match(line, i)
            i = m.end() if m else len(line)
            continue
        i += 1
    return line, ""


def podman_edit(text: Optional[str], source: str, spec_dir: str) -> str:
    """containers.conf whose [engine] cdi_spec_dirs holds spec_dir, with the
    dirs Podman read before; the text unchanged when Podman reads it already."""
    dirs, named = podman_spec_dirs(text, source)
    if any(_same_dir(spec_dir, d) for d in dirs):
        return text if text is not None else ""
    lines = _Lines(text or "", source)
    wanted = dirs + [spec_dir]
    engine = lines.table(("engine",))
    if engine is None:
        subtables = [t for t in lines.tables if t.key[:1] == ("engine",)]
        block = ["[engine]\n", f"cdi_spec_dirs = {_toml_list(wanted)}\n"]
        if subtables:
            at = subtables[0].header
            lines.lines[at:at] = block + ["\n"]
        else:
            lines.lines += (["\n"] if lines.lines else []) + block
    else:
        i = lines.key_line(engine, "cdi_spec_dirs") if named else None
        if i is None:
            if named:  # named in a form the scanner does not edit (a dotted key, say)
                raise SetupError(f"{source}: engine.cdi_spec_dirs is set in a form this "
                                 f"command cannot edit; add {spec_dir} to it by hand")
            at = engine.header + 1
            lines.lines[at:at] = [f"{engine.indent}cdi_spec_dirs = {_toml_list(wanted)}\n"]
        else:
            end = lines.value_end(i)
            head = re.match(r"\s*cdi_spec_dirs\s*=\s*", lines.lines[i]).group(0)
            if end == i + 1:
                comment = _split_comment(lines.lines[i].rstrip("\n"))[1]
                lines.lines[i:end] = [f"{head}{_toml_list(wanted)}{comment}\n"]
            else:
                # Spread over lines: written again one dir a line (comments
                # inside the list are not kept; the diff shows them go).
                indent = re.match(r"\s*", lines.lines[i + 1]).group(0) or "  "
                lines.lines[i:end] = ([f"{head}[\n"] + [f"{indent}{_toml_string(d)},\n"
                                                         for d in wanted] + ["]\n"])
    new = lines.text()
    _verify(new, source,
            lambda d: any(_same_dir(spec_dir, x) for x in _dig(d, "engine", "cdi_spec_dirs") or []),
            f'[engine] cdi_spec_dirs = {_toml_list(wanted)}')
    return new


def _toml_list(items: Sequence[str]) -> str:
    return "[" + ", ".join(_toml_string(x) for x in items) + "]"


# -- the commands -----------------------------------------------------------------

def example_device(cfg: Config) -> str:
    """A device name of our spec to show in the run commands: 0-4g where it exists."""
    names = [p.name for p in cfg.profiles]
    if not names:
        return "0"
    return "0-" + ("4g" if "4g" in names else names[0])


def _warn_no_spec(cfg: Config) -> None:
    from ocihook.generate_cmd import default_output

    if not any(os.path.exists(default_output(cfg, fmt)) for fmt in ("yaml", "json")):
        say(f"no gpuslice spec in {cfg.spec_dir} yet: run `gpuslice cdi generate` "
            "before starting containers")


def _warn_runtime_missing(cfg: Config, engine: str) -> None:
    if not os.access(cfg.runtime_path, os.X_OK):
        warn(f"{cfg.runtime_path} (configuration key runtime_path) is not an executable "
             f"file: {engine} cannot start containers with this runtime until "
             "gpuslice-runtime is installed there")


def _report(path: str, changed: bool, existed: bool, dry_run: bool) -> None:
    if not changed:
        say(f"{path}: already set up; nothing changed")
    elif dry_run:
        say(f"dry run: {path} not written")
    elif existed:
        say(f"wrote {path}; the file as it was is in {os.path.realpath(path)}{BACKUP_SUFFIX}")
    else:
        say(f"created {path}")


def _edit(path: str, option: str, dry_run: bool, edit: Any) -> Tuple[bool, Optional[str]]:
    """Check the path, read, edit, show and write: (changed, old text)."""
    check_file_option(path, option)
    old = read_text(path)
    new = _unread(edit, old)
    changed = change_file(path, old, new, dry_run)
    _report(path, changed, old is not None, dry_run)
    return changed, old


def _unread(read: Any, *args: Any) -> Any:
    """read(*args), a SetupError saying that nothing was written."""
    try:
        return read(*args)
    except SetupError as e:
        raise SetupError(f"{e} (nothing written)") from None


def docker(cfg: Config, daemon_json: str = DOCKER_DAEMON_JSON, name: str = DEFAULT_NAME,
           real_runtime: Optional[str] = None, dry_run: bool = False) -> int:
    """`gpuslice setup docker`: add gpuslice-runtime to daemon.json's runtimes."""
    try:
        check_docker_name(name)
        if real_runtime is not None:
            check_real_runtime(real_runtime)
        entry = docker_entry(cfg.runtime_path, real_runtime)
        changed, _old = _edit(daemon_json, "--daemon-json", dry_run,
                              lambda old: docker_edit(old, daemon_json, name, entry))
    except SetupError as e:
        error(str(e))
    _warn_runtime_missing(cfg, "dockerd")
    _warn_no_spec(cfg)
    if changed and not dry_run:
        say("next: make dockerd read it: systemctl reload docker (or send dockerd SIGHUP)")
    say(f"run containers with: docker run --runtime {name} "
        f"-e GPUSLICE={example_device(cfg)} IMAGE ...")
    return 0


def containerd(cfg: Config, config_toml: str = CONTAINERD_CONFIG, name: str = DEFAULT_NAME,
               dry_run: bool = False) -> int:
    """`gpuslice setup containerd`: add a CRI runtime that runs gpuslice-runtime."""
    try:
        check_containerd_name(name)
        changed, old = _edit(config_toml, "--config", dry_run,
                             lambda old: containerd_edit(old, config_toml, name, cfg.runtime_path))
    except SetupError as e:
        error(str(e))
    _warn_runtime_missing(cfg, "containerd")
    if cri_disabled(old):
        warn(f"{config_toml} disables the CRI plugin (disabled_plugins): CRI clients "
             "do not see this runtime until it is enabled; ctr (below) works either way")
    _warn_no_spec(cfg)
    if changed and not dry_run:
        say("next: make containerd read it: systemctl restart containerd "
            "(running containers keep running)")
    say(f"CRI clients pick it by name: crictl run --runtime {name} ..., "
        f"or a Kubernetes RuntimeClass with handler: {name}")
    say(f"ctr needs no configuration: ctr run --runc-binary {cfg.runtime_path} "
        f"--env GPUSLICE={example_device(cfg)} IMAGE ID ...")
    return 0


def podman(cfg: Config, containers_conf: str = PODMAN_CONTAINERS_CONF,
           dry_run: bool = False) -> int:
    """`gpuslice setup podman`: make sure Podman reads our CDI spec dir."""
    try:
        check_file_option(containers_conf, "--containers-conf")
        dirs, named = _unread(podman_spec_dirs, read_text(containers_conf), containers_conf)
        if any(_same_dir(cfg.spec_dir, d) for d in dirs):
            how = f"{containers_conf} names it in cdi_spec_dirs" if named else \
                "one of its default CDI spec dirs"
            say(f"nothing to do: podman already reads {cfg.spec_dir} ({how})")
        else:
            changed, _old = _edit(containers_conf, "--containers-conf", dry_run,
                                  lambda old: podman_edit(old, containers_conf, cfg.spec_dir))
            if changed and not dry_run:
                say("podman reads containers.conf at each command: nothing to restart")
    except SetupError as e:
        error(str(e))
    env = os.environ.get("CONTAINERS_CONF")
    if env and not _same_dir(env, containers_conf):
        warn(f"CONTAINERS_CONF={env} is set here: podman run from this environment reads "
             f"that file instead of {containers_conf}")
    _warn_no_spec(cfg)
    say(f"run containers with: podman run --device {cfg.cdi_kind}={example_device(cfg)} IMAGE ...")
    return 0
