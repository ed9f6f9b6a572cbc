"""The workload suite of the compute benches (issue 25): what people run, as data.

Pure Python (no torch), so CI tests it: the request shapes and the rates
each is offered at, the arrival times and sizes of a phase's requests
(seeded: every scenario of a run sees the very same requests), and a
phase's JSON form, which bench/compute_latency writes and
bench/compute_prog.py reads, and what a request tenant's result says of each
phase (served). bench/workloads.py builds the shapes and the
busy programs on the GPU.

Request shapes (each serves one request and returns once its answer is on
the host; service times alone are estimates for an H200, the bench prints
the measured ones):

| shape   | one request                                           | alone  | light | heavy |
| ------- | ----------------------------------------------------- | ------ | ----- | ----- |
| mm2     | two fp16 2048x2048 matmuls (the bench before issue 25)| 0.3 ms | 100/s | 300/s |
| eager-s | eager transformer encoder, 8 layers, d 1024, 1024     | 2.5 ms | 20/s  | 40/s  |
|         | tokens, batch 1, fp16: ~90 launches, host-bound       |        |       |       |
| eager-l | the same encoder on 6144 tokens: GPU-bound (~5 ms)    | 6 ms   | 8/s   | 20/s  |
| graph-s | eager-s captured in a CUDA graph: one replay          | 0.8 ms | 20/s  | 40/s  |
| decode  | decoder-only LM, 2 layers, d 512 (~30 launches a      | 30 ms  | 2/s   | 4/s   |
|         | token): a 16-token prompt, then 32-128 tokens (seeded)|        |       |       |
|         | one at a time, KV cache, argmax(...).item() per token |        |       |       |
| cnn     | torchvision resnet18, batch 1, 224x224, fp16, eval    | 1.5 ms | 30/s  | 80/s  |

The loads are ~10 % and ~30 % of the time busy *beside a time-sliced
neighbour*, where a request takes 2-5 x as long as alone (issue 25: eager-s
p99 6.95 ms alone, 12.5 ms under plain time slicing at 40/s): sized on the
alone time instead, the reference's own queue would grow without bound and
its p99 would measure the phase's length. decode syncs once a token, and
each sync may wait out a neighbour's time slice (~1 ms: mm2's p50 went
from 0.31 to 1.46 ms): ~130 ms a request beside one, so its rates are
lower still, and its phases give 4 and 8 requests (its p99 is its max).
graph-s is offered at eager-s's rates, so that the two rows compare. Arrivals are periodic (one every
1/rate, the first half a period in) or Poisson (exponential gaps).
"""
from __future__ import annotations

import json
import random
import zlib
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple


@dataclass(frozen=True)
class Shape:
    name: str
    about: str
    rates: Tuple[float, float]  # requests/s: light, heavy
    phase_s: float              # seconds a phase of this shape lasts


SHAPES: Dict[str, Shape] = {s.name: s for s in (
    Shape("mm2", "two fp16 2048x2048 matmuls", (100.0, 300.0), 1.5),
    Shape("eager-s", "eager encoder 8x1024, 1024 tokens", (20.0, 40.0), 1.5),
    Shape("eager-l", "eager encoder 8x1024, 6144 tokens", (8.0, 20.0), 1.5),
    Shape("graph-s", "eager-s as one CUDA graph replay", (20.0, 40.0), 1.5),
    # A decode request takes ~30 ms alone: a longer phase, for a few requests at all.
    Shape("decode", "decoder 2x512, 32-128 tokens, sync per token", (2.0, 4.0), 2.0),
    Shape("cnn", "resnet18, batch 1, 224x224", (30.0, 80.0), 1.5),
)}
ARRIVALS = ("periodic", "poisson")
LOADS = ("light", "heavy")
DECODE_TOKENS = (32, 128)  # a decode request's tokens, drawn uniformly (inclusive)
# Busy programs (bench/compute_prog.py): neighbours of the requests, and the
# busy tenants of bench/compute_share. matmul and bigmm are compute_prog's own.
BUSY = ("matmul", "train", "bigmm", "eagerloop")
SEED = 25  # the suite's base seed (the number)


@dataclass(frozen=True)
class Phase:
    """One shape at one arrival for `seconds`, from `at` s after the run's start."""
    shape: str
    arrival: str   # periodic or poisson
    load: str      # light or heavy
    at: float
    seconds: float
    judged: bool = True  # False: the run's settling phase, not reported

    @property
    def rate(self) -> float:
        return SHAPES[self.shape].rates[LOADS.index(self.load)]

    @property
    def key(self) -> Tuple[str, str, str]:
        """What identifies a phase's requests across the scenarios of a run."""
        return (self.shape, self.arrival, self.load)

    @property
    def seed(self) -> int:
        # crc32, not hash(): Python salts str hashes per process.
        return SEED ^ zlib.crc32("/".join(self.key).encode())

    def requests(self) -> List[Tuple[float, int]]:
        """(arrival s from the phase's start, size) of each request; size: decode's tokens."""
        times = arrival_times(self.arrival, self.rate, self.seconds, self.seed)
        return list(zip(times, request_sizes(self.shape, len(times), self.seed)))


def arrival_times(kind: str, rate: float, seconds: float, seed: int) -> List[float]:
    """Arrival times in [0, seconds): periodic (half a period in, then every 1/rate) or Poisson."""
    if not rate > 0 or seconds < 0:
        raise ValueError(f"need a positive rate and seconds >= 0, got {rate}, {seconds}")
    if kind == "periodic":
        n = int(seconds * rate + 0.5)  # (k + 0.5) / rate < seconds for k < n
        return [(k + 0.5) / rate for k in range(n)]
    if kind == "poisson":
        rng = random.Random(seed)
        out: List[float] = []
        t = rng.expovariate(rate)
        while t < seconds:
            out.append(t)
            t += rng.expovariate(rate)
        return out
    raise ValueError(f"unknown arrival {kind!r}: one of {', '.join(ARRIVALS)}")


def largest_size(shape: str) -> int:
    """The largest size request_sizes gives a shape (what a warm-up must run: a decode of more
    tokens than its warm-up reached loaded new kernels, 1.7-4.4 s of its first requests on the
    H200)."""
    return DECODE_TOKENS[1] if shape == "decode" else 1


def request_sizes(shape: str, n: int, seed: int) -> List[int]:
    """Each request's size: the tokens a decode request generates, 1 for every other shape."""
    if shape != "decode":
        return [1] * n
    rng = random.Random(seed + 1)  # not the arrivals' stream: sizes do not move the arrivals
    return [rng.randint(*DECODE_TOKENS) for _ in range(n)]


def phases(shapes: Sequence[str], arrivals: Sequence[str] = ARRIVALS,
           loads: Sequence[str] = LOADS, settle_s: float = 1.0,
           phase_s: Optional[float] = None) -> List[Phase]:
    """Every shape x arrival x load back to back, after a settling phase (the first one's
    shape and arrival for settle_s, not reported: the first window is not judged); each
    lasts its shape's phase_s, or `phase_s` (a p99 of 40 requests is their slowest one:
    a row that swings between runs needs 300 or more)."""
    if phase_s is not None and not phase_s > 0:
        raise ValueError(f"a phase must last more than 0 s, got {phase_s}")
    out: List[Phase] = []
    t = 0.0
    for shape in shapes:
        if shape not in SHAPES:
            raise ValueError(f"unknown shape {shape!r}: one of {', '.join(SHAPES)}")
        for arrival in arrivals:
            for load in loads:
                if not out and settle_s > 0:
                    out.append(Phase(shape, arrival, load, 0.0, settle_s, judged=False))
                    t = settle_s
                secs = SHAPES[shape].phase_s if phase_s is None else phase_s
                out.append(Phase(shape, arrival, load, t, secs))
                t += secs
    return out


def length(ph: Sequence[Phase]) -> float:
    """Seconds from the run's start to the end of its last phase."""
    return max((p.at + p.seconds for p in ph), default=0.0)


def to_json(ph: Sequence[Phase]) -> str:
    return json.dumps([asdict(p) for p in ph])


def from_json(text: str) -> List[Phase]:
    return [Phase(**d) for d in json.loads(text)]


@dataclass
class Served:
    """A request tenant's requests of one phase in one scenario."""
    phase: Phase
    latency_ms: List[float] = field(default_factory=list)  # arrival to answer
    unanswered: int = 0      # not begun by the run's end: counted up to then
    done: List[float] = field(default_factory=list)  # answered ones: GPU end, s from start
    span: List[float] = field(default_factory=list)  # and GPU time from first launch to answer


def served(data: Optional[dict]) -> Dict[Tuple[str, str, str], Served]:
    """A request tenant's requests (its bench/compute_prog.py JSON), by phase key, judged
    phases only."""
    d = data or {}
    phases = from_json(json.dumps(d.get("phases", [])))
    out = {p.key: Served(p) for p in phases if p.judged}
    stop = d.get("seconds", 0.0)
    j = 0  # answered requests come first (a request unanswered ends the run): done_s[j]
    for i, arrival, end in zip(d.get("phase", []), d.get("arrival_s", []), d.get("end_s", [])):
        got = out.get(phases[i].key) if phases[i].judged else None
        if end is None:
            if got:
                got.latency_ms.append(1e3 * (stop - arrival))
                got.unanswered += 1
            continue
        if got:
            got.latency_ms.append(1e3 * (end - arrival))
            got.done.append(d["done_s"][j])
            got.span.append(d["span_s"][j])
        j += 1
    return out
