"""`gpuslice setup containerd`: the path that containerd's version needs, in
config.toml.

containerd 1.6 reads no CDI: a CRI runtime of type runc v2 with
gpuslice-runtime as its BinaryName (version 2 file). A new one goes after the
CRI plugin's other runtimes, indented as they are, a blank line before it;
where its tables are there already, only runtime_type and BinaryName are set
(each keeping its comment) or added.

containerd 1.7 and 2.x read CDI specs through CRI: enable_cdi = true, and our
spec dir in cdi_spec_dirs where containerd would not read it, in the CRI
table of the file's own version (2: the CRI plugin's table, which containerd
2 migrates on load; 3: the CRI runtime plugin's table).
"""
from __future__ import annotations

import os
from typing import Any, List, Optional, Tuple

import tomlkit
from tomlkit.items import Table
from tomlkit.toml_document import TOMLDocument

from cdi.registry import DEFAULT_SPEC_DIRS  # what the engine reads when its file names none
from ocihook.config import Config
from ocihook.messages import error, say, warn
from ocihook.setup import toml_edit
from ocihook.setup.common import (DEFAULT_NAME, SetupError, check_file_option, edit_file,
                                  example_device, nothing_written, read_text, warn_no_spec,
                                  warn_runtime_missing)
from ocihook.setup.engine_version import Version, show, version_of
from ocihook.setup.toml_edit import Holder, insert, lay_out

CONFIG_TOML = "/etc/containerd/config.toml"
CRI_RUNTIMES = ("plugins", "io.containerd.grpc.v1.cri", "containerd", "runtimes")
RUNC_V2 = "io.containerd.runc.v2"
# Where CRI's CDI keys are, by the file's version.
CDI_TABLE = {2: ("plugins", "io.containerd.grpc.v1.cri"),
             3: ("plugins", "io.containerd.cri.v1.runtime")}


def check_name(name: str) -> None:
    if not toml_edit.BARE_KEY.fullmatch(name):
        raise SetupError(f"--name {name!r}: a runtime name here is letters, digits, '_' and '-'")
    if name == "runc":
        raise SetupError("--name runc: that is containerd's default runtime; setup adds a "
                         f"runtime of its own, such as {DEFAULT_NAME}")


def by_hand(name: str, binary: str) -> str:
    """The tables to add, on one line, for a message."""
    table = toml_edit.render_key(CRI_RUNTIMES + (name,))
    return (f"[{table}] runtime_type = {tomlkit.string(RUNC_V2).as_string()} "
            f"[{table}.options] BinaryName = {tomlkit.string(binary).as_string()}")


def ready(doc: TOMLDocument, name: str, binary: str) -> bool:
    runtime = toml_edit.dig(doc, *CRI_RUNTIMES, name)
    return (isinstance(runtime, dict) and runtime.get("runtime_type") == RUNC_V2
            and toml_edit.dig(runtime, "options", "BinaryName") == binary)


def version(doc: TOMLDocument, source: str) -> Optional[int]:
    """The root's `version`, None when there is none (containerd then reads version 1)."""
    if "version" not in doc:
        return None
    value = doc["version"]
    if not isinstance(value, int) or isinstance(value, bool):
        raise SetupError(f"{source}: line {toml_edit.line_of(doc, ('version',))}: "
                         f"version = {doc.item('version').as_string()}: not a number")
    return int(value)


def cri_disabled(text: Optional[str], source: str) -> bool:
    """Whether the file's disabled_plugins turns off the CRI plugin (as the
    config.toml that Docker's containerd.io package ships does)."""
    disabled = toml_edit.parse(text, source).get("disabled_plugins")
    return isinstance(disabled, list) and any(
        plugin in ("cri", "io.containerd.grpc.v1.cri") for plugin in disabled)


def edit(text: Optional[str], source: str, name: str, binary: str) -> str:
    """config.toml with the CRI runtime `name` of type runc v2 whose binary is
    `binary`; a missing or empty file becomes a version 2 file holding it."""
    doc = toml_edit.parse(text, source)
    found = version(doc, source)
    if not doc:  # no key, no table: comments at most
        two = tomlkit.item(2)
        insert(doc, doc, "version", two)
        lay_out(two, "")
    elif found is None:
        raise SetupError(f"{source}: no `version = 2` line, so containerd reads it as a "
                         "version 1 file; this command edits version 2 files only "
                         "(`containerd config default` prints one to start from)")
    elif found == 3:
        raise SetupError(f"{source}: version = 3 is containerd 2's format; containerd 2 "
                         "reads CDI specs itself (enable_cdi) and needs no runtime wrapper")
    elif found != 2:
        raise SetupError(f"{source}: version = {found}: this command edits version 2 "
                         "files only (containerd 1.6)")
    if ready(doc, name, binary):
        return text or ""

    runtime = toml_edit.table_at(doc, CRI_RUNTIMES + (name,), source)
    if runtime is None:
        _add_runtime(doc, source, name, binary)
    else:
        options = toml_edit.table_at(doc, CRI_RUNTIMES + (name, "options"), source)
        indent = toml_edit.header_indent(runtime)
        headless = not toml_edit.has_header(runtime)
        _set_string(doc, runtime, "runtime_type", RUNC_V2, indent + "  ")
        if headless and isinstance(runtime, Table):  # runtime_type gave it its header
            lay_out(runtime, indent)
        if options is None:
            _add_options(doc, runtime, binary, indent + "  ")
        else:
            _set_string(doc, options, "BinaryName", binary,
                        toml_edit.header_indent(options) + "  ")
    new = doc.as_string()
    toml_edit.check_reads_back(new, source, lambda d: ready(d, name, binary),
                               by_hand(name, binary))
    return new


def _add_runtime(doc: TOMLDocument, source: str, name: str, binary: str) -> None:
    """The runtime's tables, after the last table that the deepest of the CRI
    plugin's tables already there holds, indented as the other runtimes."""
    keys = CRI_RUNTIMES + (name,)
    depth = len(CRI_RUNTIMES)
    parent = toml_edit.table_at(doc, keys[:depth], source)
    while parent is None:
        depth -= 1
        parent = toml_edit.table_at(doc, keys[:depth], source)
    siblings = [v for v in parent.values() if toml_edit.has_header(v)] \
        if depth == len(CRI_RUNTIMES) else []
    indent = toml_edit.header_indent(siblings[0]) if siblings else ""
    runtime_type = tomlkit.item(RUNC_V2)
    runtime = tomlkit.table()
    runtime.add("runtime_type", runtime_type)
    top, key = runtime, name
    holders: List[Table] = []  # the tables on the way there, which have no header
    for holder_key in reversed(keys[depth:-1]):
        holders.append(tomlkit.table(is_super_table=True))
        holders[-1].add(key, top)
        top, key = holders[-1], holder_key
    blank = toml_edit.take_blank_lines_after(parent)
    insert(doc, parent, key, top)
    for holder in holders:
        lay_out(holder, "")
    lay_out(runtime, "\n" + indent)
    lay_out(runtime_type, indent + "  ")
    _add_options(doc, runtime, binary, indent + "  ", blank)


def _add_options(doc: TOMLDocument, runtime: Holder, binary: str, indent: str,
                 blank: Optional[str] = None) -> None:
    """The runtime's options table holding BinaryName, after its other tables;
    the blank lines that ended the runtime's text now end the options'."""
    if blank is None:
        blank = toml_edit.take_blank_lines_after(runtime)
    binary_name = tomlkit.item(binary)
    options = tomlkit.table()
    options.add("BinaryName", binary_name)
    insert(doc, runtime, "options", options)
    lay_out(options, indent)
    lay_out(binary_name, indent + "  ", "\n" + blank)


def _set_string(doc: TOMLDocument, table: Holder, key: str, value: Any, indent: str) -> None:
    """table[key] = value: the value replaced in place (its comment kept), or
    the key added after the table's other keys, indented as they are (as
    `indent` without them)."""
    if key not in table:
        item = tomlkit.item(value)
        indent = toml_edit.key_indent(table, indent)
        insert(doc, table, key, item)
        lay_out(item, indent)
    elif table[key] != value:
        # An item, not the str: tomlkit 0.15 (not 0.11) would keep the old
        # value's quoting ('...'), 0.11 writes "...": the same file from both.
        table[key] = tomlkit.string(value) if isinstance(value, str) else value


def reads_cdi(version: Version) -> bool:
    """containerd 1.7 and later apply CDI specs through CRI."""
    return version >= (1, 7)


def _cdi_dirs(table: Optional[Holder], doc: TOMLDocument, keys: Tuple[str, ...],
              source: str) -> Tuple[List[str], bool]:
    """(the CDI spec dirs containerd reads with this file, whether it names them)."""
    if table is None or "cdi_spec_dirs" not in table:
        return list(DEFAULT_SPEC_DIRS), False
    dirs = table["cdi_spec_dirs"]
    if not isinstance(dirs, list) or not all(isinstance(d, str) for d in dirs):
        line = toml_edit.line_of(doc, keys + ("cdi_spec_dirs",))
        raise SetupError(f"{source}: line {line}: cdi_spec_dirs is not a list of strings; "
                         "this command cannot edit it")
    return [str(d) for d in dirs], True


def cdi_version(text: Optional[str], source: str, binary: Version) -> int:
    """The config version whose keys the CDI edit writes: the file's own
    (a missing or empty file: the binary's)."""
    doc = toml_edit.parse(text, source)
    found = version(doc, source)
    own = 3 if binary >= (2, 0) else 2
    if not doc:
        return own
    if found is None:
        raise SetupError(f"{source}: no `version = ` line, so containerd reads it as a "
                         "version 1 file; this command edits version 2 and 3 files only "
                         "(`containerd config default` prints one to start from)")
    if found == 3 and own == 2:
        raise SetupError(f"{source}: version = 3 is containerd 2's format, which "
                         f"containerd {show(binary)} cannot read; write a version 2 file "
                         "(`containerd config default`) or give --containerd-version")
    if found not in CDI_TABLE:
        raise SetupError(f"{source}: version = {found}: this command edits version 2 "
                         "and 3 files only")
    return found


def edit_cdi(text: Optional[str], source: str, binary: Version, spec_dir: str) -> str:
    """config.toml whose CRI table (of the file's version) says enable_cdi =
    true and whose CDI spec dirs hold spec_dir; a missing or empty file
    becomes a file of the binary's version holding them."""
    file_version = cdi_version(text, source, binary)
    doc = toml_edit.parse(text, source)
    keys = CDI_TABLE[file_version]
    table = toml_edit.table_at(doc, keys, source)
    dirs, named = _cdi_dirs(table, doc, keys, source)
    add_dir = not any(os.path.realpath(d) == os.path.realpath(spec_dir) for d in dirs)
    if table is not None and table.get("enable_cdi") is True and not add_dir:
        return text or ""
    if not doc:
        number = tomlkit.item(file_version)
        insert(doc, doc, "version", number)
        lay_out(number, "")
    if table is None:
        table = _add_table(doc, keys, source)
    indent = toml_edit.header_indent(table) + "  "
    headless = not toml_edit.has_header(table)
    _set_string(doc, table, "enable_cdi", True, indent)
    if add_dir:
        _set_string(doc, table, "cdi_spec_dirs", dirs + [spec_dir], indent)
    if headless and isinstance(table, Table):
        # Its keys gave it a header, before its sub-tables: a blank line parts them.
        lay_out(table, "")
        last = "cdi_spec_dirs" if add_dir else "enable_cdi"
        table.value.item(last).trivia.trail = "\n\n"
    new = doc.as_string()
    wanted = f"[{toml_edit.render_key(keys)}] enable_cdi = true" + (
        f" cdi_spec_dirs = {tomlkit.item(dirs + [spec_dir]).as_string()}" if add_dir else "")
    toml_edit.check_reads_back(
        new, source,
        lambda d: toml_edit.dig(d, *keys, "enable_cdi") is True
        and any(os.path.realpath(x) == os.path.realpath(spec_dir)
                for x in toml_edit.dig(d, *keys, "cdi_spec_dirs") or DEFAULT_SPEC_DIRS),
        wanted)
    return new


def _add_table(doc: TOMLDocument, keys: Tuple[str, ...], source: str) -> Holder:
    """An empty table at keys (a plugin's), after the other plugins' tables."""
    plugins = toml_edit.table_at(doc, keys[:1], source)
    table = tomlkit.table()
    if plugins is None:
        holder = tomlkit.table(is_super_table=True)
        holder.add(keys[1], table)
        insert(doc, doc, keys[0], holder)
        lay_out(holder, "")
        lay_out(table, "\n" if doc.as_string().strip() else "")
    else:
        siblings = [v for v in plugins.values() if toml_edit.has_header(v)]
        indent = toml_edit.header_indent(siblings[0]) if siblings else ""
        blank = toml_edit.take_blank_lines_after(plugins)
        insert(doc, plugins, keys[1], table)
        lay_out(table, "\n" + indent, "\n")
        if blank:
            table.trivia.trail = "\n" + blank
    return toml_edit.table_at(doc, keys, source) or table


def setup(cfg: Config, config_toml: str = CONFIG_TOML, name: str = DEFAULT_NAME,
          dry_run: bool = False, containerd_version: Optional[str] = None) -> int:
    """`gpuslice setup containerd`: the path for containerd's version."""
    try:
        found = version_of("containerd", containerd_version, "--containerd-version", "1.7")
        if reads_cdi(found):
            if name != DEFAULT_NAME:
                warn(f"--name: not used with containerd {show(found)}, which reads the "
                     "CDI spec itself (no runtime is added)")
            return _setup_cdi(cfg, config_toml, found, dry_run)
        check_name(name)
        changed, old = edit_file(config_toml, "--config", dry_run,
                                 lambda old: edit(old, config_toml, name, cfg.runtime_path),
                                 f"containerd {show(found)}: no CDI before 1.7; adding the "
                                 f"CRI runtime {name} that runs gpuslice-runtime")
    except SetupError as e:
        error(str(e))
    warn_runtime_missing(cfg, "containerd")
    if cri_disabled(old, config_toml):
        warn(f"{config_toml} disables the CRI plugin (disabled_plugins): CRI clients "
             "do not see this runtime until it is enabled; ctr (below) works either way")
    warn_no_spec(cfg)
    if changed and not dry_run:
        say("next: make containerd read it: systemctl restart containerd "
            "(running containers keep running)")
    say(f"CRI clients pick it by name: crictl run --runtime {name} ..., "
        f"or a Kubernetes RuntimeClass with handler: {name}")
    say(f"ctr needs no configuration: ctr run --runc-binary {cfg.runtime_path} "
        f"--env GPUSLICE={example_device(cfg)} IMAGE ID ...")
    return 0


def _setup_cdi(cfg: Config, config_toml: str, found: Version, dry_run: bool) -> int:
    try:
        check_file_option(config_toml, "--config")
        old = read_text(config_toml)
        file_version = nothing_written(cdi_version, old, config_toml, found)
        table = toml_edit.render_key(CDI_TABLE[file_version])
        why = "CDI is off by default before 2.0" if found < (2, 0) else \
            "CDI is on by default since 2.0; set all the same, so that the file says so"
        migrated = " (containerd 2 migrates this version 2 file on load)" \
            if file_version == 2 and found >= (2, 0) else ""
        changed, old = edit_file(config_toml, "--config", dry_run,
                                 lambda old: edit_cdi(old, config_toml, found, cfg.spec_dir),
                                 f"containerd {show(found)}: reads CDI through CRI ({why}); "
                                 f"setting enable_cdi in [{table}]{migrated}")
    except SetupError as e:
        error(str(e))
    if cri_disabled(old, config_toml):
        warn(f"{config_toml} disables the CRI plugin (disabled_plugins): CRI clients "
             "cannot use CDI devices until it is enabled")
    warn_no_spec(cfg)
    if changed and not dry_run:
        say("next: make containerd read it: systemctl restart containerd "
            "(running containers keep running)")
    say(f"CRI clients ask for the device {cfg.cdi_kind}={example_device(cfg)} "
        "(a Kubernetes device plugin or DRA driver returns it as a CDI device name)")
    return 0
