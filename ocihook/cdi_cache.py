"""gpuslice-cdi-cache: check every CDI spec a runtime would read, once, and
write what they offer where gpuslice-runtime reads it on each request.

    gpuslice-cdi-cache [--output FILE]

gpuslice-runtime (native/hook/runtime, C) injects the devices a container
asks for itself, from this cache; it runs this program only when the cache
is missing, or when the configuration or a spec dir changed since it was
made (the layout and the rules are in native/include/gpuslice/cdicache.h).
The spec dirs are /etc/cdi, /var/run/cdi and the configured spec_dir, in
increasing priority; every spec is validated as `gpuslice cdi validate` does
(schema and CDI rules), and an invalid one is skipped with its reason kept
for messages, as runtimes skip it. FILE: $GPUSLICE_CDI_CACHE, else
/var/cache/gpuslice/cdi.json. A bad configuration is one line on stderr,
exit 2, and no cache written.
"""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Dict, List, NoReturn, Optional, Sequence

from cdi.registry import DEFAULT_SPEC_DIRS, Registry
from cdi.specfile import spec_files, write_atomic
from ocihook import cheader
from ocihook import config as config_mod

PROGRAM = "gpuslice-cdi-cache"


def fail(message: str) -> NoReturn:
    print(f"{PROGRAM}: error: {message}", file=sys.stderr)
    sys.exit(2)


def default_path() -> str:
    return os.environ.get(cheader.string("GPUSLICE_CDI_CACHE_ENV")) or \
        cheader.string("GPUSLICE_CDI_CACHE_DEFAULT")


def spec_dirs(configured: str) -> List[str]:
    dirs = list(DEFAULT_SPEC_DIRS)
    if os.path.normpath(configured) not in dirs:
        dirs.append(configured)
    return dirs


def _input(path: str) -> List[Any]:
    """[path, dev, ino, size, mtime_ns, ctime_ns], or [path, None] if missing:
    what the runtime compares with its own stat() of the path."""
    try:
        st = os.stat(path)
    except OSError:
        return [path, None]
    return [path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def build(config_input: List[Any], kind: str, dirs: Sequence[str],
          env: Dict[str, Optional[str]], started_ns: int) -> Dict[str, Any]:
    """The cache's document. Every input is stat'ed before it is read (the
    configuration's by the caller), so a change after its stat shows as a
    difference next time."""
    inputs = [config_input] + [_input(d) for d in dirs]
    inputs += [_input(path) for path in spec_files(list(dirs))]
    reg = Registry.load(dirs)
    specs: List[Any] = []
    spec_index: Dict[int, int] = {}
    devices: Dict[str, Any] = {}
    offers: Dict[str, List[str]] = {}
    for name, found in sorted(reg.devices.items()):
        if id(found.spec) not in spec_index:
            spec_index[id(found.spec)] = len(specs)
            specs.append(found.spec.edits.to_dict())
        devices[name] = {"spec": spec_index[id(found.spec)], "edits": found.device.edits.to_dict()}
        vendor_class, _, short = name.partition("=")
        offers.setdefault(vendor_class, []).append(short)
    racy = started_ns - cheader.constant("GPUSLICE_CDI_CACHE_RACY_NS")
    trusted = all(i[1] is None or max(i[4], i[5]) < racy for i in inputs)
    return {"version": cheader.constant("GPUSLICE_CDI_CACHE_VERSION"), "trusted": trusted,
            "env": env, "inputs": inputs, "kind": kind, "specs": specs, "devices": devices,
            "conflicts": dict(reg.conflicts),
            "offers": {k: sorted(v) for k, v in sorted(offers.items())},
            "errors": list(reg.errors)}


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and not (len(args) == 2 and args[0] == "--output" and args[1]):
        fail(f"usage: {PROGRAM} [--output FILE]")
    output = args[1] if args else default_path()
    started_ns = time.time_ns()
    # The configuration's own env is all the result depends on outside the files.
    env = {config_mod.ENV_VAR: os.environ.get(config_mod.ENV_VAR)}
    config_input = _input(config_mod.config_path()[0])
    try:
        cfg = config_mod.load()
    except config_mod.ConfigError as e:
        fail(str(e))
    doc = build(config_input, cfg.cdi_kind, spec_dirs(cfg.spec_dir), env, started_ns)
    try:
        write_atomic(output, json.dumps(doc, separators=(",", ":")) + "\n", 0o644)
    except OSError as e:
        fail(f"cannot write the CDI cache {output}: {e.strerror}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
