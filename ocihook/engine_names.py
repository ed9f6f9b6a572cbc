"""The names Podman and Docker give containers, for the readers that show
containers (status, top, the exporter) and resize, which accepts them.

The hook records a name only where the engine writes one into config.json
(containerd's CRI, CRI-O, nerdctl: annotations). Podman and Docker write
none there; they keep it in their own stores, which this module reads as
files, never by running the engine (a scrape or a `top` frame must not wait
on a daemon):

- Podman: containers/storage's `<driver>-containers/containers.json` under
  its graphroot (configuration key podman_storage), whose containers carry
  the names Podman gave them;
- Docker: `containers/<id>/config.v2.json` under dockerd's data-root
  (docker_root), whose `Name` is `/<name>`.

A name is the tenant's choice (`--name`): shown by the tenant-text rule,
and never preferred to an id (ocihook/resize.py).
"""
from __future__ import annotations

import glob
import json
import os
from typing import Callable, Dict, Iterable, Optional

from cdi import regularfile
from ocihook.accountant import Reservation
from ocihook.config import Config

MAX_BYTES = 64 << 20  # containers.json of a busy host: about 1 KiB a container
NAME_MAX = 253        # longer is no name an engine gives


# What readers are given: ids -> the names their engines gave them.
Lookup = Callable[[Iterable[str]], Dict[str, str]]


def lookup(cfg: Config) -> Lookup:
    """names() over the stores the configuration names."""
    return lambda ids: names(ids, cfg.podman_storage, cfg.docker_root)


def names_of(rows: Iterable[Reservation], given: Optional[Lookup]) -> Dict[str, str]:
    """id -> the name to show for each row: the one the hook recorded, else
    the one its engine gave (asked of `given` once, for the rows without);
    "" for neither."""
    held = list(rows)
    engines = given([r.container_id for r in held if not r.name]) if given else {}
    return {r.container_id: r.name or engines.get(r.container_id, "") for r in held}


def names(ids: Iterable[str], podman_storage: str, docker_root: str) -> Dict[str, str]:
    """id -> the name its engine gave it, for those of ids an engine knows."""
    wanted = set(ids)
    if not wanted:
        return {}
    found = {cid: name for cid, name in _podman(podman_storage).items() if cid in wanted}
    for cid in wanted - set(found):
        name = _docker(docker_root, cid)
        if name:
            found[cid] = name
    return found


def _podman(storage: str) -> Dict[str, str]:
    out: Dict[str, str] = {}
    for path in sorted(glob.glob(os.path.join(glob.escape(storage), "*-containers",
                                              "containers.json"))):
        doc = _json(path)
        for c in doc if isinstance(doc, list) else []:
            if not isinstance(c, dict):
                continue
            cid, given = c.get("id"), c.get("names")
            if isinstance(cid, str) and isinstance(given, list) and given \
                    and isinstance(given[0], str) and 0 < len(given[0]) <= NAME_MAX:
                out[cid] = given[0]
    return out


def _docker(root: str, cid: str) -> Optional[str]:
    if not cid or "/" in cid or cid.startswith("."):
        return None  # an id names one folder, never a path out of it
    doc = _json(os.path.join(root, "containers", cid, "config.v2.json"))
    name = doc.get("Name") if isinstance(doc, dict) else None
    if isinstance(name, str) and 1 < len(name) <= NAME_MAX + 1:
        return name[1:] if name.startswith("/") else name
    return None


def _json(path: str) -> object:
    """The file's JSON, or None: a store we cannot read is no name, never an
    error of the command that shows containers."""
    try:
        return json.loads(regularfile.read_bounded(path, MAX_BYTES))
    except (OSError, ValueError, regularfile.NotRegular, regularfile.TooLarge):
        return None
