"""The node's gres.conf lines, from gpuslice's configuration and CDI spec.

Slurm counts shards by gres.conf; gpuslice sizes a job's slice by its own
``slurm_shards``. Both must say the same, so the lines are written from
gpuslice's side: for each whole card of the spec that `gpuslice cdi
generate` wrote (``<index>``, in index order, since Slurm numbers a node's
GPUs in the order of its lines), a ``gpu`` line and a ``shard`` line of
``slurm_shards`` on the card's device node. They live between two marker
lines, so an administrator's other lines stay. ``--check`` says whether the
file's block is what would be written now.
"""
from __future__ import annotations

import os
import re
from typing import List, Optional, Tuple

from cdi.registry import Registry
from ocihook.config import Config

BEGIN = "# BEGIN gpuslice: written by `gpuslice slurm gres --write`; do not edit"
END = "# END gpuslice"
_DEV_NODE = re.compile(r"/dev/nvidia(\d+)$")


class GresError(RuntimeError):
    """One line: what is wrong and what to run."""


def card_nodes(cfg: Config) -> List[Tuple[int, str]]:
    """(index, host device node) of every whole card in the spec, by index."""
    reg = Registry.load([cfg.spec_dir])
    out = []
    for name, found in reg.devices.items():
        kind, _, device = name.partition("=")
        if kind != cfg.cdi_kind or not device.isdigit():
            continue
        nodes = [n.host_path or n.path for n in found.device.edits.device_nodes
                 if _DEV_NODE.search(n.path)]
        if len(nodes) == 1:
            out.append((int(device), nodes[0]))
    if not out:
        raise GresError(f"no card in a {cfg.cdi_kind} spec in {cfg.spec_dir}; run "
                        "`gpuslice cdi generate` first")
    return sorted(out)


def block(cfg: Config, node: Optional[str] = None) -> List[str]:
    """The marker-framed lines for this node (NodeName=node on each, if given)."""
    prefix = f"NodeName={node} " if node else ""
    lines = [BEGIN]
    for _, path in card_nodes(cfg):
        lines.append(f"{prefix}Name=gpu File={path}")
        lines.append(f"{prefix}Name=shard Count={cfg.slurm_shards} File={path}")
    lines.append(END)
    return lines


def node_gres(cfg: Config) -> str:
    """What slurm.conf's NodeName line must say for these lines: Gres=..."""
    n = len(card_nodes(cfg))
    return f"Gres=gpu:{n},shard:{n * cfg.slurm_shards}"


def _split(text: str) -> Tuple[List[str], Optional[List[str]], List[str]]:
    """(before, block or None, after) of a gres.conf's lines."""
    lines = text.splitlines()
    if BEGIN not in lines:
        return lines, None, []
    start = lines.index(BEGIN)
    end = lines.index(END, start) if END in lines[start:] else len(lines) - 1
    return lines[:start], lines[start:end + 1], lines[end + 1:]


def write(cfg: Config, path: str, node: Optional[str] = None) -> None:
    """Put the block in path (replacing the old one, keeping other lines)."""
    try:
        with open(path, encoding="utf-8") as f:
            before, _, after = _split(f.read())
    except FileNotFoundError:
        before, after = [], []
    tmp = f"{path}.gpuslice-new"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join([*before, *block(cfg, node), *after]) + "\n")
    os.replace(tmp, path)


def check(cfg: Config, path: str, node: Optional[str] = None) -> Optional[str]:
    """None if path's block is what write() would put there now; else one line
    naming the first difference and the fix."""
    fix = f"run `gpuslice slurm gres --write {path}` and restart slurmd"
    try:
        with open(path, encoding="utf-8") as f:
            _, have, _ = _split(f.read())
    except FileNotFoundError:
        return f"{path}: no such file; {fix}"
    if have is None:
        return f"{path}: no gpuslice block; {fix}"
    want = block(cfg, node)
    for i in range(max(len(have), len(want))):
        h = have[i] if i < len(have) else "(nothing)"
        w = want[i] if i < len(want) else "(nothing)"
        if h != w:
            return f"{path}: has {h!r} where gpuslice (slurm_shards {cfg.slurm_shards}, " \
                   f"{cfg.spec_dir}) says {w!r}; {fix}"
    return None
