"""`gpuslice setup podman`: our spec dir among the CDI spec dirs that Podman
reads (Podman applies CDI specs itself), in containers.conf's [engine] table.

cdi_spec_dirs, where the file sets it, replaces Podman's defaults: the dirs it
names are kept and ours is added at the end; a list spread over several lines
is written again one dir a line. Where the file does not set it, it gets
Podman's defaults and ours.

By Podman's version: 4.1 is the first to apply CDI specs of the versions we
write; before 4.4 Podman reads no cdi_spec_dirs (its log says it failed to
decode the key) and only its two default dirs, so there setup writes
nothing and says to generate the spec into one of them.
"""
from __future__ import annotations

import os
from typing import List, Optional, Tuple

import tomlkit
from tomlkit.items import Item, Table
from tomlkit.toml_document import TOMLDocument

from cdi.registry import DEFAULT_SPEC_DIRS  # what the engine reads when its file names none
from ocihook.config import DEFAULT_PATH as DEFAULT_CONFIG, Config
from ocihook.messages import error, say, warn
from ocihook.setup import toml_edit
from ocihook.setup.common import (SetupError, check_file_option, edit_file, example_device,
                                  nothing_written, read_text, warn_no_spec)
from ocihook.setup.engine_version import Version, show, version_of
from ocihook.setup.toml_edit import insert, lay_out

CONTAINERS_CONF = "/etc/containers/containers.conf"
# The table and the key that name them.
ENGINE, CDI_SPEC_DIRS = "engine", "cdi_spec_dirs"
FIRST_CDI: Version = (4, 1)        # the first Podman that applies our specs
FIRST_SPEC_DIRS: Version = (4, 4)  # the first that reads cdi_spec_dirs


def same_dir(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def spec_dirs(text: Optional[str], source: str) -> Tuple[List[str], bool]:
    """(the CDI spec dirs Podman reads with this file, whether the file names them)."""
    return _spec_dirs(toml_edit.parse(text, source), source)


def _spec_dirs(doc: TOMLDocument, source: str) -> Tuple[List[str], bool]:
    engine = toml_edit.table_at(doc, (ENGINE,), source)
    if engine is None or CDI_SPEC_DIRS not in engine:
        return list(DEFAULT_SPEC_DIRS), False
    dirs = engine[CDI_SPEC_DIRS]
    if not isinstance(dirs, list) or not all(isinstance(d, str) for d in dirs):
        line = toml_edit.line_of(doc, (ENGINE, CDI_SPEC_DIRS))
        raise SetupError(f"{source}: line {line}: cdi_spec_dirs is not a list of strings; "
                         "this command cannot edit it")
    return [str(d) for d in dirs], True


def edit(text: Optional[str], source: str, spec_dir: str) -> str:
    """containers.conf whose [engine] cdi_spec_dirs holds spec_dir, with the
    dirs Podman read before; the text unchanged when Podman reads it already."""
    doc = toml_edit.parse(text, source)
    dirs, named = _spec_dirs(doc, source)
    if any(same_dir(spec_dir, d) for d in dirs):
        return text if text is not None else ""
    wanted = dirs + [spec_dir]
    engine = toml_edit.table_at(doc, (ENGINE,), source)
    if engine is None:
        table = tomlkit.table()
        value = tomlkit.item(wanted)
        table.add(CDI_SPEC_DIRS, value)
        insert(doc, doc, ENGINE, table)
        lay_out(table, "\n" if text else "")
        lay_out(value, "")
    elif named:
        # Its key, comment and line end kept.
        engine[CDI_SPEC_DIRS] = _dirs_value(wanted, engine[CDI_SPEC_DIRS].as_string())
    else:
        # A table that holds only tables gets its header here, and a blank
        # line parts its key from the first of those.
        headless = not toml_edit.has_header(engine)
        value = tomlkit.item(wanted)
        indent = "" if headless else toml_edit.key_indent(engine, toml_edit.header_indent(engine))
        insert(doc, engine, CDI_SPEC_DIRS, value)
        lay_out(value, indent, "\n\n" if headless else "\n")
        if headless and isinstance(engine, Table):
            lay_out(engine, "")
    new = doc.as_string()
    toml_edit.check_reads_back(
        new, source,
        lambda d: any(same_dir(spec_dir, x) for x in toml_edit.dig(d, ENGINE, CDI_SPEC_DIRS) or []),
        f"[engine] cdi_spec_dirs = {tomlkit.item(wanted).as_string()}")
    return new


def _dirs_value(dirs: List[str], old: str) -> Item:
    """The list on one line, as it was; or, where it was spread over lines, one
    dir a line, indented as its first line (comments inside are not kept)."""
    if "\n" not in old:
        return tomlkit.item(dirs)
    first = old.split("\n", 1)[1]
    indent = first[:len(first) - len(first.lstrip(" \t"))] or "  "
    return tomlkit.array("[\n" + "".join(f"{indent}{tomlkit.string(d).as_string()},\n"
                                         for d in dirs) + "]")


def setup(cfg: Config, containers_conf: str = CONTAINERS_CONF, dry_run: bool = False,
          podman_version: Optional[str] = None) -> int:
    """`gpuslice setup podman`: make sure Podman reads our CDI spec dir."""
    try:
        check_file_option(containers_conf, "--containers-conf")
        dirs, named = nothing_written(spec_dirs, read_text(containers_conf), containers_conf)
        version = version_of("podman", podman_version, "--podman-version", "4.3")
        if version < FIRST_SPEC_DIRS:
            _old_podman(cfg, version)
        elif any(same_dir(cfg.spec_dir, d) for d in dirs):
            how = f"{containers_conf} names it in cdi_spec_dirs" if named else \
                "one of its default CDI spec dirs"
            say(f"nothing to do: podman already reads {cfg.spec_dir} ({how})")
        else:
            changed, _old = edit_file(containers_conf, "--containers-conf", dry_run,
                                      lambda old: edit(old, containers_conf, cfg.spec_dir))
            if changed and not dry_run:
                say("podman reads containers.conf at each command: nothing to restart")
    except SetupError as e:
        error(str(e))
    env = os.environ.get("CONTAINERS_CONF")
    if env and not same_dir(env, containers_conf):
        warn(f"CONTAINERS_CONF={env} is set here: podman run from this environment reads "
             f"that file instead of {containers_conf}")
    warn_no_spec(cfg)
    say(f"run containers with: podman run --device {cfg.cdi_kind}={example_device(cfg)} IMAGE ...")
    return 0


def _old_podman(cfg: Config, version: Version) -> None:
    """Podman before 4.4: its default dirs or nothing; a SetupError that says
    what to do where ours is not one of them."""
    if version < FIRST_CDI:
        raise SetupError(f"podman {show(version)} applies no CDI specs of cdiVersion 0.5.0 "
                         f"and later (Podman {show(FIRST_CDI)} is the first that does): "
                         "upgrade Podman; nothing written")
    if not any(same_dir(cfg.spec_dir, d) for d in DEFAULT_SPEC_DIRS):
        raise SetupError(f"podman {show(version)} reads CDI specs only from "
                         f"{' and '.join(DEFAULT_SPEC_DIRS)} (cdi_spec_dirs came with "
                         f"{show(FIRST_SPEC_DIRS)}), not from spec_dir {cfg.spec_dir}: set "
                         f"spec_dir: {DEFAULT_SPEC_DIRS[0]} in {cfg.source or DEFAULT_CONFIG} "
                         "and run `gpuslice cdi generate`, or upgrade Podman; nothing written")
    say(f"nothing to do: podman {show(version)} reads {cfg.spec_dir} (one of the only CDI spec "
        "dirs it reads)")
