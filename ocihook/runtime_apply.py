"""gpuslice-runtime-apply: inject the CDI devices a container asks for into its
config.json, for runtimes that cannot read CDI (run by gpuslice-runtime).

    gpuslice-runtime-apply --bundle DIR

gpuslice-runtime (native/hook, C) runs this only for a `create` or `run`
whose config.json holds a request, and execs the real runtime after it:

- env `GPUSLICE=<device>[,<device>...]` and annotation `gpuslice.io/request`
  (same form): our devices, by name (`0-4g-30`, `4g`) or fully qualified;
- annotations `cdi.k8s.io/<anything>`: fully qualified devices of any vendor
  (`vendor.com/class=name`, comma-separated).

The devices are found in the spec dirs (/etc/cdi, /var/run/cdi and the
configured spec_dir, in increasing priority), their edits applied (cdi.apply)
and config.json replaced atomically. Nothing is written when anything fails:
one line on stderr, exit 2. Imports only what this path needs (no click, no
jsonschema).
"""
from __future__ import annotations

import json
import os
import stat
import sys
from typing import Any, Dict, List, NoReturn, Optional, Sequence

from cdi import regularfile

ENV_NAME = "GPUSLICE"
REQUEST_ANNOTATION = "gpuslice.io/request"
CDI_ANNOTATION_PREFIX = "cdi.k8s.io/"
APPLIED_ANNOTATION = "gpuslice.io/applied"  # what was injected: a second run changes nothing
CONFIG_MAX_BYTES = 64 * 1024 * 1024


class RequestError(ValueError):
    """A request that cannot be served; one line for the user."""


def fail(message: str) -> NoReturn:
    print(f"gpuslice-runtime: error: {message}", file=sys.stderr)
    sys.exit(2)


def requested_devices(config: Dict[str, Any], kind: str) -> List[str]:
    """The fully qualified devices config.json asks for, in order, each once."""
    from cdi import names

    wanted: List[str] = []

    def add(value: Any, where: str, plain_ok: bool) -> None:
        if not isinstance(value, str) or not value.strip():
            raise RequestError(f"{where} {value!r} is not a comma-separated list of CDI devices")
        for item in (x.strip() for x in value.split(",")):
            if "=" not in item:
                if not plain_ok:
                    raise RequestError(f"{where}: device {item!r} is not fully qualified "
                                       "(vendor.com/class=name)")
                item = names.qualified(kind, item)
            try:
                names.parse_qualified(item)
            except names.CdiNameError as e:
                raise RequestError(f"{where}: {e}") from None
            if item not in wanted:
                wanted.append(item)

    process = config.get("process")
    env = process.get("env") if isinstance(process, dict) else None
    for entry in env if isinstance(env, list) else []:
        if isinstance(entry, str) and entry.startswith(ENV_NAME + "="):
            add(entry[len(ENV_NAME) + 1:], f"env {ENV_NAME}", True)
    annotations = config.get("annotations")
    if annotations is None:
        annotations = {}
    if not isinstance(annotations, dict):
        raise RequestError("config.json annotations is not an object")
    if REQUEST_ANNOTATION in annotations:
        add(annotations[REQUEST_ANNOTATION], f"annotation {REQUEST_ANNOTATION}", True)
    for key in sorted(k for k in annotations if k.startswith(CDI_ANNOTATION_PREFIX)):
        add(annotations[key], f"annotation {key}", False)
    return wanted


def spec_dirs(configured: str) -> List[str]:
    from cdi.registry import DEFAULT_SPEC_DIRS

    dirs = list(DEFAULT_SPEC_DIRS)
    if os.path.normpath(configured) not in dirs:
        dirs.append(configured)
    return dirs


def read_config(bundle: str) -> "tuple[Dict[str, Any], int]":
    """config.json as the container's author wrote it: a regular file (no link,
    no FIFO: nothing waited on), bounded, a JSON object; and its mode."""
    path = os.path.join(bundle, "config.json")
    try:
        fd, st = regularfile.open_regular(path, follow_links=False)
    except OSError as e:
        fail(f"{path}: {e.strerror}")
    except regularfile.NotRegular as e:
        fail(str(e))
    try:
        data = regularfile.read_at_most(fd, CONFIG_MAX_BYTES)
    finally:
        os.close(fd)
    if len(data) > CONFIG_MAX_BYTES:
        fail(f"{path} is over {CONFIG_MAX_BYTES // (1024 * 1024)} MiB")
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        fail(f"{path} is not JSON: {e}")
    except RecursionError:
        fail(f"{path} is not JSON this runtime reads: nested too deep")
    if not isinstance(doc, dict):
        fail(f"{path} is not a JSON object")
    return doc, stat.S_IMODE(st.st_mode)


def inject(config: Dict[str, Any], kind: str, dirs: Sequence[str]) -> Optional[List[str]]:
    """Apply the requested devices' edits to config; the devices, or None if it asks for
    none or they are in already. RequestError/ResolveError/ApplyError on a bad request."""
    from cdi.apply import apply, joined_edits
    from cdi.registry import Registry

    wanted = requested_devices(config, kind)
    if not wanted:
        return None
    applied = ",".join(wanted)
    if (config.get("annotations") or {}).get(APPLIED_ANNOTATION) == applied:
        return None
    chosen = Registry.load(dirs).resolve(wanted)
    apply(config, joined_edits(chosen))
    config.setdefault("annotations", {})[APPLIED_ANNOTATION] = applied
    return wanted


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] != "--bundle" or not args[1]:
        fail("usage: gpuslice-runtime-apply --bundle DIR")
    bundle = os.path.abspath(args[1])
    from cdi.apply import ApplyError
    from cdi.registry import ResolveError
    from ocihook import config as config_mod

    try:
        cfg = config_mod.load()
    except config_mod.ConfigError as e:
        fail(str(e))
    doc, mode = read_config(bundle)
    try:
        if inject(doc, cfg.cdi_kind, spec_dirs(cfg.spec_dir)) is None:
            return 0
    except (RequestError, ResolveError, ApplyError) as e:
        fail(str(e))
    from cdi.specfile import write_atomic

    try:
        write_atomic(os.path.join(bundle, "config.json"), json.dumps(doc), mode)
    except OSError as e:
        fail(f"cannot write {bundle}/config.json: {e.strerror}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
