"""`gpuslice setup docker`: the path that dockerd's version needs.

Docker 20-24 read no CDI: gpuslice-runtime among dockerd's runtimes. Docker
25 to 28.1 read CDI specs when `features.cdi` is true; 28.2 and later by
default. Either reads /etc/cdi and /var/run/cdi unless `cdi-spec-dirs` names
other dirs: our spec dir is added there when it is not among them.

daemon.json is JSON, read and written with the json module: the entry is put
into `runtimes` in place, the rest of the text byte for byte as it was (object
order kept; the file's indentation reused).
"""
from __future__ import annotations

import json
import os
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

from cdi.registry import DEFAULT_SPEC_DIRS  # what the engine reads when its file names none
from ocihook.config import Config
from ocihook.messages import error, say, warn
from ocihook.setup.common import (DEFAULT_NAME, SetupError, check_file_option, edit_file,
                                  example_device, nothing_written, read_text, warn_no_spec,
                                  warn_runtime_missing)
from ocihook.setup.engine_version import Version, show, version_of

DAEMON_JSON = "/etc/docker/daemon.json"
# Runtime names dockerd keeps for itself: a daemon.json entry with one of
# them stops dockerd from starting.
RESERVED = ("runc", "io.containerd.runc.v1", "io.containerd.runc.v2",
            "io.containerd.runtime.v1.linux")


def check_name(name: str) -> None:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise SetupError(f"--name {name!r}: a runtime name is letters, digits, '_', '.' "
                         "and '-', starting with a letter or digit")
    if name in RESERVED:
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


def runtime_entry(runtime_path: str, real_runtime: Optional[str] = None) -> Dict[str, Any]:
    entry: Dict[str, Any] = {"path": runtime_path}
    if real_runtime:
        entry["runtimeArgs"] = ["--gpuslice-runtime", real_runtime]
    return entry


def edit(text: Optional[str], source: str, name: str, entry: Dict[str, Any]) -> str:
    """daemon.json with `runtimes[name] = entry`. The rest of the text stays
    as it was, byte for byte: the entry is put in, or replaced, in place and in
    the file's own layout."""
    doc = _load(text, source)
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


def _load(text: Optional[str], source: str) -> Dict[str, Any]:
    if text is None or not text.strip():
        return {}
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise SetupError(f"{source}: line {e.lineno}, column {e.colno}: {e.msg}") from None
    if not isinstance(doc, dict):
        raise SetupError(f"{source}: the top level is {_json_type(doc)}, not an object")
    return doc


def cdi_opt_in(version: Version) -> bool:
    """Docker 25 to 28.1 read CDI only with features.cdi; 28.2 on by default."""
    return (25, 0) <= version < (28, 2)


def cdi_dirs(text: Optional[str], source: str) -> List[str]:
    """The CDI spec dirs dockerd reads with this daemon.json."""
    dirs = _load(text, source).get("cdi-spec-dirs", list(DEFAULT_SPEC_DIRS))
    if not isinstance(dirs, list) or not all(isinstance(d, str) for d in dirs):
        raise SetupError(f"{source}: \"cdi-spec-dirs\" is {_json_type(dirs)}, "
                         "not an array of strings")
    return dirs


def _same_dir(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def edit_cdi(text: Optional[str], source: str, version: Version, spec_dir: str) -> str:
    """daemon.json with `features.cdi = true` where the version needs it
    (other features kept) and spec_dir among `cdi-spec-dirs` where dockerd
    would not read it; the rest byte for byte as it was."""
    doc = _load(text, source)
    features = doc.get("features", {})
    if not isinstance(features, dict):
        raise SetupError(f"{source}: \"features\" is {_json_type(features)}, not an object")
    dirs = cdi_dirs(text, source)
    puts: List[Tuple[Tuple[str, ...], Any]] = []
    if cdi_opt_in(version) and features.get("cdi") is not True:
        puts.append((("features", "cdi"), True))
    if not any(_same_dir(d, spec_dir) for d in dirs):
        puts.append((("cdi-spec-dirs",), dirs + [spec_dir]))
    if not puts:
        return text if text is not None else ""
    wanted = dict(doc)
    new = text if text is not None and doc else None
    for keys, value in puts:
        if len(keys) == 2:
            wanted[keys[0]] = dict(wanted.get(keys[0], {}), **{keys[1]: value})
        else:
            wanted[keys[0]] = value
        if new is not None:
            new = _json_put(new, keys, value)
    if new is not None and json.loads(new) == wanted:
        return new
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


def setup(cfg: Config, daemon_json: str = DAEMON_JSON, name: str = DEFAULT_NAME,
          real_runtime: Optional[str] = None, dry_run: bool = False,
          docker_version: Optional[str] = None) -> int:
    """`gpuslice setup docker`: the path for dockerd's version."""
    try:
        found = version_of("dockerd", docker_version, "--docker-version", "26.1")
        if found >= (25, 0):
            unused = [o for o, v in (("--name", name != DEFAULT_NAME),
                                     ("--real-runtime", real_runtime is not None)) if v]
            if unused:
                warn(f"{' and '.join(unused)}: not used with docker {show(found)}, which "
                     "reads the CDI spec itself (no runtime is registered)")
            return _setup_cdi(cfg, daemon_json, found, dry_run)
        check_name(name)
        if real_runtime is not None:
            check_real_runtime(real_runtime)
        entry = runtime_entry(cfg.runtime_path, real_runtime)
        changed, _old = edit_file(daemon_json, "--daemon-json", dry_run,
                                  lambda old: edit(old, daemon_json, name, entry),
                                  f"docker {show(found)}: no CDI before 25; registering "
                                  f"gpuslice-runtime as runtime {name}")
    except SetupError as e:
        error(str(e))
    warn_runtime_missing(cfg, "dockerd")
    warn_no_spec(cfg)
    if changed and not dry_run:
        say("next: make dockerd read it: systemctl reload docker (or send dockerd SIGHUP)")
    say(f"run containers with: docker run --runtime {name} "
        f"-e GPUSLICE={example_device(cfg)} IMAGE ...")
    return 0


def _setup_cdi(cfg: Config, daemon_json: str, found: Version, dry_run: bool) -> int:
    try:
        check_file_option(daemon_json, "--daemon-json")
        old = read_text(daemon_json)
        dirs = nothing_written(cdi_dirs, old, daemon_json)
        add_dir = "" if any(_same_dir(d, cfg.spec_dir) for d in dirs) else \
            f"; adding {cfg.spec_dir} to cdi-spec-dirs"
        announce = f"docker {show(found)}: " + (
            "CDI is opt-in before 28.2; enabling it (features.cdi)" if cdi_opt_in(found)
            else "CDI is on by default since 28.2; nothing to enable") + add_dir
        if old is None and not cdi_opt_in(found) and not add_dir:
            say(announce)
            say(f"nothing to do: dockerd reads {cfg.spec_dir} (one of its default CDI "
                "spec dirs)")
            changed = False
        else:
            changed, _old = edit_file(daemon_json, "--daemon-json", dry_run,
                                      lambda old: edit_cdi(old, daemon_json, found,
                                                           cfg.spec_dir), announce)
    except SetupError as e:
        error(str(e))
    warn_no_spec(cfg)
    if changed and not dry_run:
        say("next: make dockerd read it: systemctl restart docker (features and "
            "cdi-spec-dirs are read at start)")
    say(f"run containers with: docker run --device {cfg.cdi_kind}={example_device(cfg)} "
        "IMAGE ...")
    return 0
