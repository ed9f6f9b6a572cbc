"""`gpuslice exporter` on a real GPU, against nvidia-smi read from outside.

Two tenants on card 0, each admitted by the real gpuslice-hook (`admit`,
against the real cards of `gpuslice cdi generate`) and run with the shim
preloaded in its own container state folder, as the hook would give them:
A, capped at 30 % in a slice of 3/8 of the card (48 GiB of an H200's, 29 of
an H100 80GB's), holds 4 GiB less and runs a PyTorch fp16 matmul loop; B,
uncapped in a slice of half the card, holds 4 GiB less and sleeps. The
exporter serves them on a loopback port. Checked:

- the card's memory used (exporter) against nvidia-smi's memory.used: 1 %;
- each tenant's memory used (exporter, from its region) against the sum of
  nvidia-smi's used_memory of its processes: 1 %;
- A's card time: (card_seconds_total at t1 - at t0) / (t1 - t0), two scrapes
  10 s apart while it runs: 0.30 +- 0.03; B has no card-time series.

    python3 tests/gpu/check_exporter.py OUT

Prints a table; exits 1 on a failure.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
from exporter_node import samples  # noqa: E402
from node import generate, hook_binary  # noqa: E402
from table import check, measured, report  # noqa: E402

MIB = 1 << 20
A, B = "a" * 64, "b" * 64
WINDOW_S = 10.0

PROG = r"""
import sys, time, torch
hold = torch.empty(int(sys.argv[1]) << 20, dtype=torch.uint8, device="cuda")
x = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
y = x @ x
torch.cuda.synchronize()
print("ready", flush=True)
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    if sys.argv[3] == "matmul":
        for _ in range(8):
            y = x @ x
        torch.cuda.synchronize()  # a bounded queue, as bench/compute_prog.py keeps
    else:
        time.sleep(0.05)
"""


def python() -> str:
    return next(p for p in ("/opt/torch/.venv/bin/python", shutil.which("python3") or "")
                if p and os.path.exists(p))


def smi(*query: str) -> List[List[str]]:
    out = subprocess.run(["nvidia-smi", *query, "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout
    return [[f.strip() for f in line.split(",")] for line in out.splitlines() if line.strip()]


def scrape(url: str) -> Dict[str, List[tuple]]:
    with urllib.request.urlopen(url, timeout=30) as r:
        return samples(r.read().decode())


def one(found: Dict[str, List[tuple]], name: str, **labels: str) -> float:
    hits = [v for lab, v in found.get(name, []) if all(lab.get(k) == x for k, x in labels.items())]
    return hits[0] if len(hits) == 1 else float("nan")


def within(got: float, want: float, rel: float) -> bool:
    return want > 0 and abs(got - want) <= rel * want


def main() -> int:
    out = Path(sys.argv[1]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    hook = hook_binary()
    subprocess.run(["make", "-s", "-C", str(REPO / "native" / "shim")], check=True)
    shim = REPO / "native" / "shim" / "build" / "libgpuslice.so"
    state, db = out / "state", out / "state.db"
    env = generate(out, shim, hook)
    if env is None:
        return report()
    uuid = smi("--query-gpu=uuid")[0][0]
    (state / "cards").mkdir(parents=True, exist_ok=True)
    # Large holds: the shim charges a context at a fixed 768 MiB (a PyTorch context
    # measured 520-610 MiB here), a difference that must stay within the 1 %. Sized to
    # the card: both fit beside each other on an 80 GiB card as on a 141 GiB one.
    card_gib = int(float(smi("--query-gpu=memory.total")[0][0])) // 1024
    a_gib, b_gib = card_gib * 3 // 8, card_gib // 2
    tenants = {A: (f"0-{a_gib}g-30", a_gib * 1024, 30, (a_gib - 4) * 1024, "matmul"),
               B: (f"0-{b_gib}g", b_gib * 1024, 0, (b_gib - 4) * 1024, "hold")}
    procs: Dict[str, subprocess.Popen] = {}
    exporter = None
    try:
        for cid, (device, mib, cores, hold, kind) in tenants.items():
            res = subprocess.run([hook, "admit", "--id", cid, "--device", device, "--card", uuid,
                                  "--memory-mib", str(mib), "--cores", str(cores), "--pid",
                                  str(os.getpid()), "--database", str(db), "--state-dir",
                                  str(state)], capture_output=True, text=True)
            check(f"hook admits {device}", 0, res.returncode, res.returncode == 0)
            if res.returncode:
                print(res.stderr)
                return report()
            folder = state / "containers" / cid
            folder.mkdir(parents=True, exist_ok=True)
            penv = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_")}
            penv.update(LD_PRELOAD=str(shim), GPUSLICE_STATE_DIR=str(folder),
                        GPUSLICE_CARD_DIR=str(state / "cards"),
                        GPUSLICE_MEMORY_LIMIT=f"{mib}MiB", CUDA_VISIBLE_DEVICES=uuid)
            if cores:
                penv["GPUSLICE_CORE_LIMIT"] = str(cores)
            procs[cid] = subprocess.Popen([python(), "-c", PROG, str(hold), "60", kind], env=penv,
                                          stdout=subprocess.PIPE, text=True)
        for cid, p in procs.items():
            line = p.stdout.readline().strip()
            check(f"tenant {cid[0].upper()} ready", "ready", line, line == "ready")
            if line != "ready":
                return report()
        log = out / "exporter.log"
        with open(log, "w") as f:
            exporter = subprocess.Popen([sys.executable, "-m", "ocihook.cli", "exporter",
                                         "--listen", "127.0.0.1:0"], env=env, cwd=REPO,
                                        stdout=f, stderr=f)
        port = None
        for _ in range(300):
            m = re.search(r"127\.0\.0\.1:(\d+)/metrics", log.read_text())
            if m:
                port = m.group(1)
                break
            time.sleep(0.1)
        check("exporter serves", "a port", port, port is not None)
        if port is None:
            print(log.read_text())
            return report()
        url = f"http://127.0.0.1:{port}/metrics"
        time.sleep(2)  # the matmul loop settles at its cap

        # Memory: the exporter and nvidia-smi at the same moment.
        t0, m0 = time.monotonic(), scrape(url)
        card_smi = float(smi("--query-gpu=memory.used")[0][0]) * MIB
        apps = smi("--query-compute-apps=pid,used_memory")
        card = one(m0, "gpuslice_card_memory_used_bytes", uuid=uuid)
        check("card memory used: exporter vs nvidia-smi (MiB)", round(card_smi / MIB),
              round(card / MIB) if card == card else card, within(card, card_smi, 0.01))
        for cid, p in procs.items():
            smi_used = sum(float(u) * MIB for pid, u in apps if pid == str(p.pid))
            got = one(m0, "gpuslice_container_memory_used_bytes", container_id=cid)
            check(f"tenant {cid[0].upper()} memory: exporter vs nvidia-smi (MiB)",
                  round(smi_used / MIB), round(got / MIB) if got == got else got,
                  within(got, smi_used, 0.01))
            measured(f"tenant {cid[0].upper()}: exporter - nvidia-smi (MiB)",
                     round((got - smi_used) / MIB) if got == got else got)
        check("uncapped tenant B: no card-time series", "absent",
              one(m0, "gpuslice_container_card_seconds_total", container_id=B),
              "gpuslice_container_card_seconds_total" not in m0 or
              all(lab.get("container_id") != B
                  for lab, _ in m0["gpuslice_container_card_seconds_total"]))

        # Card time: two scrapes WINDOW_S apart while A runs.
        time.sleep(max(0.0, WINDOW_S - (time.monotonic() - t0)))
        t1, m1 = time.monotonic(), scrape(url)
        c0 = one(m0, "gpuslice_container_card_seconds_total", container_id=A)
        c1 = one(m1, "gpuslice_container_card_seconds_total", container_id=A)
        share = (c1 - c0) / (t1 - t0)
        check(f"tenant A: rate(card_seconds_total) over {WINDOW_S:g} s", "0.30 +- 0.03",
              f"{share:.3f}", abs(share - 0.30) <= 0.03)
        slept0 = one(m0, "gpuslice_container_throttled_seconds_total", container_id=A)
        slept1 = one(m1, "gpuslice_container_throttled_seconds_total", container_id=A)
        measured("tenant A: rate(throttled_seconds_total)", f"{(slept1 - slept0) / (t1 - t0):.3f}")
        measured("card utilization (NVML) at the second scrape",
                 one(m1, "gpuslice_card_utilization_ratio", uuid=uuid))
        t = time.perf_counter()
        scrape(url)
        measured("one scrape (ms)", f"{(time.perf_counter() - t) * 1000:.1f}")
    finally:
        for p in procs.values():
            p.kill()
            p.wait()
        if exporter is not None:
            exporter.terminate()
            exporter.wait()
        for cid in tenants:
            subprocess.run([hook, "release", "--id", cid, "--database", str(db), "--state-dir",
                            str(state)], capture_output=True)
    return report()


if __name__ == "__main__":
    sys.exit(main())
