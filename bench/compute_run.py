"""The tenants of the compute benches: each a process of bench/compute_prog.py.

bench/compute_share and bench/compute_latency describe scenarios (tenants
that run together), and this module runs them: every process of a batch is
started at once and imports torch before the batch's first run (the card
holds one batch's processes at a time: run_batches), each touches the GPU only
after the run before it is done, and each scenario's tenants get their own
card folder (GPUSLICE_CARD_DIR) and each tenant its own state folder (its
own container). A tenant that names a GPUSLICE device runs in a real
container instead (bench/compute_container.py): its launcher says where the
process finds Python, bench/ and its folder. Clocks samples the card (SM
clock, power, NVML's utilization) beside the runs, and run_all each shim
tenant's charges (its region's charged card time): what the pacer counted,
beside what the bench measures.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Dict, List, Optional, Sequence, Tuple

import shimbench
import suite

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
# Another build may be measured instead (an experiment): COMPUTE_SHARE_SHIM=<path>.
SHIM = Path(os.environ.get("COMPUTE_SHARE_SHIM",
                          REPO / "native" / "shim" / "build" / "libgpuslice.so"))
PROG = HERE / "compute_prog.py"

TAIL_S = 0.25  # tenants run this long past the last window, so it is full and partners overlap
GAP_S = 0.25   # after a run's end, for its GPU queue to drain (compute_prog bounds it ~20 ms)
WARMUP_S = 0.4  # compute_prog warms up from START_AT-0.5 to START_AT-0.1
LATE_S = 0.05   # a tenant starting later than this is noted
CHARGE_EVERY_S = 0.1  # how often the shim tenants' regions are read for their charges
# Set up early, a tenant's GPU work before its start is its warm-up loop
# (compute_prog: from START_AT - WARMUP_S - 0.1); the rest is margin.
EARLY_LEAD_S = WARMUP_S + 0.1 + 0.3
LATE_SETUP_LEAD_S = 2.5  # a scenario set up late: its tenants' lead, unless it names its own
# The benches' lead: 43 processes' torch imports at once took 12.7-13.7 s on
# the H200, a request tenant's setup 5-11 s alone (most of it loading kernels).
LEAD_S = 45.0
# Tenants started together (run_batches): each holds its CUDA context and its
# program's data from its setup to its end, and 97 at once overran an H100's
# 79 GiB (0.6-0.85 GiB each, its OOM report): 1.5 GiB each leaves room for
# the largest. Three a CPU import torch within the lead (43 on 16 CPUs: above).
TENANT_MIB = 1536
TENANTS_PER_CPU = 3
# A bench's own time around its runs (--plan's estimate): the shim's build, the
# prewarm (torch, each program once) and the analysis, 25 s on the H200.
STARTUP_S = 35.0
BUDGET_S = 550.0  # one device command may run 600 s: the rest is margin
# --gates of compute_share and compute_latency: an uncapped tenant without
# gates (side by side where it may, else waiting for turns on the host), or
# behind its gate on the GPU (docs/compute-limit.md, Gates).
GATES_ON = {"GPUSLICE_COMPUTE_GATES": "1"}
GATES_OFF = {"GPUSLICE_COMPUTE_GATES": "0"}
# --turns of compute_share and compute_latency: the uncapped tenant waits
# for capped holders' turns however little of its time its own waits take,
# as it did before side by side was the default (docs/compute-limit.md,
# Side by side).
SIDE_OFF = {"GPUSLICE_COMPUTE_SIDE": "0"}


@dataclass
class Tenant:
    key: str                 # unique name, also its file names
    program: str
    cap: Optional[int]       # None: no GPUSLICE_CORE_LIMIT
    shim: bool = True
    priority: Optional[str] = None  # GPUSLICE_PRIORITY, if any
    env: Dict[str, str] = field(default_factory=dict)  # more (an MPS client's, say)
    phases: List[suite.Phase] = field(default_factory=list)  # program requests: what it serves
    # A GPUSLICE device (0-8g-50): the tenant runs in a container made by
    # gpuslice-runtime, which gives it the slice's env (the shim, its cap or
    # MPS share); cap and shim then only describe it.
    device: Optional[str] = None
    proc: Optional[subprocess.Popen] = None
    data: Optional[dict] = None
    error: str = ""


def describe(t: Tenant) -> str:
    """A tenant as a plan prints it: its program, no shim, cap, priority, MPS share."""
    mps = t.env.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
    return (f"{t.program}{'' if t.shim else ' (no shim)'}"
            f"{'' if t.cap is None else f' cap {t.cap}'}"
            f"{' high' if t.priority == 'high' else ''}"
            f"{'' if mps is None else f' MPS {mps}%'}")


@dataclass
class Scenario:
    name: str
    tenants: List[Tenant]
    start_at: float = 0.0
    card_dir: Optional[Path] = None
    seconds: Optional[int] = None        # its 1 s windows, if not the bench's --seconds
    # Early: its tenants set up right after their imports, in the bench's lead,
    # and only warm up before their start. Not early (an MPS client must
    # connect to a daemon started later): they set up in their own lead.
    early: bool = True
    setup_lead: Optional[float] = None   # not early: its tenants' setup lead, if not the bench's

    def windows(self, seconds: int) -> int:
        return self.seconds if self.seconds is not None else seconds

    def lead(self, setup_lead: float) -> float:
        """How long before its start its tenants touch the GPU (the gap after the run before)."""
        if self.early:
            return EARLY_LEAD_S
        return self.setup_lead if self.setup_lead is not None else setup_lead


def clean_env() -> Dict[str, str]:
    """The caller's env without anything that steers the shim (GPUSLICE_LOG and the
    GPUSLICE_COMPUTE_TURNS and GPUSLICE_COMPUTE_GATES experiments may stay) or MPS."""
    keep = ("GPUSLICE_LOG", "GPUSLICE_COMPUTE_TURNS", "GPUSLICE_COMPUTE_GATES")
    env = {k: v for k, v in os.environ.items()
           if k != "LD_PRELOAD" and not k.startswith("CUDA_MPS_") and not (
               k.startswith(("GPUSLICE_", "CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT"))
               and k not in keep)}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def tenant_env(t: Tenant, state_dir: Path, card_dir: Path) -> Dict[str, str]:
    env = clean_env()
    if t.shim:
        env.update(LD_PRELOAD=str(SHIM), GPUSLICE_STATE_DIR=str(state_dir),
                   GPUSLICE_CARD_DIR=str(card_dir))
        if t.cap is not None:
            env["GPUSLICE_CORE_LIMIT"] = str(t.cap)
        if t.priority:
            env["GPUSLICE_PRIORITY"] = t.priority
        # Its account at exit (pacer_account), unless the caller chose a level.
        env.setdefault("GPUSLICE_LOG", "debug")
    env.update(t.env)
    return env


def build_shim(bench: str) -> None:
    if "COMPUTE_SHARE_SHIM" in os.environ:
        if not SHIM.exists():
            sys.exit(f"{bench}: COMPUTE_SHARE_SHIM={SHIM} does not exist")
        return
    if subprocess.run(["make", "-s", "-C", str(REPO / "native" / "shim")]).returncode != 0:
        sys.exit(f"{bench}: make -C native/shim failed")
    if not SHIM.exists():
        sys.exit(f"{bench}: {SHIM} was not built")


def prewarm(bench: str, programs: Sequence[str] = (), shapes: Sequence[str] = ()) -> str:
    """Import torch once, set each program and request shape up once on the GPU; the device.

    The first process to use a library's kernels reads them from a cold
    disk (measured on the H200: a training step's first setup 12 s, later
    ones 3-6 s); that must not happen in a tenant's setup lead, where it
    would start late and run into the next scenario.
    """
    code = ("import sys, torch; sys.path.insert(0, sys.argv[1]); import compute_prog; "
            "compute_prog.warm_once(sys.argv[2].split(','), sys.argv[3].split(',')); "
            "print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))")
    res = subprocess.run([sys.executable, "-c", code, str(HERE), ",".join(programs),
                          ",".join(shapes)], capture_output=True, text=True, timeout=600,
                         env=clean_env())
    if res.returncode != 0:
        sys.exit(f"{bench}: torch with CUDA does not work here:\n" + res.stderr.strip()[-2000:])
    return res.stdout.strip().splitlines()[-1]


def csv(text: str, allowed: Sequence[str], what: str) -> List[str]:
    """A comma-separated option's values, each one of allowed (argparse's type)."""
    got = [w for w in text.split(",") if w]
    bad = [w for w in got if w not in allowed]
    if bad or not got:
        raise argparse.ArgumentTypeError(f"{what}: {', '.join(bad) or 'none given'}; "
                                         f"choose from {', '.join(allowed)}")
    return got


def other_gpu_users() -> str:
    """Compute processes already on the GPU (they would take a share); '' when none or unknown."""
    try:
        res = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return res.stdout.strip() if res.returncode == 0 else ""


def log_tail(path: Path, chars: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def last_line(text: str) -> str:
    """The last line of a tenant's output that is not the shim's debug log (its account
    at exit comes after a Python error)."""
    lines = [ln.strip() for ln in text.splitlines()
             if ln.strip() and not (ln.startswith("gpuslice[") and ": debug: " in ln)]
    return lines[-1][:160] if lines else "no output"


def pacer_account(log: str, start_at: Optional[float] = None) -> Dict[str, Any]:
    """A shim tenant's account at exit (GPUSLICE_LOG=debug, which tenant_env sets): its
    charges' parts, the credit its bucket did not keep, what its queue's bound rested on, and
    side by side (where it reckoned any epoch); those of them it printed. start_at: its
    run's start (monotonic), where known: its holds then also in the run's seconds
    ("run_s"; before 0: in its setup)."""
    got = {"charged": shimbench.pacer_charged(log), "cut": shimbench.pacer_cut(log),
           "bound": shimbench.pacer_bound(log), "side": shimbench.pacer_side(log),
           "holds": shimbench.pacer_holds(log)}
    holds = got["holds"]
    if holds and start_at is not None and "first_s" in holds:
        holds["run_s"] = [round(holds["first_s"] + ms / 1000 - start_at, 3) for ms, _ in holds["at"]]
    return {k: v for k, v in got.items() if v}


CPU_BLOCK = 4  # CPUs a scenario may pin (its tenants); more than any scenario has


def tenant_cpu(index: int, sc: Scenario, t: Tenant) -> Optional[int]:
    """The CPU a measured tenant runs on: one per tenant, from the last ones we may use.

    Consecutive scenarios take alternate blocks: a tenant setting up (CUDA
    context, models, warm-ups) must not share a CPU with the run before it,
    which it would slow (the previous run's latency) and which would make the
    setup overrun its lead (measured: 5.5-12 s on one shared CPU, lead 3 s).
    """
    cpus = sorted(os.sched_getaffinity(0))
    j = sc.tenants.index(t)
    if len(cpus) > 2 * CPU_BLOCK + 1 and j < CPU_BLOCK:
        return cpus[-1 - (index % 2) * CPU_BLOCK - j]
    return cpus[-1 - j] if len(cpus) > len(sc.tenants) + 1 else None


class Launcher:
    """Starts a tenant's process: here, a plain process of this host.

    python, bench and seen() say how the process sees the interpreter, the
    bench's folder and the tenant's own folder (a container sees them at
    paths of its own).
    """
    python = sys.executable
    bench = str(HERE)

    def seen(self, folder: Path) -> str:
        return str(folder)

    def start(self, t: Tenant, cmd: List[str], env: Dict[str, str], folder: Path,
              log: IO[str]) -> subprocess.Popen:
        return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                cwd=str(REPO))


PROCESSES = Launcher()


def command(sc: Scenario, t: Tenant, launcher: Launcher, folder: Path, seconds: int,
            setup_lead: float, cpu: Optional[int]) -> List[str]:
    """The tenant's bench/compute_prog.py command line, as its launcher's process sees paths."""
    at = launcher.seen(folder)
    cmd = [launcher.python, f"{launcher.bench}/{PROG.name}", t.program,
           f"{sc.windows(seconds) + TAIL_S}", f"{sc.start_at:.6f}", f"{at}/out.json",
           "--setup-lead", f"{sc.lead(setup_lead)}", "--warmup", f"{WARMUP_S}"]
    if sc.early:
        cmd.append("--setup-early")
    if t.phases:
        cmd += ["--phases", f"{at}/phases.json"]
    if cpu is not None:
        cmd += ["--cpu", str(cpu)]
    return cmd


def launch(index: int, sc: Scenario, t: Tenant, root: Path, seconds: int,
           setup_lead: float, containers: Optional[Launcher] = None) -> None:
    folder = root / t.key
    state = folder / "state"
    state.mkdir(parents=True)
    launcher = PROCESSES
    if t.device:
        if containers is None:
            raise ValueError(f"tenant {t.key} asks for device {t.device}: give run_all a "
                             "container launcher (bench/compute_container.py)")
        launcher = containers
    if t.phases:
        (folder / "phases.json").write_text(suite.to_json(t.phases))
    cmd = command(sc, t, launcher, folder, seconds, setup_lead, tenant_cpu(index, sc, t))
    with open(folder / "log", "w") as log:
        t.proc = launcher.start(t, cmd, tenant_env(t, state, sc.card_dir), folder, log)


def region_reader() -> Optional[Callable[[str], Any]]:
    """ocihook.region.read, where the repository is importable (tests/gpu/run puts it on
    the path); None elsewhere: the benches then report no charges."""
    try:
        from ocihook import region
    except ImportError:
        return None
    return region.read


def charged_ns(read: Callable[[str], Any], region: Path) -> Optional[int]:
    """The card time the pacer charged a container so far (its region at `region`, device
    0: what its bucket is charged, docs/compute-limit.md); None for a region not made
    yet, or half made."""
    try:
        r = read(str(region))
    except (OSError, ValueError):
        return None
    return r.devices[0].compute_charged_ns if r.devices else None


def sample_charges(plan: Sequence[Scenario], seconds: int, root: Path,
                   read: Callable[[str], Any],
                   samples: Dict[str, List[Tuple[float, int]]]) -> None:
    """The card time charged so far to each shim tenant of the scenario running now
    (charged_ns), stamped on the monotonic clock. Only the running scenario's: the
    others' regions do not change, and reading them would take CPU from it. A region
    not made yet, or half made, is skipped."""
    now = time.monotonic()
    for sc in plan:
        if not sc.start_at - CHARGE_EVERY_S <= now <= sc.start_at + sc.windows(seconds) + TAIL_S:
            continue
        for t in sc.tenants:
            if not t.shim or t.device:
                continue
            ns = charged_ns(read, root / t.key / "state" / "region")
            if ns is not None:
                samples.setdefault(t.key, []).append((round(time.monotonic(), 4), ns))


def nothing_works(tenants: List[Tenant]) -> bool:
    """Two or more tenants finished and every one of them failed: stop early."""
    done = [t for t in tenants if t.proc is not None and t.proc.poll() is not None]
    return len(done) >= 2 and all(t.proc.returncode != 0 for t in done)


def schedule(plan: Sequence[Scenario], first_at: float, seconds: int,
             setup_lead: float = LATE_SETUP_LEAD_S, gap: float = 0.0) -> float:
    """Give each scenario its START_AT, one after another from first_at; the end of the last.

    A run ends TAIL_S after its windows; the next may touch the GPU GAP_S
    later, and starts its own setup lead after that. The end: when another
    run's setup could begin, plus gap.
    """
    at = first_at
    for i, sc in enumerate(plan):
        if i:
            at += sc.lead(setup_lead)
        sc.start_at = at
        at += sc.windows(seconds) + TAIL_S + GAP_S
    return at + gap


def nvml_gpu0() -> Optional[Tuple[Any, Any]]:
    """NVML through ctypes, initialised, and GPU 0's handle; None without NVML."""
    import ctypes
    try:
        nv = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    dev = ctypes.c_void_p()
    if nv.nvmlInit_v2() or nv.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev)):
        return None
    return nv, dev


def card_mib() -> Optional[int]:
    """GPU 0's memory in MiB, from NVML; None without it."""
    import ctypes

    class Memory(ctypes.Structure):
        _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                    ("used", ctypes.c_ulonglong)]
    gpu, mem = nvml_gpu0(), Memory()
    if gpu is None or gpu[0].nvmlDeviceGetMemoryInfo(gpu[1], ctypes.byref(mem)):
        return None
    return mem.total >> 20


def tenants_at_once(mib: Optional[int], cpus: int) -> int:
    """How many tenants may set up together: TENANT_MIB of the card each, TENANTS_PER_CPU a CPU."""
    most = TENANTS_PER_CPU * max(cpus, 1)
    return max(1, min(most, mib // TENANT_MIB)) if mib else most


def tenants_here() -> int:
    """tenants_at_once for this host's GPU 0 and the CPUs the bench may use."""
    return tenants_at_once(card_mib(), len(os.sched_getaffinity(0)))


def batches(plan: Sequence[Scenario], most: int) -> List[List[Scenario]]:
    """The plan in consecutive runs of whole scenarios, each of at most `most` tenants (a
    scenario of more runs alone)."""
    out: List[List[Scenario]] = []
    count = most
    for sc in plan:
        if count + len(sc.tenants) > most:
            out.append([])
            count = 0
        out[-1].append(sc)
        count += len(sc.tenants)
    return out


def run_batches(plan: List[Scenario], root: Path, seconds: int, lead: float, bench: str,
                most: int) -> None:
    """run_all on each batch of the plan in turn (batches(plan, most)).

    A batch's processes start once the batch before has exited, `lead` s
    before its first run: the card holds one batch's tenants at a time.
    """
    done = 0
    for batch in batches(plan, most):
        schedule(batch, time.monotonic() + lead, seconds)
        run_all(batch, root, seconds, lead, bench, first=done, count=len(plan))
        done += len(batch)


def batches_end(plan: List[Scenario], start: float, seconds: int, lead: float,
                most: int) -> float:
    """When run_batches, begun at `start`, will end: each batch scheduled on a dry clock."""
    at = start
    for batch in batches(plan, most):
        at = schedule(batch, at + lead, seconds)
    return at


def run_all(plan: List[Scenario], root: Path, seconds: int, lead: float, bench: str,
            events: Sequence[Tuple[float, Callable[[], None]]] = (),
            setup_lead: float = LATE_SETUP_LEAD_S,
            containers: Optional[Launcher] = None, first: int = 0,
            count: Optional[int] = None) -> None:
    """Launch every tenant at once, `lead` s before the first START_AT; wait for all, read results.

    All of them import torch before the first run starts, and set up then
    (early scenarios) or sleep until their own setup lead: a torch import or
    a setup beside a run would take CPU and GPU from it (a CPU-bound program,
    tiny, then measures the bench, not the limiter; a request tenant's setup
    takes 5-11 s, measured on the H200, most of it loading kernels).
    `events`: (monotonic time, action) to run meanwhile, in order (starting
    and stopping an MPS daemon between runs, say). `containers` starts the
    tenants that name a device. `first`: the plan's first scenario is the
    bench's scenario number first + 1 of `count` (run_batches).
    """
    launched: List[Tenant] = []
    start_of: Dict[str, float] = {}  # a tenant's scenario's start (monotonic)
    pending = sorted(events, key=lambda e: e[0])
    read_region = region_reader()
    charges: Dict[str, List[Tuple[float, int]]] = {}
    sampled = 0.0
    try:
        launch_at = plan[0].start_at - lead
        while time.monotonic() < launch_at:
            time.sleep(min(0.5, max(0.0, launch_at - time.monotonic())))
        for i, sc in enumerate(plan, first):
            sc.card_dir = root / f"card-{i:02d}"
            sc.card_dir.mkdir()
            for t in sc.tenants:
                launch(i, sc, t, root, seconds, setup_lead, containers)
                launched.append(t)
                start_of[t.key] = sc.start_at
            caps = ", ".join("none" if t.cap is None else str(t.cap) for t in sc.tenants)
            print(f"[{i + 1}/{count or len(plan)}] {sc.name}: {sc.tenants[0].program} "
                  f"(cap {caps}) "
                  f"starts in {sc.start_at - time.monotonic():.1f} s", file=sys.stderr, flush=True)
        deadline = plan[-1].start_at + plan[-1].windows(seconds) + 120
        while any(t.proc.poll() is None for t in launched) and time.monotonic() < deadline:
            while pending and time.monotonic() >= pending[0][0]:
                pending.pop(0)[1]()
            if nothing_works(launched):
                failed = [t for t in launched if t.proc.poll() is not None]
                for t in launched:
                    if t.proc.poll() is None:
                        t.proc.kill()
                for t in failed[:4]:
                    print(f"--- {t.key} (exit {t.proc.returncode}):\n"
                          f"{log_tail(root / t.key / 'log')}", file=sys.stderr)
                sys.exit(f"{bench}: every tenant so far failed; stopped")
            if read_region and time.monotonic() - sampled >= CHARGE_EVERY_S:
                sampled = time.monotonic()
                sample_charges(plan, seconds, root, read_region, charges)
            time.sleep(0.05)
        for _, action in pending:
            action()
        for t in launched:
            if t.proc.poll() is None:
                t.proc.kill()
                t.proc.wait()
                t.error = "timed out"
    finally:
        for t in launched:  # only on an exception: normally all have exited by now
            if t.proc.poll() is None:
                t.proc.kill()
    for t in launched:
        out = root / t.key / "out.json"
        if t.error:
            continue
        if t.proc.returncode != 0:
            t.error = f"exit {t.proc.returncode}: {last_line(log_tail(root / t.key / 'log'))}"
        elif not out.exists():
            t.error = "wrote no result"
        else:
            t.data = json.loads(out.read_text())
            t.data["charges"] = charges.get(t.key, [])
            if t.shim:
                t.data["pacer"] = pacer_account(log_tail(root / t.key / "log", 4000),
                                                start_of.get(t.key))


class Clocks:
    """SM clock, power and utilization of GPU 0, sampled every 100 ms by a thread (NVML via ctypes).

    A card that is not busy all the time boosts: a capped program runs faster
    per second of GPU time than it does uncapped. NVML's utilization (the
    share of time a kernel ran, over its own sample period) is the outside
    check of the card time the bench measures from the tenants' events.
    """

    def __init__(self, samples: Optional[Sequence[Sequence[float]]] = None) -> None:
        """Sample from now on; or, given samples (of a run replayed), hold those."""
        import ctypes

        class Utilization(ctypes.Structure):
            _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]

        self.util_t = Utilization
        self.samples: List[Tuple[float, int, int, int]] = []  # (monotonic, MHz, mW, util %)
        self.stop = threading.Event()
        if samples is not None:
            self.samples = [(float(t), int(c), int(p), int(u)) for t, c, p, u in samples]
            self.nv = None
            return
        gpu = nvml_gpu0()
        if gpu is None:
            self.nv = None
            return
        self.nv, self.dev = gpu
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        import ctypes
        mhz, mw, util = ctypes.c_uint(), ctypes.c_uint(), self.util_t()
        while not self.stop.wait(0.1):
            if (self.nv.nvmlDeviceGetClockInfo(self.dev, 1, ctypes.byref(mhz)) == 0  # SM
                    and self.nv.nvmlDeviceGetPowerUsage(self.dev, ctypes.byref(mw)) == 0):
                u = util.gpu if self.nv.nvmlDeviceGetUtilizationRates(
                    self.dev, ctypes.byref(util)) == 0 else -1
                self.samples.append((time.monotonic(), mhz.value, mw.value, u))

    def during(self, lo: float, hi: float) -> str:
        """Mean SM clock, power and NVML utilization between lo and hi ('' without NVML)."""
        got = [(c, p, u) for t, c, p, u in self.samples if lo <= t < hi]
        if not got:
            return ""
        util = [u for _, _, u in got if u >= 0]
        return (f"SM {sum(c for c, _, _ in got) / len(got):.0f} MHz, "
                f"{sum(p for _, p, _ in got) / len(got) / 1000:.0f} W"
                + (f", NVML util {sum(util) / len(util):.0f} %" if util else ""))


def plan_from_raw(raw: dict) -> List[Scenario]:
    """The scenarios of a run, with each tenant's result, from its raw JSON (to analyse again)."""
    plan = []
    for sc in raw["scenarios"]:
        tenants = [Tenant(t["key"], t["program"], t["cap"], t["shim"], t.get("priority"),
                          dict(t.get("env") or {}),
                          suite.from_json(json.dumps(t.get("phases") or [])),
                          data=t["result"], error=t["error"])
                   for t in sc["tenants"]]
        plan.append(Scenario(sc["name"], tenants, sc.get("start_at", 0.0),
                             seconds=sc.get("seconds"), early=sc.get("early", False),
                             setup_lead=sc.get("setup_lead")))
    return plan
