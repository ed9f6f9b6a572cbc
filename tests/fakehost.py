"""A fake NVIDIA host on disk: a driver root, a dev root and a sysfs root.

The driver root holds real ELF libraries named as the driver's are, listed in
an ld cache made by the real ldconfig; its libnvidia-ml.so.1 is our fake NVML,
so discovery loads NVML from the driver root exactly as it would on a host
whose driver lives under /run/nvidia/driver. Device nodes are real character
devices made with mknod.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sysconfig
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional

import jsonschema

DRIVER_VERSION = "580.95.05"
LIBDIR = "/usr/lib/x86_64-linux-gnu"
NVIDIA_MAJOR = 195
UVM_MAJOR = 510
# Libraries of the fake driver other than NVML: empty shared objects with the
# driver's sonames are enough for discovery and for bind mounts.
OTHER_LIBRARIES = ("libcuda.so.1", "libnvidia-ptxjitcompiler.so.1", "libnvidia-nvvm.so.4",
                   "libcudadebugger.so.1")
UNRELATED_LIBRARY = "libunrelated.so.2"
OFFICIAL_SCHEMA = Path(__file__).resolve().parents[2] / "shared" / "reference" / "cdi-schema"
PROFILES = [("4g", "4GiB", 0), ("4g-30", "4GiB", 30), ("32g", "32GiB", None)]


HOOK_DIR = Path(__file__).resolve().parent.parent / "native" / "hook"


def build_hook(asan: bool = False) -> Path:
    """native/hook's gpuslice-hook, built (make: only what changed); with asan,
    the AddressSanitizer and UBSan build."""
    subprocess.run(["make", "-s", "-C", str(HOOK_DIR), *(["asan"] if asan else [])],
                   check=True)
    return HOOK_DIR / ("build-asan" if asan else "build") / "gpuslice-hook"


def build_runtime(asan: bool = False) -> Path:
    """native/hook's gpuslice-runtime, built (make: only what changed); with asan,
    the AddressSanitizer and UBSan build."""
    subprocess.run(["make", "-s", "-C", str(HOOK_DIR), *(["asan"] if asan else [])],
                   check=True)
    return HOOK_DIR / ("build-asan" if asan else "build") / "gpuslice-runtime"


def runtime_cache_env(folder: Path) -> Dict[str, str]:
    """The env that points gpuslice-runtime at the CDI cache tool pip installed
    and at a cache of its own in folder (not the host's /var/cache)."""
    tool = os.path.join(sysconfig.get_path("scripts"), "gpuslice-cdi-cache")
    assert os.access(tool, os.X_OK), f"{tool} missing: pip install -e . (install.sh)"
    return {"GPUSLICE_CACHE_TOOL": tool, "GPUSLICE_CDI_CACHE": str(folder / "cdi-cache.json")}


def fake_gpu(index: int, **overrides: Any) -> Dict[str, Any]:
    """One fake H200-like card description; overrides replace fields."""
    gpu: Dict[str, Any] = {
        "uuid": "GPU-%08x-1111-2222-3333-%012x" % (index + 0xA0, index),
        "name": "NVIDIA H200",
        "memory_mib": 143771,
        "minor": index,
        "pci_bus_id": "00000000:%02X:00.0" % (0x18 + index),
        "mig": False,
    }
    gpu.update(overrides)
    return gpu


def fake_gpus_doc(count: int, gpus: Optional[List[Dict[str, Any]]] = None) -> Dict[str, Any]:
    return {
        "driver_version": "580.95.05",
        "cuda_version": "13.0",
        "gpus": gpus if gpus is not None else [fake_gpu(i) for i in range(count)],
    }


def _shared_object(dest: Path, soname: str) -> None:
    src = dest.with_suffix(".c")
    src.write_text("int gpuslice_fake_symbol(void) { return 0; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(dest), str(src)],
                   check=True)
    src.unlink()


def make_driver_root(root: Path, fakedriver_build: Path, version: str = DRIVER_VERSION) -> Path:
    libdir = root / LIBDIR.lstrip("/")
    libdir.mkdir(parents=True)
    for soname in OTHER_LIBRARIES + (UNRELATED_LIBRARY,):
        base = soname.split(".so", 1)[0]
        _shared_object(libdir / f"{base}.so.{version}", soname)
    shutil.copy(fakedriver_build / "libnvidia-ml.so.1", libdir / f"libnvidia-ml.so.{version}")
    # An unversioned name in the cache, as real driver installs have them
    # (seen on the H200 host: libcuda.so, libnvidia-ml.so, ...).
    _shared_object(libdir / "libnvidia-cfg.so", "libnvidia-cfg.so")
    (root / "etc").mkdir()
    (root / "etc" / "ld.so.conf").write_text(LIBDIR + "\n")
    subprocess.run(["ldconfig", "-r", str(root)], check=True)
    bindir = root / "usr" / "bin"
    bindir.mkdir(parents=True)
    smi = bindir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho fake nvidia-smi\n")
    smi.chmod(0o755)
    firmware = root / "lib" / "firmware" / "nvidia" / version
    firmware.mkdir(parents=True)
    (firmware / "gsp_ga10x.bin").write_bytes(b"\0" * 64)
    return root


def mknod_char(path: Path, major: int, minor: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))


def make_dev_root(root: Path, minors: Iterable[int], control: bool = True,
                  uvm: bool = True) -> Path:
    (root / "dev").mkdir(parents=True, exist_ok=True)
    for minor in minors:
        mknod_char(root / "dev" / f"nvidia{minor}", NVIDIA_MAJOR, minor)
    if control:
        mknod_char(root / "dev" / "nvidiactl", NVIDIA_MAJOR, 255)
    if uvm:
        mknod_char(root / "dev" / "nvidia-uvm", UVM_MAJOR, 0)
        mknod_char(root / "dev" / "nvidia-uvm-tools", UVM_MAJOR, 1)
    return root


class Host:
    """One fake host: GPUs JSON, dev root, config file, spec dir."""

    def __init__(self, tmp: Path, driver_root: Path, gpus: List[Dict],
                 extra_config: str = "", spec_dir: Optional[Path] = None) -> None:
        self.tmp = tmp
        self.driver_root = driver_root
        self.dev_root = make_dev_root(tmp / "devroot", [g["minor"] for g in gpus])
        self.spec_dir = spec_dir or tmp / "cdi"
        self.gpus_json = tmp / "gpus.json"
        self.set_gpus(gpus)
        self.shim = tmp / "libgpuslice.so"
        self.shim.write_bytes(b"")
        self.hook = tmp / "gpuslice-hook"
        self.hook.write_text("#!/bin/sh\nexit 0\n")
        self.hook.chmod(0o755)
        self.config = tmp / "config.yaml"
        profiles = "\n".join(
            f"  - {{name: {n}, memory: {m}" + (f", cores: {c}}}" if c is not None else "}")
            for n, m, c in PROFILES)
        self.config.write_text(
            f"spec_dir: {self.spec_dir}\ndriver_root: {driver_root}\ndev_root: {self.dev_root}\n"
            f"shim_path: {self.shim}\nhook_path: {self.hook}\nstate_dir: {tmp / 'state'}\n"
            f"database: {tmp / 'state.db'}\n"
            f"profiles:\n{profiles}\n"
            + extra_config)

    def use_real_hook(self, into: Optional[Path] = None) -> Path:
        """Name this tree's gpuslice-hook (native/hook, built here) in the
        configuration, as an installation has it, instead of the stand-in;
        with *into*, a copy in that folder (for a user who cannot reach this
        tree)."""
        hook = build_hook()
        if into is not None:
            into.mkdir(parents=True, exist_ok=True)
            hook = Path(shutil.copy2(hook, into / hook.name))
        self.config.write_text(self.config.read_text().replace(f"hook_path: {self.hook}",
                                                               f"hook_path: {hook}"))
        self.hook = hook
        return hook

    def spec_hook(self, device: str, hook_name: str = "createContainer") -> List[str]:
        """The args of `device`'s hook in the spec `cdi generate` wrote (JSON or YAML)."""
        import yaml

        [path] = [p for p in self.spec_dir.glob("gpuslice.*") if p.suffix in (".json", ".yaml")]
        doc = yaml.safe_load(path.read_text())
        [dev] = [d for d in doc["devices"] if d["name"] == device]
        [hook] = [h for h in dev["containerEdits"]["hooks"] if h["hookName"] == hook_name]
        return hook["args"]

    def set_gpus(self, gpus: List[Dict], driver_version: str = DRIVER_VERSION) -> None:
        doc = fake_gpus_doc(0, gpus)
        doc["driver_version"] = driver_version
        self.gpus_json.write_text(json.dumps(doc))

    def run(self, *args: str, config: Optional[Path] = None,
            path: Optional[str] = None) -> subprocess.CompletedProcess:
        """`gpuslice ARGS` on this host; path: the PATH it finds engines on."""
        env = dict(os.environ, **({"PATH": path} if path is not None else {}))
        env["GPUSLICE_FAKE_GPUS"] = str(self.gpus_json)
        env["GPUSLICE_CONFIG"] = str(config or self.config)
        env.pop("LD_LIBRARY_PATH", None)  # NVML must come from the driver root
        return subprocess.run(["gpuslice", *args], env=env, capture_output=True, text=True,
                              timeout=60)

    def generated(self, *args: str) -> "tuple[subprocess.CompletedProcess, Dict]":
        """Generate to stdout; the spec is checked against the official CDI schema."""
        res = self.run("cdi", "generate", "--format", "json", "--output", "-", *args)
        assert res.returncode == 0, res.stderr
        doc = json.loads(res.stdout)
        official_validator().validate(doc)
        return res, doc

    def spec(self, *args: str) -> Dict:
        return self.generated(*args)[1]


def podman_host(tmp: Path, driver_root: Path, podman: Any, profiles: str,
                gpus: Optional[List[Dict]] = None) -> Host:
    """A fake host for real Podman (tests/podman_harness.py's): one 16 GiB
    card unless gpus says otherwise, the spec written where Podman reads it
    and generated, the real hook, and Podman's store named so that status
    shows the names Podman gives. profiles: more profile lines."""
    (tmp / "host").mkdir()
    h = Host(tmp / "host", driver_root, gpus or [fake_gpu(0, memory_mib=16384)],
             spec_dir=podman.cdi_dir,
             extra_config=profiles + f"podman_storage: {podman.root}\n")
    h.use_real_hook()
    res = h.run("cdi", "generate")
    assert res.returncode == 0, res.stderr
    return h


def devices(spec: Dict) -> Dict[str, Dict]:
    return {d["name"]: d["containerEdits"] for d in spec["devices"]}


def official_validator() -> jsonschema.Draft7Validator:
    """The official CDI schema (../shared/reference), its defs.json resolved locally."""
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT7

    schema = json.loads((OFFICIAL_SCHEMA / "schema.json").read_text())
    defs = json.loads((OFFICIAL_SCHEMA / "defs.json").read_text())
    registry = Registry().with_resource(
        "defs.json", Resource.from_contents(defs, default_specification=DRAFT7))
    return jsonschema.Draft7Validator(schema, registry=registry)


@contextmanager
def shim_holder(gpus_json: Path, fakedriver: Path, state_dir: Path, limit: str,
                size: str) -> Iterator[subprocess.Popen]:
    """tests/shim's cuprog under the real shim, as a process of the container
    whose state dir is `state_dir`, holding `size` on card 0 under a cap of
    `limit` while the block runs (its region is what status, the exporter
    and the Nomad plugin's Stats read)."""
    repo = Path(__file__).resolve().parent.parent
    subprocess.run(["make", "-s", "-C", str(repo / "tests" / "shim"), "VARIANT=plain"],
                   check=True)
    subprocess.run(["make", "-s", "-C", str(repo / "native" / "shim")], check=True)
    env = dict(os.environ, GPUSLICE_FAKE_GPUS=str(gpus_json), LD_LIBRARY_PATH=str(fakedriver),
               LD_PRELOAD=str(repo / "native" / "shim" / "build" / "libgpuslice.so"),
               GPUSLICE_STATE_DIR=str(state_dir), GPUSLICE_MEMORY_LIMIT=limit,
               GPUSLICE_CONTEXT_RESERVE="0")
    prog = subprocess.Popen([str(repo / "tests" / "shim" / "build-plain" / "cuprog"), "direct",
                             "init", "pctx", "0", "alloc", size, "hold"], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        while prog.stdout.readline().strip() != "held":
            assert prog.poll() is None, "cuprog exited early"
        yield prog
    finally:
        prog.communicate(timeout=60)
