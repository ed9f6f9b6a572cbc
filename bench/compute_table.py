"""Analysis of the compute benches (bench/compute_share, bench/compute_latency): windows, card time, verdicts.

Pure Python (no torch), so CI tests it on synthetic timestamps
(tests/test_compute_table.py). A tenant's run is the list of times, in
seconds from its start on the GPU's timeline, at which each unit of work
finished. Two shares per 1 s window: its card time (busy_windows: the time
its work held the card, as its own events show it; what a cap promises,
docs/compute-limit.md) and its throughput (the units finished there against
the same program's uncapped units per second, in percent: reported, since a
lone card that boosts its clock does more per second of card time). The
acceptance: card time in every window after the first second within 2
points of the cap. The workload suite's rules (issue 25) are here too:
request latency percentiles and their goals, the card-time band of a capped
neighbour of a request tenant, and a busy tenant's throughput rule.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

if TYPE_CHECKING:  # this module stands alone (tests load it by its path)
    import suite

TOLERANCE = 2.0      # points of card time, the acceptance
SKIP_FIRST = 1       # windows not judged: the limiter may still be settling
START_SPREAD_S = 0.05  # tenants of one scenario must start this close together

PASS, FAIL, INVALID, ERROR = "PASS", "FAIL", "INVALID", "ERROR"


def windows(done_s: Sequence[float], seconds: int) -> List[int]:
    """Units finished in each 1 s window [w, w+1), w = 0..seconds-1; later ones are dropped."""
    if seconds < 1:
        raise ValueError(f"need at least one 1 s window, got seconds={seconds}")
    if len(done_s) == 0:
        raise ValueError("no unit of work finished: the run recorded no timestamps")
    counts = [0] * seconds
    for t in done_s:
        if t < 0:
            raise ValueError(f"a unit finished {t:.6f} s before its start event")
        w = math.floor(t)
        if w < seconds:
            counts[w] += 1
    return counts


# A gap longer than a unit by at most this (and by at most half a unit) is one
# unit after another: a unit's own jitter, never a neighbour's turn and the
# two context switches around it (0.2 ms each on an H200).
BACK_TO_BACK_S = 0.00025


def busy_windows(done_s: Sequence[float], seconds: int, unit_s: float) -> List[float]:
    """Percent of each 1 s window in which the program's work held the card (its card time).

    A unit that finished back to back with the one before (BACK_TO_BACK_S)
    ran from that one's end to its own: its whole gap is the program's,
    however long this unit took. After a longer gap (idle, a throttle, a
    neighbour's turn) it counts the program's time per unit: this run's
    (own_unit) where its back-to-back units show it, else unit_s, the
    program's uncapped mean time per unit. So this is the program's time
    share of the card as its own events show it, whatever its speed, and an
    uncapped run reads 100 %.
    """
    if not unit_s > 0:
        raise ValueError(f"unit time must be positive, got {unit_s}")
    busy = [0.0] * seconds
    prev = 0.0
    within, charge = back_to_back_s(unit_s), own_unit(done_s, unit_s)
    for t in done_s:
        spread(busy, prev if t - prev <= within else t - charge, t)
        prev = t
    return [100.0 * b for b in busy]


def back_to_back_s(unit_s: float) -> float:
    """The longest gap between two units done that is one unit after another."""
    return unit_s + min(unit_s / 2, BACK_TO_BACK_S)


# own_unit reads a run's units from its gaps of at most OWN_UNIT_WINDOW x the
# uncapped unit (wider than back to back, so that a spread is not cut off
# where it would look narrow) and trusts them if there are OWN_UNIT_MIN and
# their lower half lies within OWN_UNIT_SPREAD of their median: a GEMM's do
# (1-2 % on an H100, a neighbour's work between two of them only in the
# upper half), a host-bound step's do not (13 % capped at 50).
OWN_UNIT_WINDOW = 1.5
OWN_UNIT_MIN = 20
OWN_UNIT_SPREAD = 0.10


def own_unit(done_s: Sequence[float], unit_s: float) -> float:
    """The program's time per unit in this run: the median of its gaps between units
    where they cluster tightly there and below unit_s; else unit_s.

    A card that idles part of the time (beside a cap) runs at a higher clock
    than one its program keeps busy at its power limit: on an H100
    (2026-12-06) 16384^2 matmuls took 11.7 ms each capped at 50 beside
    requests, 16.0 uncapped alone. Each unit after a gap counted at 16.0 ms
    read 52.6-55.9 % of the card, over the cap, where NVML found it busy
    52-55 % for both tenants together; at 11.7 ms, 36.8-50.3.
    """
    gaps = unit_gaps(done_s, unit_s)
    if len(gaps) < OWN_UNIT_MIN:
        return unit_s
    median = gaps[len(gaps) // 2]
    if median - gaps[len(gaps) // 4] > OWN_UNIT_SPREAD * median:
        return unit_s
    return min(unit_s, median)


def unit_gaps(done_s: Sequence[float], unit_s: float) -> List[float]:
    """The gaps between a run's units done of at most OWN_UNIT_WINDOW x its uncapped
    time per unit, sorted: its units back to back, and a few gaps a little longer."""
    return sorted(b - a for a, b in zip(done_s, done_s[1:])
                  if 0 < b - a <= OWN_UNIT_WINDOW * unit_s)


def unit_note(done_s: Sequence[float], unit_s: float) -> str:
    """'units back to back N x uncapped': the median of unit_gaps against unit_s ('' with
    fewer than OWN_UNIT_MIN). Over 1 where the pacer slows each unit (a capped training
    loop's steps on an H100: 1.04 at 100, 1.09 at 30), under it where the card boosts."""
    gaps = unit_gaps(done_s, unit_s)
    if len(gaps) < OWN_UNIT_MIN:
        return ""
    return f"units back to back {gaps[len(gaps) // 2] / unit_s:.2f} x uncapped"


def charged_windows(samples: Sequence[Sequence[float]], start: float,
                    seconds: int) -> List[Optional[float]]:
    """Percent of each 1 s window from `start` (monotonic s) that the shim charged the
    tenant's container, from (monotonic s, charged ns) samples, linear between them;
    None for a window the samples do not cover.

    The pacer's own account of its card time, read beside the bench's
    (busy_windows): where the two part, the pacer counts what the tenant's
    work did not hold, or the other way round.
    """
    pts = sorted((float(t), float(ns)) for t, ns in samples)

    def at(x: float) -> Optional[float]:
        for (t0, c0), (t1, c1) in zip(pts, pts[1:]):
            if t0 <= x <= t1:
                return c0 + (c1 - c0) * (x - t0) / (t1 - t0) if t1 > t0 else c1
        return None

    out: List[Optional[float]] = []
    for w in range(seconds):
        lo, hi = at(start + w), at(start + w + 1)
        out.append(None if lo is None or hi is None else (hi - lo) / 1e7)
    return out


def charged_note(data: dict, seconds: int, windows: Sequence[int]) -> str:
    """'charged a-b': the range of charged_windows over `windows` of a tenant's run (its
    result, with the charges run_all sampled); '' where none of them is covered."""
    got = charged_windows(data.get("charges") or [], data["start_monotonic"], seconds)
    judged = [got[w] for w in windows if got[w] is not None]
    return f"charged {rng(judged)}" if judged else ""


def pacer_note(data: dict) -> str:
    """'host-bound (14 of 64 behind); a launch charged 9.8 us in 230 busy periods' first
    intervals, 28.4 in later ones; 120 stand-asides, 8.2 ms of others' work off; 41.7 ms of
    credit not kept in 90 refills', and side by side where it reckoned any epoch: the shim's
    account of a whole run at exit (run_all's "pacer"), '' without one. A launch charged more
    in first intervals than in later ones is what a hand-over or a wake-up costs it; credit
    not kept, for a GPU-bound tenant, what others' turns cost its cap."""
    acct = data.get("pacer") or {}
    parts = []
    b = acct.get("bound")
    if b:
        parts.append(f"{b['bound']}-bound ({b['behind']} of {b['of']} behind)")
    c = acct.get("charged")
    if c:
        parts.append(f"a launch charged {c['first_us'] / max(c['first_launches'], 1):.1f} us in "
                     f"{c['firsts']} busy periods' first intervals, "
                     f"{c['later_us'] / max(c['later_launches'], 1):.1f} in later ones; "
                     f"{c['asides']} stand-asides, {c['others_us'] / 1000:.1f} ms of others' work off")
    cut = acct.get("cut")
    if cut and cut["cuts"]:
        parts.append(f"{cut['cut_us'] / 1000:.1f} ms of credit not kept in {cut['cuts']} refills")
    # Side by side: an uncapped tenant's epochs (a capped one reckons its waits as 0),
    # and a capped one's where it held its neighbours in turns for more than its learning.
    side = acct.get("side")
    if side and (side["side"] or side["waiting_pm"]):
        parts.append(f"side by side in {side['side']} of {side['epochs']} epochs, its own waits "
                     f"{side['waiting_pm'] / 10:.0f} % of its time")
    if side and (side["long"] or side["high"] or side["owed"]):
        parts.append(f"said it was short in {side['learning']} epochs learning its time a launch, "
                     f"{side['long']} for long kernels, {side['high']} for a cap over half the "
                     f"card, {side['owed']} short of its cap (of {side['epochs']})")
    holds = acct.get("holds")
    if holds:
        # At the seconds of its run where the run's start is known (compute_run), else
        # after its first epoch (its setup's, in a bench that warms a tenant up first).
        run_s = holds.get("run_s")
        at = ", ".join(f"{s:.2f} s ({pm / 10:.1f} points)" for s, (_, pm) in
                       zip(run_s or [ms / 1000 for ms, _ in holds["at"]], holds["at"]))
        more = f" and {holds['holds'] - len(holds['at'])} more" if holds["holds"] > len(
            holds["at"]) else ""
        frame = "of its run" if run_s else "after its first epoch"
        parts.append(f"{holds['holds']} holds for running short, from {at} {frame}{more}")
    return "; ".join(parts)


def spread(busy: List[float], lo: float, hi: float) -> None:
    """Add the seconds of [lo, hi] to the 1 s windows they fall in (none before 0 or past the last)."""
    while lo < hi:
        w = math.floor(lo)
        if w >= len(busy):
            break
        top = min(hi, w + 1.0)
        if w >= 0:
            busy[w] += top - lo
        lo = top


def held_windows(spans: Sequence[Tuple[float, float]], seconds: int) -> List[float]:
    """Percent of each 1 s window covered by the (start, end) spans of one tenant's work.

    One tenant's work does not overlap itself on the card: where two spans
    overlap (estimates), the later one counts from the earlier one's end.
    """
    busy = [0.0] * seconds
    reach = -math.inf
    for lo, hi in sorted(spans):
        spread(busy, max(lo, reach), hi)
        reach = max(reach, hi)
    return [100.0 * b for b in busy]


def longest_gap(done_s: Sequence[float], after_s: float) -> float:
    """Longest time between two units done, from after_s on (0 if fewer than two)."""
    late = [t for t in done_s if t >= after_s]
    return max((b - a for a, b in zip(late, late[1:])), default=0.0)


def baseline_rate(counts: Sequence[int], skip_first: int = SKIP_FIRST) -> float:
    """Units per second of an uncapped run: the mean over its windows after the first."""
    kept = list(counts[skip_first:])
    if not kept:
        raise ValueError(f"a baseline needs more than {skip_first} window(s), got {len(counts)}")
    rate = sum(kept) / len(kept)
    if rate <= 0:
        raise ValueError("the uncapped run finished no unit of work after its first second")
    return rate


def shares(counts: Sequence[int], rate: float) -> List[float]:
    """Each window's units against the uncapped rate, in percent."""
    if not rate > 0:
        raise ValueError(f"baseline rate must be positive, got {rate}")
    return [100.0 * c / rate for c in counts]


def verdict(shares: Sequence[float], target: float, tol: float = TOLERANCE,
            skip_first: int = SKIP_FIRST) -> Tuple[float, bool]:
    """(worst signed deviation from target, whether every judged window is within tol).

    Windows before skip_first are not judged. "Within 2 points" includes 2.0
    itself; the epsilon keeps float rounding of an exact 2.0 from failing it.
    """
    judged = list(shares[skip_first:])
    if not judged:
        raise ValueError(f"nothing to judge: {len(shares)} window(s), the first "
                         f"{skip_first} skipped")
    devs = [s - target for s in judged]
    worst = max(devs, key=abs)
    return worst, all(abs(d) <= tol + 1e-9 for d in devs)


@dataclass
class Span:
    """When one tenant used the GPU, in CLOCK_MONOTONIC seconds (from its own JSON)."""
    key: str        # unique tenant name
    scenario: str   # unique per scenario run: its tenants run together on purpose
    setup: float    # first CUDA call (context, allocations, graph capture, events)
    warmup: float   # first warm-up unit (a request tenant set up early: its start)
    start: float    # start event recorded: window 0 begins
    end: float      # GPU idle again (after the final synchronize)
    seconds: Optional[int] = None  # its measured windows, where not the bench's
    ready: Optional[float] = None  # setup done, where known (else: its warm-up)


def span_of(key: str, scenario: str, data: dict, seconds: Optional[int] = None) -> Span:
    """A tenant's Span from its bench/compute_prog.py JSON."""
    return Span(key, scenario, data["setup_monotonic"], data["warmup_monotonic"],
                data["start_monotonic"], data["end_monotonic"], seconds,
                data.get("ready_monotonic"))


def interference(spans: Sequence[Span], seconds: int) -> Dict[str, Tuple[bool, List[str]]]:
    """key -> (valid, notes) for each tenant.

    Invalid when a tenant of another scenario warmed up or ran during this
    tenant's measured windows (its share would then be the bench's doing, not
    the limiter's), or when the tenants of its own scenario did not start
    together. Another scenario's setup (little GPU work) there is a note only.
    """
    out: Dict[str, Tuple[bool, List[str]]] = {}
    for s in spans:
        lo, hi = s.start, s.start + (s.seconds if s.seconds is not None else seconds)
        valid, notes = True, []
        for o in spans:
            if o.scenario == s.scenario:
                continue
            if o.warmup < hi and o.end > lo:
                valid = False
                notes.append(f"{o.key} used the GPU during these windows")
            elif o.setup < hi and (o.ready if o.ready is not None else o.warmup) > lo:
                notes.append(f"{o.key} set up during these windows")
        partners = [o.start for o in spans if o.scenario == s.scenario]
        spread = max(partners) - min(partners)
        if spread > START_SPREAD_S:
            valid = False
            notes.append(f"tenants started {spread:.3f} s apart")
        out[s.key] = (valid, notes)
    return out


@dataclass
class Row:
    """One line of the table: one tenant of one scenario."""
    scenario: str
    program: str
    cap: str                     # "25", or "none" for no GPUSLICE_CORE_LIMIT
    target: Optional[float]      # None: reported, not judged
    shares: List[float] = field(default_factory=list)
    worst: Optional[float] = None
    result: str = ""             # PASS, FAIL, INVALID, ERROR, or a word for reference rows
    note: str = ""
    busy: List[float] = field(default_factory=list)  # time share per window (busy_windows)
    busy_worst: Optional[float] = None
    busy_result: str = ""


def judge(row: Row, tol: float = TOLERANCE, skip_first: int = SKIP_FIRST) -> Row:
    """Fill worst and result of a row that has a target; an INVALID or ERROR result is kept.

    The card time (busy) decides when the row has it; the throughput share
    gets its own mark (busy_result names the card time's, for the table).
    """
    if row.target is None or row.result == ERROR:
        return row
    busy_ok = True
    if row.busy:
        row.busy_worst, busy_ok = verdict(row.busy, row.target, tol, skip_first)
        row.busy_result = PASS if busy_ok else FAIL
    row.worst, ok = verdict(row.shares, row.target, tol, skip_first)
    if row.result != INVALID:
        row.result = PASS if (busy_ok if row.busy else ok) else FAIL
    return row


def format_table(rows: Sequence[Row]) -> str:
    """The rows as an aligned text table, one line each, with a header."""
    head = ("scenario", "program", "cap", "target", "throughput share per 1 s window (%)",
            "worst", "result", "card time per 1 s window (%)", "worst", "card", "note")
    cells = [head]
    for r in rows:
        cells.append((
            r.scenario, r.program, r.cap,
            "-" if r.target is None else f"{r.target:g}",
            " ".join(f"{s:.1f}" for s in r.shares) or "-",
            "-" if r.worst is None else f"{r.worst:+.1f}",
            r.result,
            " ".join(f"{s:.1f}" for s in r.busy) or "-",
            "-" if r.busy_worst is None else f"{r.busy_worst:+.1f}",
            r.busy_result or "-", r.note))
    widths = [max(len(c[i]) for c in cells) for i in range(len(head) - 1)]
    lines = ["  ".join(c[i].ljust(widths[i]) for i in range(len(widths))) + "  " + c[-1]
             for c in cells]
    return "\n".join(line.rstrip() for line in lines)


def summary(rows: Sequence[Row]) -> Tuple[str, bool]:
    """One closing line, and whether the whole run passed (nothing failed, invalid or broken)."""
    count = {k: sum(1 for r in rows if r.result == k) for k in (PASS, FAIL, INVALID, ERROR)}
    ok = count[PASS] > 0 and count[FAIL] == count[INVALID] == count[ERROR] == 0
    line = (f"{'ALL PASS' if ok else 'NOT PASSED'}: {count[PASS]} passed, {count[FAIL]} failed, "
            f"{count[INVALID]} invalid, {count[ERROR]} errors "
            f"(card time in every window from {SKIP_FIRST} s on within {TOLERANCE:g} points of "
            f"the target, or throughput where no card time is measured)")
    return line, ok


# The workload suite's rules (bench/compute_latency, bench/compute_share --suite).
GOAL1_RATIO = 1.0  # a normal tenant's p99 beside capped neighbours / plain time slicing's
HIGH_RATIO = 1.2   # priority high: p99 / its p99 alone


def pct(values: Sequence[float], p: float) -> float:
    """The p-th percentile (nearest rank on the sorted values)."""
    if not values:
        raise ValueError("no values for a percentile")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(p / 100 * (len(s) - 1)))))]


def latency_verdict(p99: float, ref_p99: Optional[float], ratio: float) -> str:
    """PASS when p99 <= ratio x the reference's p99; ERROR without a reference."""
    if ref_p99 is None or not ref_p99 > 0:
        return ERROR
    return PASS if p99 <= ratio * ref_p99 + 1e-12 else FAIL


def neighbour_band(cap: float, others: float, tol: float = TOLERANCE) -> Tuple[float, float]:
    """The card time a capped neighbour must hold in a window: (floor, ceiling).

    At most cap + tol; at least min(cap, 100 - others) - tol, where others is
    the card time the rest of the scenario (the request tenant, other
    neighbours) held in that window: it is owed its cap, or what is left.
    """
    return min(cap, 100.0 - others) - tol, cap + tol


def band_verdict(card: Sequence[float], cap: float, others: Sequence[float],
                 windows: Sequence[int], tol: float = TOLERANCE) -> Tuple[bool, str]:
    """Whether a capped neighbour's card time is within its band in each of `windows`;
    a note naming the first window that is not."""
    for w in windows:
        lo, hi = neighbour_band(cap, others[w], tol)
        if not lo - 1e-9 <= card[w] <= hi + 1e-9:
            return False, f"window {w}: {card[w]:.1f} outside {max(lo, 0):.1f}-{hi:.1f}"
    return True, ""


def busy_tenant_verdict(rate: float, ref_rate: float, card: Sequence[float], cap: float,
                        tol: float = TOLERANCE, skip_first: int = SKIP_FIRST) -> Tuple[bool, str]:
    """Goal 2: a busy uncapped tenant beside a neighbour capped at `cap` gets at least the
    throughput it gets beside that neighbour uncapped under plain time slicing (ref_rate,
    units/s), and card time >= (100 - cap) - tol in every judged window."""
    judged = list(card[skip_first:])
    if not judged or not ref_rate > 0:
        return False, "nothing to judge"
    floor = 100.0 - cap - tol
    low = min(judged)
    ok = rate >= ref_rate and low >= floor - 1e-9
    return ok, (f"{rate:.1f} units/s vs {ref_rate:.1f} under plain time slicing "
                f"({rate / ref_rate:.2f}); card time min {low:.1f} (floor {floor:g})")


def phase_windows(p: suite.Phase, seconds: int) -> List[int]:
    """The judged 1 s windows a phase overlaps."""
    lo = max(SKIP_FIRST, math.floor(p.at))
    return list(range(lo, min(seconds, math.ceil(p.at + p.seconds))))


def rng(values: Sequence[float]) -> str:
    return f"{min(values):.1f}-{max(values):.1f}" if values else "-"
