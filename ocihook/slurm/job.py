"""One Slurm job's slice on its node: admitted in the accountant, released.

A job's slice is held under the container id ``slurm-<job id>`` by the
slurmstepd of the first step that starts on the node (its pid is the row's
pid: when that slurmstepd is killed, ``gpuslice gc`` and the next admission
reclaim the slice as a dead container's). Later steps of the job (an
``srun`` inside a batch script) find the row held and share it: the shards
are the job's, so its steps never book the card twice. The step that holds
the row releases it when it ends, and the job's epilog releases what is left.

Admission is ``gpuslice-hook admit``: the same C rules and write lock as every
container's create hook, so Slurm jobs and containers on one node never both
get the last room on a card.
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

from ocihook import cheader, hookcall, statedir
from ocihook.accountant import Accountant, Card, Reservation
from ocihook.config import Config
from ocihook.slurm.shards import Slice, ShardError, slice_of

ID_PREFIX = cheader.string("GPUSLICE_SLURM_ID_PREFIX")  # no container may take it (claim.h)
RUNTIME = "slurm"


class JobError(RuntimeError):
    """One line; refused: the accountant (or the shard rule) said no, rather
    than a broken node."""

    def __init__(self, message: str, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused


@dataclass(frozen=True)
class Step:
    """What slurmstepd knows of the step that starts (the SPANK plugin's items)."""
    job: int
    step: str  # "batch", "extern", "0", ...
    uid: int
    gid: int
    pid: int  # the step's slurmstepd
    cards: str  # the node's GPU indices: SLURM_STEP_GPUS, SLURM_JOB_GPUS or CUDA_VISIBLE_DEVICES
    shards: int  # SLURM_SHARDS_ON_NODE
    user: str = ""


def container_id(job: int) -> str:
    return f"{ID_PREFIX}{job}"


NAME_USER_MAX = 64  # gpuslice-hook keeps names of at most 256 bytes


def holder_name(step: Step) -> str:
    """What status, top and the exporter show beside the id: job.step and user
    (step and user cut to whole characters within 32 and NAME_USER_MAX bytes,
    so the name always fits)."""
    def cut(text: str, size: int) -> str:
        return text.encode()[:size].decode(errors="ignore")

    return f"{step.job}.{cut(step.step, 32)} {cut(step.user, NAME_USER_MAX)}".strip()


def _run_hook(cfg: Config, args: Sequence[str]) -> "subprocess.CompletedProcess[str]":
    return hookcall.run(cfg, args, JobError)


def _hook_line(text: str) -> str:
    """The hook's line without its program name: the job's line names gpuslice."""
    line = hookcall.last_line(text)
    return line.split(": ", 1)[1] if line.startswith("gpuslice-hook: ") else line


def _card(cards: List[Card], slurm_cards: str, job: int) -> Card:
    """The one card of the job's shards. Slurm numbers a node's GPUs in the
    order of its gres.conf lines, which `gpuslice slurm gres` writes in the
    cards' index order."""
    indices = [c for c in slurm_cards.split(",") if c]
    if len(indices) != 1 or not indices[0].isdigit():
        raise JobError(f"job {job}: its shards are on GPUs {slurm_cards!r}; gpuslice slices one "
                       "card per job: ask for no more shards than one card has "
                       "(--gres=shard:k, k <= slurm_shards)", refused=True)
    found = [c for c in cards if c.index == int(indices[0])]
    if not found:
        raise JobError(f"job {job}: GPU {indices[0]} is not a card the accountant knows; run "
                       "`gpuslice cdi generate`, then `gpuslice slurm gres --check`")
    return found[0]


def held_by(cfg: Config, job: int) -> List[Reservation]:
    acct = Accountant.read_only(cfg.database)
    try:
        return [r for u in acct.usage() for r in u.reservations
                if r.container_id == container_id(job)]
    finally:
        acct.close()


def admit(cfg: Config, step: Step) -> Slice:
    """The job's slice for this step (admitted, or the job's already held),
    and its state dir made for the job's user."""
    acct = Accountant.read_only(cfg.database)
    try:
        card = _card(acct.cards(), step.cards, step.job)
    finally:
        acct.close()
    try:
        sl = slice_of(step.shards, cfg.slurm_shards, card.total_mib, cfg.slurm_cores)
    except ShardError as e:
        raise JobError(f"job {step.job}: {e}", refused=True) from None
    res = _run_hook(cfg, ["admit", "--id", container_id(step.job),
                          "--device", f"{card.index}-shard-{sl.shards}of{sl.of}",
                          "--card", card.uuid, "--memory-mib", str(sl.memory_mib),
                          "--cores", str(sl.cores), "--pid", str(step.pid),
                          "--runtime", RUNTIME, "--name", holder_name(step)])
    if res.returncode != 0:
        ask = f"{sl.shards} of {sl.of} shards, {sl.memory_mib} MiB" + \
            (f", {sl.cores}%" if sl.cores else "")
        raise JobError(f"job {step.job} ({ask}): {_hook_line(res.stderr)}",
                       refused=res.returncode == 1)
    _make_dir(cfg, step)
    _write_env(cfg, step, sl)
    return sl


def _make_dir(cfg: Config, step: Step) -> None:
    """<state_dir>/containers/slurm-<job>, the job user's: the shim makes the
    region there. Kept if a step of the job made it already."""
    path = statedir.container_dir(cfg.state_dir, container_id(step.job))
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        return
    os.chown(path, step.uid, step.gid)


# In the job's folder: the env for its container steps (container.py); the
# hook removes it with the folder.
ENV_FILE = cheader.string("GPUSLICE_STEP_ENV_FILE")


def _write_env(cfg: Config, step: Step, sl: Slice) -> None:
    """The step's env as NAME=value lines in the job's folder: Slurm 22.05
    gives a container step (srun --container) its own env, not the one the
    plugin set, so `gpuslice slurm bind` adds these."""
    path = os.path.join(statedir.container_dir(cfg.state_dir, container_id(step.job)), ENV_FILE)
    # The folder is the job user's: what is at this name may be theirs (a
    # link to a file of root's). Root removes it and makes a new file, never
    # following a link; no temporary name, since the hook removes only the
    # names statedir.h lists.
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("".join(f"{k}={v}\n" for k, v in env(cfg, step, sl).items()))


def env(cfg: Config, step: Step, sl: Slice) -> Dict[str, str]:
    """What the step's processes get: the shim preloaded, the slice's caps and
    where the region lives (the plugin puts LD_PRELOAD before the job's own)."""
    name = cheader.string
    out = {"LD_PRELOAD": cfg.shim_path,
           name("GPUSLICE_ENV_MEMORY_LIMIT"): f"{sl.memory_mib}MiB",
           name("GPUSLICE_ENV_STATE_DIR"): statedir.container_dir(cfg.state_dir,
                                                                  container_id(step.job)),
           name("GPUSLICE_ENV_CARD_DIR"): cfg.card_dir()}
    if sl.cores:
        out[name("GPUSLICE_ENV_CORE_LIMIT")] = str(sl.cores)
    return out


def release(cfg: Config, job: int, pid: Optional[int] = None) -> bool:
    """Give back the job's slice; with pid, only if that slurmstepd holds it
    (a step that shares the job's row leaves it to the holder). False if
    nothing was released."""
    rows = held_by(cfg, job)
    if not rows or (pid is not None and all(r.pid != pid for r in rows)):
        return False
    res = _run_hook(cfg, ["release", "--id", container_id(job)])
    if res.returncode == 1:
        return False
    if res.returncode != 0:
        raise JobError(f"job {job}: {_hook_line(res.stderr)}")
    return True
