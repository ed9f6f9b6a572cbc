"""gpuslice-hook run as a library call, for the engines that admit without an
OCI bundle (the Nomad plugin's reservations, Slurm's jobs): the
configuration's hook, its common arguments, a bounded wait, and a failure to
run it said in one line (its own answers are the caller's to read)."""
from __future__ import annotations

import subprocess
from typing import Callable, Sequence

from ocihook.config import Config

HOOK_TIMEOUT_S = 60  # the hook waits up to 30 s for the database's lock


def run(cfg: Config, args: Sequence[str], error: Callable[[str], Exception]
        ) -> "subprocess.CompletedProcess[str]":
    """`gpuslice-hook ARGS --database ... --state-dir ...`; error(line) is raised
    when it cannot be run or gives no answer in time."""
    argv = [cfg.hook_path, *args, *cfg.hook_common_args()]
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=HOOK_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except OSError as e:
        raise error(f"{cfg.hook_path}: cannot run gpuslice-hook ({e.strerror}); check the "
                    "configuration key hook_path") from None
    except subprocess.TimeoutExpired:
        raise error(f"{cfg.hook_path} gave no answer within {HOOK_TIMEOUT_S} s") from None


def last_line(text: str) -> str:
    """The hook's one line of stderr (the last non-empty one)."""
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "(no message)"
