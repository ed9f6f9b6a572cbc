"""A gang on real GPUs, through gpuslice-runtime: a runc container asking for
`2x8g` (two 8 GiB slices, one per card, GPUSLICE=2x8g), admitted by the real
hook on the cards the topology NVML reports puts nearest, the shim preloaded.
Inside, two PyTorch processes (one per card, NCCL) all-reduce a 1 GiB tensor
across both cards; each sees an 8 GiB card, 5 GiB more fits and 4 GiB beyond
that is OutOfMemoryError; nvidia-smi -L lists two cards and memory.total is
8192 MiB for each. From outside while they hold their memory: per card,
nvidia-smi's (NVML's) memory of the container's processes stays within the
cap (the driver's own context beyond what the shim reserves for it allowed);
the region charges NCCL's own allocations (more than PyTorch reserved); the
placement is the one the hook recorded. And the topology `gpuslice cdi
generate` recorded (PCIe level, NVLinks, NUMA node, CPU affinity) against
`nvidia-smi topo -m`. After, poststop has released both slices.

    python3 tests/gpu/check_gang.py OUT

With one GPU it checks that card's recorded NUMA node and CPU affinity,
prints `skipped: 1 GPU visible, a gang needs 2` and passes; with none, only
the skip. Prints a table; exits 1 on a failure.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Tuple

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(REPO))
from check_runtime import bundle_config, rootfs, stack_node  # noqa: E402
from table import check, measured, report  # noqa: E402

GIB = 1 << 30
MIB = 1 << 20
CAP_MIB = 8192
# What the driver may take on a card beyond what the shim charges for a
# context (GPUSLICE_CONTEXT_RESERVE, 768 MiB): docs/architecture.md's "not
# charged" (module code loaded later).
SLACK_MIB = 512

INSIDE = r"""
import json, os, subprocess, sys, time
import torch, torch.distributed as dist, torch.multiprocessing as mp

def rank(r):
    torch.cuda.set_device(r)
    dist.init_process_group("nccl", init_method="file:///sync/init", rank=r, world_size=2)
    free, total = torch.cuda.mem_get_info()
    x = torch.full((256 << 20,), float(r + 1), device="cuda")  # 1 GiB of float32
    dist.all_reduce(x)
    torch.cuda.synchronize()
    reduced = bool((x == 3.0).all().item())
    more = torch.empty(5 << 30, dtype=torch.uint8, device="cuda")
    try:
        torch.empty(4 << 30, dtype=torch.uint8, device="cuda")
        oom = False
    except torch.OutOfMemoryError:
        oom = True
    out = {"rank": r, "total": total, "reduced": reduced, "oom": oom, "pid": os.getpid(),
           "reserved": torch.cuda.memory_reserved(),
           "uuid": str(torch.cuda.get_device_properties(r).uuid)}
    with open("/sync/rank%d.json" % r, "w") as f:
        json.dump(out, f)
    while not os.path.exists("/sync/done"):  # the host measures meanwhile
        time.sleep(0.1)
    dist.destroy_process_group()

if __name__ == "__main__":
    print("devices", torch.cuda.device_count(), flush=True)
    smi = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    print("smi-L", json.dumps(smi.stdout.strip().splitlines() or [smi.stderr.strip()]))
    smi = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,"
                          "nounits"], capture_output=True, text=True)
    print("smi-total", json.dumps(smi.stdout.split() or [smi.stderr.strip()]), flush=True)
    mp.spawn(rank, nprocs=2)
    print("done", True)
"""

# nvidia-smi topo -m's words and ours (cdi/topology.py PCIE_LEVELS).
TOPO_WORDS = {"X": None, "PIX": "single", "PXB": "multiple", "PHB": "hostbridge",
              "NODE": "node", "SYS": "system"}


def gpu_count() -> int:
    from cdi import nvml

    try:
        return len(nvml.discover().gpus)
    except nvml.DiscoveryError as e:
        print(f"skipped: NVML did not start ({e})")
        return 0


def topo_matrix() -> Tuple[Dict[Tuple[int, int], str], Dict[int, Dict[str, str]]]:
    """`nvidia-smi topo -m`: the word per pair of GPUs, and per GPU its other columns
    (CPU Affinity, NUMA Affinity)."""
    text = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True,
                          check=True).stdout
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in text.splitlines()]
    header = next(line for line in lines if line.lstrip().startswith("GPU0"))
    cols = re.split(r"\t+| {2,}", header.strip())
    pairs: Dict[Tuple[int, int], str] = {}
    extra: Dict[int, Dict[str, str]] = {}
    for line in lines:
        m = re.match(r"^GPU(\d+)\s", line)
        if not m:
            continue
        cells = [c.strip() for c in re.split(r"\t+| {2,}", line.strip())[1:]]
        i = int(m.group(1))
        for name, cell in zip(cols, cells):
            g = re.match(r"^GPU(\d+)$", name)
            if g:
                pairs[(i, int(g.group(1)))] = cell
            else:
                extra.setdefault(i, {})[name] = cell
    return pairs, extra


def check_topology(db: str) -> None:
    from ocihook import accountant

    books = accountant.Accountant(db)
    cards = {c.uuid: c for c in books.cards()}
    links = books.links()
    books.close()
    pairs, extra = topo_matrix()
    for link in links:
        a, b = cards[link.card_a].index, cards[link.card_b].index
        word = pairs.get((a, b), "?")
        nv = re.match(r"^NV(\d+)$", word)
        if nv:
            check(f"GPU{a}-GPU{b}: NVLinks as topo -m", word, f"NV{link.nvlinks}",
                  link.nvlinks == int(nv.group(1)))
        else:
            check(f"GPU{a}-GPU{b}: PCIe as topo -m", f"{word} (0 NVLinks)",
                  f"{link.pcie} ({link.nvlinks})",
                  TOPO_WORDS.get(word) == link.pcie and link.nvlinks == 0)
    for c in sorted(cards.values(), key=lambda c: c.index):
        cols = extra.get(c.index, {})
        numa = cols.get("NUMA Affinity", "N/A")
        want = None if numa in ("N/A", "") else int(numa.split(",")[0].split("-")[0])
        check(f"GPU{c.index}: NUMA node as topo -m", numa, c.numa_node, c.numa_node == want)
        cpus = cols.get("CPU Affinity", "N/A")
        check(f"GPU{c.index}: CPU affinity as topo -m", cpus, c.cpu_affinity,
              cpus in ("N/A", "") or cpus == c.cpu_affinity)


def compute_apps() -> Dict[str, List[Tuple[int, int]]]:
    """nvidia-smi's (NVML's) processes per card UUID: (host pid, MiB used)."""
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=gpu_uuid,pid,used_memory",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True,
                         check=True).stdout
    apps: Dict[str, List[Tuple[int, int]]] = {}
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
            apps.setdefault(parts[0], []).append((int(parts[1]), int(parts[2])))
    return apps


def descendants(pid: int) -> List[int]:
    """pid and every process under it (the container's processes, by the host's pids)."""
    children: Dict[int, List[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d))
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(children.get(p, []))
    return found


def wait_for(paths: List[Path], proc: "subprocess.Popen[str]", timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if all(p.exists() for p in paths):
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.2)
    return False


def main() -> int:
    out = Path(sys.argv[1]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    n = gpu_count()
    if n == 0:
        print("skipped: 0 GPUs visible, a gang needs 2")
        return 0
    stack = stack_node(out)
    if stack is None:
        return report()
    runc, runtime, tool, env = stack
    check_topology(str(out / "state.db"))  # one card has a place too: NUMA node, CPUs
    if n < 2:
        print("skipped: 1 GPU visible, a gang needs 2 (the topology of the one was checked)")
        return report()
    bundle = out / "bundle"
    sync = out / "sync"
    sync.mkdir(exist_ok=True)
    for f in sync.iterdir():  # a run before: its init file would stop NCCL's rendezvous
        f.unlink()
    rootfs(bundle / "rootfs")
    (bundle / "rootfs" / "sync").mkdir(exist_ok=True)
    spec = bundle_config(runc, bundle)
    # A file, not -c: the ranks are spawned, and import the program by its path.
    (sync / "gang.py").write_text(INSIDE)
    spec["process"]["args"] = [spec["process"]["args"][0], "/sync/gang.py"]
    spec["process"]["env"] = [e for e in spec["process"]["env"] if not e.startswith("GPUSLICE=")]
    spec["process"]["env"].append("GPUSLICE=2x8g")
    spec["mounts"].append({"destination": "/sync", "type": "bind", "source": str(sync),
                           "options": ["rbind", "rw"]})
    # NCCL's bootstrap needs a network: the host's; its shared memory a /dev/shm
    # larger than runc's default 64 MiB.
    spec["linux"]["namespaces"] = [ns for ns in spec["linux"]["namespaces"]
                                   if ns["type"] != "network"]
    for m in spec["mounts"]:
        if m["destination"] == "/dev/shm":
            m["options"] = [o for o in m["options"] if not o.startswith("size=")] + ["size=1g"]
    (bundle / "config.json").write_text(json.dumps(spec))
    proc = subprocess.Popen([runtime, "--gpuslice-runtime", runc, "--gpuslice-cache-tool",
                             str(tool), "run", "--bundle", str(bundle), "gpuslice-gang-check"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ranks = [sync / "rank0.json", sync / "rank1.json"]
    ready = wait_for(ranks, proc, 300)
    check("both ranks ready (NCCL all-reduce done)", True, ready, ready)
    apps: Dict[str, List[Tuple[int, int]]] = {}
    held: List[Tuple[str, int]] = []
    used: Dict[str, Tuple[int, int]] = {}
    if ready:
        from ocihook import accountant, region

        apps = compute_apps()
        books = accountant.Accountant(str(out / "state.db"))
        index = {c.uuid: c.index for c in books.cards()}
        held = sorted((r.card_uuid, r.slot) for u in books.usage() for r in u.reservations
                      if r.container_id == "gpuslice-gang-check")
        books.close()
        reg = region.read(str(out / "state" / "containers" / "gpuslice-gang-check" / "region"))
        used = {d.uuid: (d.limit_bytes, d.used_bytes) for d in reg.devices if d.uuid}
        placement = (out / "state" / "containers" / "gpuslice-gang-check" / "placement")
        lines = placement.read_text().split("\n")
        by_slot = [uuid for uuid, _ in sorted(held, key=lambda h: h[1])]
        check("placement: the recorded cards by slot", by_slot,
              [line.split()[1] for line in lines if line], [line.split()[1] for line in lines
                                                           if line] == by_slot)
        check("two slices held, on two cards", 2, len(held), len({u for u, _ in held}) == 2)
        for r in ranks:
            got = json.loads(r.read_text())
            tag = f"rank {got['rank']}"
            check(f"{tag}: torch sees an 8 GiB card", 8 * GIB, got["total"],
                  got["total"] == 8 * GIB)
            check(f"{tag}: the all-reduce's sum", True, got["reduced"], got["reduced"])
            check(f"{tag}: 4 GiB past 6 GiB held is OutOfMemoryError", True, got["oom"],
                  got["oom"])
            mine = [u for u in used if u.endswith(got["uuid"][-36:])]
            if mine:
                limit, charged = used[mine[0]]
                check(f"{tag}: region charges NCCL's own (> torch reserved)",
                      f"> {got['reserved'] // MIB} MiB", f"{charged // MIB} MiB",
                      charged > got["reserved"] and limit == 8 * GIB)
        procs = set(descendants(proc.pid))
        for uuid, slot in held:
            mib = sum(m for pid, m in apps.get(uuid, []) if pid in procs)
            check(f"card {index[uuid]} (slot {slot}): NVML used by the container within "
                  "the cap", f"<= {CAP_MIB + SLACK_MIB} MiB", f"{mib} MiB",
                  0 < mib <= CAP_MIB + SLACK_MIB)
    (sync / "done").touch()
    try:
        stdout, stderr = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
    check("gpuslice-runtime run exits 0", 0, proc.returncode, proc.returncode == 0)
    if proc.returncode:
        print(stdout[-3000:], stderr[-3000:])
    got = dict(line.split(" ", 1) for line in stdout.splitlines() if " " in line)
    check("torch.cuda.device_count inside", 2, got.get("devices"), got.get("devices") == "2")
    smi_l = json.loads(got.get("smi-L", "[]"))
    check("nvidia-smi -L inside: two cards", 2, len(smi_l),
          len(smi_l) == 2 and all(line.startswith("GPU ") for line in smi_l))
    totals = json.loads(got.get("smi-total", "[]"))
    check("nvidia-smi inside: memory.total (MiB) each", "8192, 8192", ", ".join(totals),
          totals == ["8192", "8192"])
    for uuid, mib_list in apps.items():
        measured(f"nvidia-smi used on {uuid[:12]} (MiB)", sum(m for _, m in mib_list))
    from ocihook import accountant

    books = accountant.Accountant(str(out / "state.db"))
    left = [r.container_id for u in books.usage() for r in u.reservations]
    books.close()
    check("poststop released both slices", 0, len(left), not left)
    return report()


if __name__ == "__main__":
    sys.exit(main())
