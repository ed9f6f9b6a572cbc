"""What every engine's setup shares: the checks on the file to edit, reading
it, showing the change as a unified diff, writing it with a backup, and the
lines that say what was done and what to do next.

Writing: atomic (cdi.specfile.write_atomic), the file's mode and owner kept,
the target of a symbolic link written rather than the link replaced. Before a
change the old file is copied to `<file>.gpuslice-backup`: the backup is the
file as it was just before the latest change setup made to it, so copying it
back undoes that change. A run that changes nothing writes nothing, backup
included; a file that setup creates has no backup (remove the file to undo).
"""
from __future__ import annotations

import difflib
import os
import re
import stat
import sys
from typing import Any, Callable, List, Optional, Tuple, TypeVar

from cdi import regularfile
from ocihook.config import Config
from ocihook.messages import say, warn

BACKUP_SUFFIX = ".gpuslice-backup"
DEFAULT_NAME = "gpuslice"

T = TypeVar("T")


class SetupError(ValueError):
    """A file or an option that setup cannot work with; one line."""


def unified_diff(path: str, old: Optional[str], new: str) -> str:
    """The change as `diff -u` prints it; /dev/null stands for a missing file."""
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
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):
            raise SetupError(f"{option} {path}: {regularfile.kind_of(mode)}, not a regular file")
        return
    folder = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        raise SetupError(f"{option} {path}: {folder} is not a folder")


# An engine's configuration is a few KiB; past this, reading it is a mistake.
CONFIG_MAX_BYTES = 1 << 20


def read_text(path: str) -> Optional[str]:
    """The file's text, line ends as they are; None when there is no such file.
    A FIFO, a device or a folder there is refused, never waited on or read."""
    try:
        data = regularfile.read_bounded(path, CONFIG_MAX_BYTES)
    except FileNotFoundError:
        return None
    except (regularfile.NotRegular, regularfile.TooLarge) as e:
        raise SetupError(f"{e}; setup edits the engine's configuration file only") from None
    except OSError as e:
        raise SetupError(f"cannot read {path}: {e.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SetupError(f"{path}: byte {e.start}: not UTF-8 text") from None


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


def edit_file(path: str, option: str, dry_run: bool, edit: Callable[[Optional[str]], str],
              announce: Optional[str] = None) -> Tuple[bool, Optional[str]]:
    """Check the path, read, edit, show and write: (changed, old text).
    announce, the line that says which path setup took, is said once the
    edit is made (a refusal stays one line), before the diff."""
    check_file_option(path, option)
    old = read_text(path)
    new = nothing_written(edit, old)
    if announce:
        say(announce)
    changed = change_file(path, old, new, dry_run)
    _report(path, changed, old is not None, dry_run)
    return changed, old


def nothing_written(read: Callable[..., T], *args: Any) -> T:
    """read(*args), a SetupError saying that nothing was written."""
    try:
        return read(*args)
    except SetupError as e:
        raise SetupError(f"{e} (nothing written)") from None


def _report(path: str, changed: bool, existed: bool, dry_run: bool) -> None:
    if not changed:
        say(f"{path}: already set up; nothing changed")
    elif dry_run:
        say(f"dry run: {path} not written")
    elif existed:
        say(f"wrote {path}; the file as it was is in {os.path.realpath(path)}{BACKUP_SUFFIX}")
    else:
        say(f"created {path}")


def example_device(cfg: Config) -> str:
    """A device name of our spec to show in the run commands: 0-4g where it exists."""
    names = [p.name for p in cfg.profiles]
    if not names:
        return "0"
    return "0-" + ("4g" if "4g" in names else names[0])


def warn_no_spec(cfg: Config) -> None:
    from ocihook.generate_cmd import default_output

    if not any(os.path.exists(default_output(cfg, fmt)) for fmt in ("yaml", "json")):
        say(f"no gpuslice spec in {cfg.spec_dir} yet: run `gpuslice cdi generate` "
            "before starting containers")


def warn_runtime_missing(cfg: Config, engine: str) -> None:
    if not os.access(cfg.runtime_path, os.X_OK):
        warn(f"{cfg.runtime_path} (configuration key runtime_path) is not an executable "
             f"file: {engine} cannot start containers with this runtime until "
             "gpuslice-runtime is installed there")
