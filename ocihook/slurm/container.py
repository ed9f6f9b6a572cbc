"""A Slurm job step in a container (`srun --container`, oci.conf): the shim
and the job's state folder bound into the container, so that its processes,
which get the plugin's env as any step's do, load the shim with the job's
region.

oci.conf's RunTimeRun runs `gpuslice slurm bind --bundle %b --job %j --
RUNTIME...`: the bundle's config.json (Slurm's copy in its spool) gets bind
mounts and the step's env, then the runtime is executed. Slurm 22.05 gives a
container's process an env of its own, without what the plugin set for the
step, so that env comes from the job's folder (job.py writes it there at
admission). Only paths of gpuslice's own are bound, never one an env names:
the shim (configuration key shim_path, read-only), the card files
(read-only) and the job's folder ``<state_dir>/containers/slurm-<job>``, and
that one only when it belongs to the container's user, as the plugin made it.
Of the env file only LD_PRELOAD and GPUSLICE_* are taken.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional

from ocihook import statedir
from ocihook.config import Config
from ocihook.slurm.job import ENV_FILE, container_id


class BindError(RuntimeError):
    """One line: what is wrong with the bundle."""


def _bind(path: str, read_only: bool) -> Dict[str, Any]:
    return {"destination": path, "source": path, "type": "bind",
            "options": ["rbind", "ro" if read_only else "rw", "nosuid", "nodev"]}


def job_folder(cfg: Config, doc: Dict[str, Any], job: int) -> Optional[str]:
    """The job's folder if the plugin made one (a step with shards), checked
    to belong to the container's user; None for a step without shards."""
    folder = statedir.container_dir(cfg.state_dir, container_id(job))
    try:
        owner = os.stat(folder).st_uid
    except FileNotFoundError:
        return None
    uid = doc.get("process", {}).get("user", {}).get("uid", 0)
    if owner != uid:
        raise BindError(f"{folder} belongs to uid {owner}, the container runs as uid {uid}: "
                        "it is not this job's; run the step as the job's user")
    return folder


def _step_env(folder: str) -> Dict[str, str]:
    try:  # the folder is the user's: never through a link they put there
        fd = os.open(os.path.join(folder, ENV_FILE), os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise BindError(f"{folder}/{ENV_FILE}: cannot read the step's env ({e.strerror})") \
            from None
    with os.fdopen(fd, encoding="utf-8", errors="replace") as f:
        lines = f.read(65536).splitlines()
    pairs = (line.split("=", 1) for line in lines if "=" in line)
    return {k: v for k, v in pairs if k == "LD_PRELOAD" or k.startswith("GPUSLICE_")}


def edit(cfg: Config, doc: Dict[str, Any], job: int) -> bool:
    """doc (a config.json) with the binds and the step's env; False if the
    job holds no slice here (nothing changed)."""
    folder = job_folder(cfg, doc, job)
    if folder is None:
        return False
    process = doc.setdefault("process", {})
    have = dict(e.split("=", 1) for e in process.get("env", []) if "=" in e)
    for key, value in _step_env(folder).items():
        if key == "LD_PRELOAD" and have.get(key):
            value = f"{value} {have[key]}"
        have[key] = value
    process["env"] = [f"{k}={v}" for k, v in have.items()]
    binds = [_bind(cfg.shim_path, True), _bind(cfg.card_dir(), True), _bind(folder, False)]
    taken = {m.get("destination") for m in doc.get("mounts", [])}
    doc["mounts"] = doc.get("mounts", []) + [m for m in binds if os.path.exists(m["source"])
                                             and m["destination"] not in taken]
    return True


def bind(cfg: Config, bundle: str, job: int) -> bool:
    """Edit bundle/config.json (replaced atomically); False if nothing to do."""
    path = os.path.join(bundle, "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise BindError(f"{path}: cannot read the bundle's config.json ({e})") from None
    if not isinstance(doc, dict) or not edit(cfg, doc, job):
        return False
    tmp = f"{path}.gpuslice-new"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    os.replace(tmp, path)
    return True
