"""The whole stack on a real GPU, through gpuslice-runtime: a spec from
`gpuslice cdi generate` (real NVML), a runc container made by
`gpuslice-runtime run` asking for a 4 GiB slice with GPUSLICE=0-4g, the real
hook admitting it, the shim preloaded. Inside, PyTorch must see a 4 GiB card,
fit 3 GiB and get OutOfMemoryError for 2 GiB more, and nvidia-smi must show
4096 MiB. After, the reservation is gone. Prints a table; exits 1 on a failure.

    python3 tests/gpu/check_runtime.py OUT

The container's root is a folder with read-only binds of the host's /usr,
/etc and /opt (where PyTorch lives), as ../shared/ENVIRONMENT.md describes.
runc, gpuslice-runtime and gpuslice-hook come from GPUSLICE_RUNC,
GPUSLICE_RUNTIME and GPUSLICE_HOOK (tests/gpu/run sets them: built here, or
carried in .carry/).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from node import generate  # noqa: E402
from table import check, report  # noqa: E402

SHIM_IN_CONTAINER = "/usr/lib/gpuslice/libgpuslice.so"
GIB = 1 << 30

INSIDE = r"""
import subprocess, torch
free, total = torch.cuda.mem_get_info()
print("total", total)
a = torch.empty(3 << 30, dtype=torch.uint8, device="cuda")
print("fits3", True)
try:
    b = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    print("oom", False)
except torch.OutOfMemoryError:
    print("oom", True)
smi = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                     capture_output=True, text=True)
print("smi", smi.stdout.strip() or smi.stderr.strip())
"""


def rootfs(path: Path) -> Path:
    for d in ("usr", "etc", "opt", "proc", "sys", "dev", "tmp", "run", "root", "var"):
        (path / d).mkdir(parents=True, exist_ok=True)
    for link, to in (("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64"),
                     ("sbin", "usr/sbin")):
        if not os.path.lexists(path / link):
            os.symlink(to, path / link)
    return path


def torch_python() -> str:
    """The Python with PyTorch, which the container finds at the same path (its /opt and
    /usr are the host's)."""
    return next((p for p in ("/opt/torch/.venv/bin/python", shutil.which("python3"))
                 if p and os.path.exists(p)), "python3")


def bundle_config(runc: str, bundle: Path) -> dict:
    subprocess.run([runc, "spec", "--bundle", str(bundle)], check=True)
    return host_spec(json.loads((bundle / "config.json").read_text()))


def host_spec(spec: dict) -> dict:
    """runc's default spec made this check's: a writable rootfs with the host's /usr,
    /etc and /opt bound read-only, PyTorch's Python running INSIDE in a 4 GiB slice."""
    spec["root"] = {"path": "rootfs", "readonly": False}
    spec["process"].update(terminal=False, args=[torch_python(), "-c", INSIDE], env=[
        "PATH=/opt/torch/.venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME=/root", "GPUSLICE=0-4g"])
    for d in ("/usr", "/etc", "/opt"):
        spec["mounts"].append({"destination": d, "type": "bind", "source": d,
                               "options": ["rbind", "ro"]})
    return spec


def slice_process(spec: dict, args: Sequence[str], device: str,
                  mounts: Sequence[Tuple[Union[Path, str], str, str]] = (),
                  env: Sequence[str] = ()) -> dict:
    """spec (bundle_config's) running args in a slice of device (GPUSLICE=device in
    place of the check's), with each (host source, container path, ro|rw) bound
    in and the NAME=value env added."""
    spec["process"]["args"] = list(args)
    spec["process"]["env"] = [e for e in spec["process"]["env"] if not e.startswith("GPUSLICE=")]
    spec["process"]["env"] += [f"GPUSLICE={device}", *env]
    for src, dst, mode in mounts:
        spec["mounts"].append({"destination": dst, "type": "bind", "source": str(src),
                               "options": ["rbind", mode]})
    return spec


class Stack(NamedTuple):
    """What a runc container through gpuslice-runtime needs on this host."""
    runc: str
    runtime: str
    tool: Path  # the CDI cache tool, run by this Python
    env: Dict[str, str]  # the node's configuration and cache


def run_command(stack: Stack, bundle: Path, cid: str) -> List[str]:
    """`gpuslice-runtime run` of bundle as container cid, over the stack's runc and cache tool."""
    return [stack.runtime, "--gpuslice-runtime", stack.runc, "--gpuslice-cache-tool",
            str(stack.tool), "run", "--bundle", str(bundle), cid]


def start_container(stack: Stack, bundle: Path, cid: str, make: Callable[[dict], dict],
                    **popen: Any) -> subprocess.Popen:
    """`gpuslice-runtime run` of container cid in a fresh bundle, its config.json
    make(bundle_config's spec); a container of that id left by a killed run is
    deleted first. popen: where its output goes."""
    shutil.rmtree(bundle, ignore_errors=True)
    rootfs(bundle / "rootfs")
    (bundle / "config.json").write_text(json.dumps(make(bundle_config(stack.runc, bundle))))
    subprocess.run([stack.runc, "delete", "-f", cid], capture_output=True)
    return subprocess.Popen(run_command(stack, bundle, cid), env=stack.env, **popen)


def stack_node(out: Path, extra: str = "") -> Optional[Stack]:
    """runc, gpuslice-runtime and the hook (checked present), the shim built,
    the node generated in OUT (extra: more configuration lines); None
    (checked, printed) if any is missing."""
    runc = os.environ.get("GPUSLICE_RUNC") or shutil.which("runc") or ""
    runtime = os.environ.get("GPUSLICE_RUNTIME") or str(
        REPO / "native" / "hook" / "build" / "gpuslice-runtime")
    hook = os.environ.get("GPUSLICE_HOOK") or str(REPO / "native" / "hook" / "build" /
                                                  "gpuslice-hook")
    for name, path in (("runc", runc), ("gpuslice-runtime", runtime), ("gpuslice-hook", hook)):
        check(f"{name} present", "executable", path, os.access(path, os.X_OK))
    if not all(os.access(p, os.X_OK) for p in (runc, runtime, hook)):
        return None
    subprocess.run(["make", "-s", "-C", str(REPO / "native" / "shim")], check=True)
    shim = REPO / "native" / "shim" / "build" / "libgpuslice.so"
    # The shim's mount point must exist in the (read-only) /usr the container sees.
    os.makedirs(os.path.dirname(SHIM_IN_CONTAINER), exist_ok=True)
    if not os.path.exists(SHIM_IN_CONTAINER):
        Path(SHIM_IN_CONTAINER).touch()
    env = generate(out, shim, hook, extra)
    if env is None:
        return None
    tool = out / "gpuslice-cdi-cache"
    tool.write_text(f"#!/bin/sh\nexec {sys.executable} -m ocihook.cdi_cache \"$@\"\n")
    tool.chmod(0o755)
    env["GPUSLICE_CDI_CACHE"] = str(out / "cdi-cache.json")
    return Stack(runc, runtime, tool, env)


def out_dir() -> Path:
    """The check's folder, named on its command line, made if missing."""
    out = Path(sys.argv[1]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    return out


def main() -> int:
    out = out_dir()
    stack = stack_node(out)
    if stack is None:
        return report()
    runc, env = stack.runc, stack.env
    bundle = out / "bundle"
    rootfs(bundle / "rootfs")
    (bundle / "config.json").write_text(json.dumps(bundle_config(runc, bundle)))
    before = (bundle / "config.json").read_bytes()
    res = subprocess.run(run_command(stack, bundle, "gpuslice-gpu-check"), env=env,
                         capture_output=True, text=True, timeout=300)
    check("gpuslice-runtime run exits 0", 0, res.returncode, res.returncode == 0)
    if res.returncode:
        print(res.stdout[-3000:], res.stderr[-3000:])
    after = json.loads((bundle / "config.json").read_text())
    check("config.json rewritten with the slice", "GPUSLICE_MEMORY_LIMIT=4096MiB",
          [e for e in after["process"]["env"] if e.startswith("GPUSLICE_MEMORY")],
          before != (bundle / "config.json").read_bytes() and
          "GPUSLICE_MEMORY_LIMIT=4096MiB" in after["process"]["env"])
    got = dict(line.split(" ", 1) for line in res.stdout.splitlines() if " " in line)
    check("torch sees a 4 GiB card", 4 * GIB, got.get("total"), got.get("total") == str(4 * GIB))
    check("torch: 3 GiB fits", True, got.get("fits3"), got.get("fits3") == "True")
    check("torch: 2 GiB more is OutOfMemoryError", True, got.get("oom"), got.get("oom") == "True")
    check("nvidia-smi inside: memory.total (MiB)", 4096, got.get("smi"), got.get("smi") == "4096")
    from ocihook import accountant

    books = accountant.Accountant(str(out / "state.db"))
    kinds = [e["kind"] for e in books.events()][::-1]
    held = [r.container_id for u in books.usage() for r in u.reservations]
    books.close()
    check("the hook admitted it, poststop released it", "admit, release",
          ", ".join(kinds[-2:]), kinds[-2:] == ["admit", "release"] and not held)
    return report()


if __name__ == "__main__":
    sys.exit(main())
