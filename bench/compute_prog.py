"""One tenant of the compute benches: a GPU loop, or requests, and when each unit finished.

    python3 bench/compute_prog.py PROGRAM SECONDS START_AT OUTFILE [--setup-lead S] [--cpu N]
    python3 bench/compute_prog.py requests SECONDS START_AT OUTFILE --phases FILE ...

PROGRAM is matmul (one fp16 4096x4096 torch.mm per unit), tiny (100 launches
of a 256-element add per unit), graph (one replay of a captured CUDA graph
of 20 x (mul_, 2048x2048 fp16 mm) per unit), triton (one launch of a kernel
written in Triton, bench/triton_unit.py), bigmm (one fp16 16384x16384
torch.mm per unit: kernels of ten-odd milliseconds, a neighbour that is slow
to drain), uneven (nine fp16 1024x1024 torch.mm and one 12288x12288 per
unit: one kernel of several milliseconds in ten short ones, whose learned
time a launch is the short ones'), train (a training step of a small
transformer: forward, backward, AdamW, a sync per step), eagerloop (an
eager transformer forward, the suite's eager-s, a sync per pass: a busy
tenant of many kernels), latency (a request every 10 ms: two fp16
2048x2048 torch.mm, then it waits for them;
the latency of each, from before its first launch to after the wait, on the
host's clock), idle (one small launch in its warm-up, then nothing: run
high-priority under the shim, a tenant that stays on the card while it
idles, docs/compute-limit.md, presence), spin (10 ms of busy host loop per
unit, no GPU work but an event a unit: a neighbour's spinning CPU without
its kernels), awake (a 256-element add, then 1 ms asleep: a card that never
idles long enough to clock down, used about 1 %) or requests (the suite's request
shapes, bench/suite.py: the
phases in FILE one after another, each a shape at an arrival for some
seconds; latency from each request's arrival to its answer on the host, so
that queueing counts; the models are built once for all phases).
START_AT is a CLOCK_MONOTONIC time (time.monotonic(), one clock for every
process of the machine), so that tenants of one scenario start together and
setup time stays out of the measurement. Phases, so that a tenant touches
the GPU as little as possible while an earlier one is measured:

    launch .. START_AT-setup_lead   import torch, build the suite's weights (CPU only)
    .. START_AT-0.5                 CUDA context, tensors, graph capture, event pool
                                    (requests: every shape warmed up, until START_AT;
                                    --setup-early: all this at once after the import)
    .. START_AT-0.1                 warm-up: the loop itself, then synchronize
    START_AT .. +SECONDS            the loop, a timing event after every unit

OUTFILE gets JSON: the monotonic times of the phases, and done_s: the
seconds from the start event to each unit's event, on the GPU's timeline
(for latency, latency_s: each request's; for requests, per request its
phase, arrival_s, begin_s and end_s in seconds from START_AT on the host's
clock, done_s, and span_s: the GPU time from its first launch's event to
its answer's).
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

T_LAUNCH = time.monotonic()
import torch  # noqa: E402  (imported after T_LAUNCH so its import time is known)

T_IMPORTED = time.monotonic()

import suite  # noqa: E402  (bench/ is on sys.path: this file's folder)
import workloads  # noqa: E402

PROGRAMS = ("matmul", "tiny", "graph", "triton", "bigmm", "uneven", "train", "eagerloop",
            "latency", "idle", "requests", "spin", "awake")
# Generous guesses of uncapped units/s on an H200, to size the event pool.
RATE_GUESS = {"matmul": 7000, "tiny": 4000, "graph": 3000, "triton": 8000, "bigmm": 300,
              "uneven": 400, "train": 1500, "eagerloop": 2000, "latency": 120, "idle": 1,
              "spin": 100, "awake": 1000}
# Units the CPU may queue ahead of the GPU: keeps the GPU fed, yet bounds the
# queue so the GPU stops soon after the loop does (the next run is scheduled).
# 0: a sync after every unit, as a training loop (loss.item()) or a loop of
# forward passes that uses each result does.
AHEAD = {"matmul": 64, "tiny": 16, "graph": 32, "triton": 64, "bigmm": 4, "uneven": 4,
         "train": 0, "eagerloop": 0, "latency": 1, "idle": 0, "spin": 64, "awake": 0}
# Units between two clock reads; one tiny or graph unit is long enough alone.
CHECK_EVERY = {"matmul": 8, "tiny": 1, "graph": 1, "triton": 8, "bigmm": 1, "uneven": 1,
               "train": 1, "eagerloop": 1, "latency": 1, "idle": 1, "spin": 1, "awake": 1}
# Busy programs whose weights bench/workloads.py builds (workloads.Models).
SUITE_BUSY = ("train", "eagerloop")
REQUEST_EVERY_S = 0.010  # the latency tenant's period
SPIN_UNIT_S = 0.010      # spin's unit of CPU work (an event each: 100 a second)
AWAKE_SLEEP_S = 0.001    # awake's sleep between two kernels
GROW = 2000          # events added at once if the pool runs out
WARMUP_END_S = 0.1   # warm-up stops this long before START_AT, then synchronizes


def sleep_until(t: float) -> None:
    """Sleep, then spin the last 2 ms: time.sleep alone can overshoot by a fraction of a ms."""
    left = t - time.monotonic()
    if left > 0.002:
        time.sleep(left - 0.002)
    while time.monotonic() < t:
        pass


def make_unit(program: str, models: Optional["workloads.Models"]) -> Callable[[], None]:
    """Allocate (outside the loop, so the allocator adds no noise) and return one unit of work."""
    dev = torch.device("cuda")
    if models is not None:  # the suite's busy programs
        return models.busy(program, dev)
    if program in ("matmul", "bigmm"):
        n = 4096 if program == "matmul" else 16384
        a = torch.randn(n, n, device=dev, dtype=torch.float16)
        b = torch.randn(n, n, device=dev, dtype=torch.float16)
        c = torch.empty(n, n, device=dev, dtype=torch.float16)

        def matmul() -> None:
            torch.mm(a, b, out=c)
        return matmul
    if program == "uneven":
        small = [torch.randn(1024, 1024, device=dev, dtype=torch.float16) for _ in range(2)]
        big = [torch.randn(12288, 12288, device=dev, dtype=torch.float16) for _ in range(2)]
        out_s = torch.empty(1024, 1024, device=dev, dtype=torch.float16)
        out_b = torch.empty(12288, 12288, device=dev, dtype=torch.float16)

        def uneven() -> None:
            for _ in range(9):
                torch.mm(small[0], small[1], out=out_s)
            torch.mm(big[0], big[1], out=out_b)
        return uneven
    if program == "triton":
        import triton_unit
        return triton_unit.make_unit(dev)
    if program == "latency":
        x = torch.randn(2048, 2048, device=dev, dtype=torch.float16) * 0.02
        y, z = torch.empty_like(x), torch.empty_like(x)

        def request() -> None:
            torch.mm(x, x, out=y)
            torch.mm(y, x, out=z)
        return request
    if program == "spin":
        # A CPU kept busy and the card left alone (an event a unit, nothing else):
        # what a busy neighbour's spinning host does for a request, without its GPU work.
        def spin() -> None:
            until = time.perf_counter() + SPIN_UNIT_S
            while time.perf_counter() < until:
                pass
        return spin
    if program == "awake":
        y = torch.zeros(256, device=dev, dtype=torch.float32)

        # A kernel of microseconds every millisecond, the host asleep between:
        # the card never idles long enough to clock down, and is used ~1 %.
        def awake() -> None:
            y.add_(1.0)
            time.sleep(AWAKE_SLEEP_S)
        return awake
    if program in ("tiny", "idle"):
        x = torch.zeros(256, device=dev, dtype=torch.float32)

        def once() -> None:
            x.add_(1.0)
        if program == "idle":
            return once

        def tiny() -> None:
            for _ in range(100):
                x.add_(1.0)
        return tiny
    # Small values keep the products finite however often the graph is replayed.
    a = torch.randn(2048, 2048, device=dev, dtype=torch.float16) * 0.02
    c = torch.empty(2048, 2048, device=dev, dtype=torch.float16)

    def body() -> None:
        for _ in range(20):
            a.mul_(1.0001)
            torch.mm(a, a, out=c)

    # Warm up on a side stream before capture, as PyTorch's CUDA graph docs require.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            body()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    return graph.replay


def new_events(n: int) -> List[torch.cuda.Event]:
    return [torch.cuda.Event(enable_timing=True) for _ in range(n)]


def run_loop(unit: Callable[[], None], events: List[torch.cuda.Event], until: float,
             ahead: int, check_every: int) -> int:
    """Run units until the clock passes `until`, recording events[i] after unit i; the count."""
    mono = time.monotonic
    n = 0
    while True:
        for _ in range(check_every):
            unit()
            if n == len(events):
                events.extend(new_events(GROW))
            events[n].record()
            if n >= ahead:
                events[n - ahead].synchronize()
            n += 1
        if mono() >= until:
            return n


def run_requests(unit: Callable[[], None], events: List[torch.cuda.Event], until: float,
                 latency: List[float]) -> int:
    """A request every REQUEST_EVERY_S until `until`, each waited for; appends each latency."""
    n = 0
    t_next = time.monotonic()
    while t_next < until:
        sleep_until(t_next)
        t0 = time.perf_counter()
        unit()
        if n == len(events):
            events.extend(new_events(GROW))
        events[n].record()
        events[n].synchronize()
        latency.append(time.perf_counter() - t0)
        n += 1
        # Late (a request took longer than a period): the next one at once, no burst.
        t_next = max(t_next + REQUEST_EVERY_S, time.monotonic())
    return n


# A request that could not begin by the run's end (its tail included) + this
# is not served: the next scenario's tenants set up GAP_S after the tail
# (bench/compute_run.py), and a backlog must not run into their setup.
STOP_AFTER_S = 0.0


def serve(requests: Dict[str, workloads.Request], phases: List[suite.Phase],
          todo: List[Tuple[int, float, int]], start_at: float, stop_at: float,
          events: List[Tuple[torch.cuda.Event, torch.cuda.Event]]) -> Dict[str, list]:
    """Serve todo's requests, (phase, arrival s from START_AT, size), in arrival order, one
    at a time (a request that arrives while another is served waits: queueing counts);
    per request its times.

    Times are seconds from START_AT on the host's clock; a request not begun
    by stop_at gets begin_s = end_s = None.
    """
    mono = time.monotonic
    out: Dict[str, list] = {k: [] for k in ("phase", "arrival_s", "begin_s", "end_s", "size")}
    n = 0
    for i, at, size in todo:
        arrival = start_at + at
        sleep_until(arrival)
        t0 = mono()
        out["phase"].append(i)
        out["arrival_s"].append(round(at, 7))
        out["size"].append(size)
        if t0 > stop_at:
            out["begin_s"].append(None)
            out["end_s"].append(None)
            continue
        ev0, ev1 = events[n]
        ev0.record()
        answer = requests[phases[i].shape](size)
        ev1.record()
        answer.cpu()  # the answer on the host: waits for the request's work
        t1 = mono()
        out["begin_s"].append(round(t0 - start_at, 7))
        out["end_s"].append(round(t1 - start_at, 7))
        n += 1
    return out


def warm_once(programs: List[str], shapes: List[str]) -> None:
    """Each busy program's unit and each request shape once, on the GPU (bench/compute_run.py
    prewarm: libraries and kernels off the disk before any tenant's timed setup)."""
    programs = [p for p in programs if p and p != "requests"]
    shapes = [s for s in shapes if s]
    busy = [p for p in programs if p in SUITE_BUSY]
    models = workloads.Models(busy + shapes)
    with torch.no_grad():
        models.requests(shapes, torch.device("cuda"))
    for p in programs:
        make_unit(p, models if p in busy else None)()
    torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("program", choices=PROGRAMS)
    ap.add_argument("seconds", type=float, help="wall seconds of the measured loop")
    ap.add_argument("start_at", type=float, help="CLOCK_MONOTONIC time to start at")
    ap.add_argument("outfile", type=Path)
    ap.add_argument("--setup-lead", type=float, default=2.5,
                    help="begin CUDA setup this many seconds before START_AT")
    ap.add_argument("--warmup", type=float, default=0.4, help="seconds of warm-up loop")
    ap.add_argument("--setup-early", action="store_true",
                    help="set up at once after the imports (not --setup-lead before START_AT), "
                         "then wait: only the warm-up loop runs just before START_AT")
    ap.add_argument("--cpu", type=int, default=None,
                    help="run on this CPU alone from the setup on (with --setup-early: from "
                         "the end of the setup on; never during the import)")
    ap.add_argument("--phases", type=Path,
                    help="requests: a JSON file of bench/suite.py phases (suite.to_json)")
    args = ap.parse_args()
    prog = args.program
    phases: List[suite.Phase] = []
    if prog == "requests":
        if not args.phases:
            ap.error("requests needs --phases")
        phases = suite.from_json(args.phases.read_text())
    shapes = sorted({p.shape for p in phases}, key=list(suite.SHAPES).index)
    # The suite's weights on the CPU now, with the imports, not beside another tenant's run.
    models = (workloads.Models(shapes) if prog == "requests" else
              workloads.Models([prog]) if prog in SUITE_BUSY else None)

    if not args.setup_early:
        sleep_until(args.start_at - args.setup_lead)
        if args.cpu is not None:
            os.sched_setaffinity(0, {args.cpu})
    t_setup = time.monotonic()
    latency: List[float] = []
    requests: Dict[str, workloads.Request] = {}
    steps: List[Tuple[str, float]] = []  # how long each part of the setup took, s
    since = [t_setup]

    def step(name: str) -> None:
        now = time.monotonic()
        steps.append((name, round(now - since[0], 4)))
        since[0] = now
    torch.zeros(1, device="cuda")
    step("context")
    if prog == "requests":
        torch.set_grad_enabled(False)
        for shape in shapes:  # each allocated, warmed up
            requests.update(models.requests([shape], torch.device("cuda")))
            step(shape)
        # Every arrival drawn now, none while the clock runs.
        todo = [(i, ph.at + at, size) for i, ph in enumerate(phases)
                for at, size in ph.requests()]
        pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                 for _ in todo]
        events = [ev for pair in pairs for ev in pair]
    else:
        unit = make_unit(prog, models)
        for _ in range(2):  # kernels loaded, cuBLAS initialized
            unit()
        events = new_events(int(RATE_GUESS[prog] * (args.seconds + args.warmup + 1.0)))
    # torch creates the CUDA event at its first record(): record every pooled
    # event once now, so that no event is created inside the measured loop.
    step("unit" if prog != "requests" else "arrivals")
    for ev in events:
        ev.record()
    start = torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda.synchronize()
    step("events")
    t_setup_done = time.monotonic()
    if args.setup_early and args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})

    def loop(until: float) -> int:
        if prog == "idle":
            if warm_units:  # launched in the warm-up: from now on it only idles
                sleep_until(until)
                return 0
            unit()
            torch.cuda.synchronize()
            return 1
        if prog == "latency":
            return run_requests(unit, events, until, latency)
        return run_loop(unit, events, until, AHEAD[prog], CHECK_EVERY[prog])

    warm_units = 0
    # requests: its setup ran every shape (what another run must not overlap); set up
    # early, it touches the GPU again only at START_AT.
    t_warmup = t_setup
    if prog != "requests":  # requests warmed up each shape in setup; its first phase settles
        sleep_until(args.start_at - WARMUP_END_S - args.warmup)
        t_warmup = time.monotonic()
        warm_units = loop(max(args.start_at - WARMUP_END_S, t_warmup + 0.05))
        torch.cuda.synchronize()
        latency.clear()

    sleep_until(args.start_at)
    start.record()
    t_start = time.monotonic()
    if prog == "requests" and args.setup_early:
        t_warmup = t_start
    served: Dict[str, list] = {}
    if prog == "requests":
        served = serve(requests, phases, todo, args.start_at,
                       args.start_at + args.seconds + STOP_AFTER_S, pairs)
        units = sum(1 for b in served["begin_s"] if b is not None)
    else:
        units = loop(t_start + args.seconds)
    t_loop_end = time.monotonic()
    torch.cuda.synchronize()
    t_end = time.monotonic()

    if prog == "requests":
        done_s = [round(start.elapsed_time(ev1) / 1000.0, 6) for _, ev1 in pairs[:units]]
        served["span_s"] = [round(ev0.elapsed_time(ev1) / 1000.0, 7)
                            for ev0, ev1 in pairs[:units]]
    else:
        done_s = [round(start.elapsed_time(events[i]) / 1000.0, 6) for i in range(units)]
    result: Dict[str, object] = {
        "program": prog,
        "seconds": args.seconds,
        "start_at": args.start_at,
        "pid": os.getpid(),
        "cpu": args.cpu,
        "env": {k: os.environ.get(k) for k in ("LD_PRELOAD", "GPUSLICE_CORE_LIMIT",
                                               "GPUSLICE_PRIORITY", "GPUSLICE_STATE_DIR",
                                               "GPUSLICE_CARD_DIR",
                                               "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")},
        "device": torch.cuda.get_device_name(),
        "import_s": T_IMPORTED - T_LAUNCH,
        "setup_monotonic": t_setup,
        "setup_s": t_setup_done - t_setup,
        "setup_steps": steps,
        "ready_monotonic": t_setup_done,
        "warmup_monotonic": t_warmup,
        "warmup_units": warm_units,
        "start_monotonic": t_start,
        "late_s": t_start - args.start_at,
        "loop_end_monotonic": t_loop_end,
        "end_monotonic": t_end,
        "wall_s": t_end - t_start,
        "units": units,
        "events_pooled": len(events),
        "done_s": done_s,
    }
    if prog == "latency":
        result["latency_s"] = [round(v, 7) for v in latency]
    if prog == "requests":
        result["phases"] = json.loads(suite.to_json(phases))
        result.update(served)
    tmp = args.outfile.with_name(args.outfile.name + ".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(args.outfile)  # whole or absent: the parent never reads half a file


if __name__ == "__main__":
    main()
