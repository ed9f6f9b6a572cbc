"""CDI generation against the real NVML and driver files of a GPU host.

Runs `gpuslice cdi generate` as a user would (as a process, default driver and
dev roots), then checks the spec against what the host says independently:
nvidia-smi's list of cards, the device nodes in /dev, the driver's files, and
both the package's validator and the official CDI schema when present. Prints
a table; exits 1 if any check failed.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from node import hook_binary  # noqa: E402
from table import check, measured, report  # noqa: E402
GPUSLICE = [sys.executable, "-m", "ocihook.cli"]
def run(*args: str, env: Dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([*GPUSLICE, *args], env=env, capture_output=True, text=True,
                          cwd=REPO, timeout=120)


def smi_cards() -> List[Dict[str, str]]:
    q = "index,uuid,name,memory.total,pci.bus_id,mig.mode.current"
    res = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True)
    cards = []
    for line in res.stdout.strip().splitlines():
        index, uuid, name, mem, bus, mig = [p.strip() for p in line.split(",")]
        cards.append({"index": index, "uuid": uuid, "name": name, "memory_mib": mem,
                      "bus": bus, "mig": mig})
    return cards


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    config = out / "config.yaml"
    shim = out / "libgpuslice.so"
    shim.write_bytes(b"")
    hook = hook_binary()
    config.write_text(f"spec_dir: {out}/cdi\nshim_path: {shim}\nhook_path: {hook}\n"
                      f"database: {out}/state.db\nstate_dir: {out}/state\n")
    env = dict(os.environ, GPUSLICE_CONFIG=str(config))

    times = []
    for _ in range(5):
        start = time.perf_counter()
        res = run("cdi", "generate", env=env)
        times.append((time.perf_counter() - start) * 1000)
    check("cdi generate exits 0", 0, res.returncode, res.returncode == 0)
    if res.returncode:
        print(res.stderr)
        return report()
    spec_path = out / "cdi" / "gpuslice.yaml"
    import yaml

    spec = yaml.safe_load(spec_path.read_text())
    (out / "gpuslice.json").write_text(json.dumps(spec, indent=1))
    devices = {d["name"]: d["containerEdits"] for d in spec["devices"]}
    cards = smi_cards()

    check("cdiVersion", "0.5.0", spec["cdiVersion"], spec["cdiVersion"] == "0.5.0")
    check("cards in spec = nvidia-smi", len(cards), sum(1 for n in devices if n.isdigit()),
          all(c["index"] in devices for c in cards))
    for c in cards:
        i = c["index"]
        node = devices[i]["deviceNodes"][0]["path"]
        minor = os.minor(os.stat(node).st_rdev)
        check(f"card {i}: node {node} is the card's minor", f"/dev/nvidia{minor}", node,
              node == f"/dev/nvidia{minor}")
        check(f"card {i}: UUID device", c["uuid"], c["uuid"] in devices, c["uuid"] in devices)
        mem = int(c["memory_mib"])
        fitting = [n for n in devices if n.startswith(f"{i}-")]
        expected = ["1g", "2g", "4g", "8g", "16g", "32g", "4g-30", "8g-50"]
        if c["mig"] in ("Enabled",):
            check(f"card {i}: MIG, whole only", 0, len(fitting), not fitting)
        else:
            check(f"card {i} ({mem} MiB): slices", len(expected), len(fitting),
                  sorted(fitting) == sorted(f"{i}-{p}" for p in expected))
        s = devices.get(f"{i}-4g-30", {})
        check(f"card {i}: 4g-30 limits", "4096MiB, 30", s.get("env", [])[:2],
              s.get("env", [])[:2] == ["GPUSLICE_MEMORY_LIMIT=4096MiB", "GPUSLICE_CORE_LIMIT=30"])

    edits = spec["containerEdits"]
    driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                            capture_output=True, text=True).stdout.split()[0]
    check("driver version env", driver, edits["env"][0], edits["env"][0].endswith("=" + driver))
    nodes = [n["path"] for n in edits["deviceNodes"]]
    want_nodes = [p for p in ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                              "/dev/nvidia-modeset") if os.path.exists(p)]
    check("control nodes = those in /dev", want_nodes, nodes, nodes == want_nodes)
    mounts = {Path(m["containerPath"]).name: m for m in edits["mounts"]}
    for lib in ("libcuda.so.1", "libnvidia-ml.so.1", "libnvidia-ptxjitcompiler.so.1"):
        m = mounts.get(lib)
        real = os.path.realpath(m["hostPath"]) if m else ""
        check(f"mount {lib}", f"-> *.{driver}", real, bool(m) and real.endswith(driver))
    check("mount nvidia-smi", "present", "nvidia-smi" in mounts, "nvidia-smi" in mounts)
    missing = [m["hostPath"] for m in edits["mounts"] if not os.path.exists(m["hostPath"])]
    check("every spec-wide host path exists", 0, len(missing), not missing)
    check("mounts in spec", ">= 3", len(edits["mounts"]), len(edits["mounts"]) >= 3)

    # The libraries the spec names are enough to run NVML: load libnvidia-ml
    # from the spec's path alone and ask it for the cards.
    ml = mounts["libnvidia-ml.so.1"]["hostPath"]
    probe = ("import ctypes, pynvml; pynvml.nvmlLib = ctypes.CDLL(%r); pynvml.nvmlInit(); "
             "print(pynvml.nvmlDeviceGetCount())" % ml)
    got = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    check("NVML from the spec's library", len(cards), got.stdout.strip(),
          got.stdout.strip() == str(len(cards)))

    res = run("cdi", "validate", str(spec_path), env=env)
    check("cdi validate (own schema + rules)", 0, res.returncode, res.returncode == 0)
    res = run("cdi", "generate", "--check", env=env)
    check("generate --check right after", 0, res.returncode, res.returncode == 0)
    res = run("cdi", "list", env=env)
    listed = res.stdout.split()
    check("cdi list = devices", len(devices), len(listed), len(listed) == len(devices))
    # ../shared/ beside the checkout here; carried as .carry/ to the GPU machine.
    official = next((p for p in (REPO.parent / "shared" / "reference" / "cdi-schema",
                                 REPO / ".carry" / "cdi-schema") if p.is_dir()), None)
    check("official CDI schema found", "present", official, official is not None)
    if official is not None:
        import jsonschema
        from referencing import Registry, Resource
        from referencing.jsonschema import DRAFT7

        schema = json.loads((official / "schema.json").read_text())
        defs = Resource.from_contents(json.loads((official / "defs.json").read_text()),
                                      default_specification=DRAFT7)
        errs = list(jsonschema.Draft7Validator(
            schema, registry=Registry().with_resource("defs.json", defs)).iter_errors(spec))
        check("official CDI schema", 0, len(errs), not errs)
    check("no unversioned .so mounted", 0, [n for n in mounts if n.endswith(".so")],
          not [n for n in mounts if n.endswith(".so")])
    check_hook(out, hook, devices, cards)
    floor = []
    for _ in range(5):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", NVML_ONLY], check=True, env=env)
        floor.append((time.perf_counter() - start) * 1000)
    gen, flo = statistics.median(times), statistics.median(floor)
    measured("generate, median of 5 (ms)", f"{gen:.0f}")
    measured("NVML-only process, median of 5 (ms)", f"{flo:.0f}")
    measured("ratio generate / NVML-only", f"{gen / flo:.2f}x")
    return report()


def check_hook(out: Path, hook: Path, devices: Dict, cards: List[Dict[str, str]]) -> None:
    """gpuslice-hook against the cards `cdi generate` recorded from the real NVML:
    a card-less slice placed on card 0, a slice too big refused, a release."""
    from ocihook import accountant

    bundle = out / "bundle"
    (bundle / "rootfs").mkdir(parents=True, exist_ok=True)
    (bundle / "config.json").write_text(json.dumps({"root": {"path": "rootfs"},
                                                   "process": {"user": {"uid": 0, "gid": 0}}}))

    def hook_run(args: List[str], cid: str) -> subprocess.CompletedProcess:
        state = json.dumps({"ociVersion": "1.0.2", "id": cid, "status": "creating",
                            "bundle": str(bundle)})
        return subprocess.run(["unshare", "--mount", "--propagation", "private", str(hook),
                               *args], input=state, capture_output=True, text=True, timeout=60)

    [create] = [h["args"][1:] for h in devices["4g"]["hooks"] if h["hookName"] == "createContainer"]
    [release] = [h["args"][1:] for h in devices["4g"]["hooks"] if h["hookName"] == "poststop"]
    books = accountant.Accountant(str(out / "state.db"))
    recorded = {c.uuid: c.total_mib for c in books.cards()}
    check("accountant's cards = nvidia-smi", {c["uuid"]: int(c["memory_mib"]) for c in cards},
          recorded, recorded == {c["uuid"]: int(c["memory_mib"]) for c in cards})
    res = hook_run(create, "gpu-check-a")
    placed = (out / "state" / "containers" / "gpu-check-a" / "placement")
    got = placed.read_text().strip() if placed.exists() else res.stderr.strip()
    check("hook create 4g: placed on card 0", f"0 {cards[0]['uuid']}", got,
          res.returncode == 0 and got == f"0 {cards[0]['uuid']}")
    total = int(cards[0]["memory_mib"])
    big = list(create)
    big[big.index("--memory-mib") + 1] = str(total)
    res = hook_run(big, "gpu-check-b")
    want = f"has {total - 4096} MiB free of {total} MiB, {total} MiB asked"
    check("hook: a slice of the whole card beside it refused", "exit 1, " + want,
          f"exit {res.returncode}, {res.stderr.strip()[-90:]}",
          res.returncode == 1 and want in res.stderr)
    res = hook_run(release, "gpu-check-a")
    held = [r.container_id for u in books.usage() for r in u.reservations]
    check("hook release: nothing held, dir gone", "[] False", f"{held} {placed.parent.exists()}",
          res.returncode == 0 and held == [] and not placed.parent.exists())
    books.close()
    times = []
    for i in range(10):
        start = time.perf_counter()
        a, b = hook_run(create, f"gpu-time-{i}"), hook_run(release, f"gpu-time-{i}")
        times.append((time.perf_counter() - start) * 1000)
        if a.returncode or b.returncode:
            check("hook create + release", 0, a.stderr + b.stderr, False)
            return
    measured("hook create + release, median of 10 (ms)", f"{statistics.median(times):.1f}")


NVML_ONLY = """
import pynvml
pynvml.nvmlInit()
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    pynvml.nvmlDeviceGetUUID(h); pynvml.nvmlDeviceGetMemoryInfo(h); pynvml.nvmlDeviceGetPciInfo(h)
pynvml.nvmlShutdown()
"""



if __name__ == "__main__":
    sys.exit(main())
