"""The compute limiter as a unit: native/shim/src/pace*.c under a simulated clock.

tests/shim/pace_sim runs the very code the shim runs against a simulated GPU
that behaves as bench/card_handover measured an H200: one context at a time,
2 ms time slices while others wait, 0.18 ms idle to preempt a context with
work left and 0.2 ms to move to another one when the last ran dry (the
switch and the hand-over around it, as the final shim's H200 runs show), a
futex waiter that wakes 0.5 ms late (a virtual machine), a 1024-kernel
queue. It prints per process its share per 1 s window (kernels completed
against the same program alone and uncapped, simulated in the same run),
its card time per window (the time the GPU ran its kernels), what it was
charged against that, its longest gap between two kernels and its longest
wait in the limiter, and a request tenant's latency. Exact and repeatable:
no real clock is read, so the latency, wait and accuracy bounds of
docs/compute-limit.md are asserted here, not against a wall clock.
Programs: matmul (230 us kernels, GPU-bound), tiny (2 us kernels behind
10 us launches, CPU-bound), graph (570 us replays), big (8 ms kernels),
long (40 ms kernels), request (two 150 us kernels every 9-11 ms, waited
for), forge, forgehigh and forgeblocked (hostile tenants that write the
card file).
"""
from __future__ import annotations

import dataclasses
import statistics
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

REPO = Path(__file__).resolve().parent.parent
SIM = REPO / "tests" / "shim" / "build-plain" / "pace_sim"
TOLERANCE = 2.0  # points of card time: the contract's bar
WAIT_MS = 5.0    # the longest an uncapped or normal neighbour waits at a stretch


@pytest.fixture(scope="module")
def sim() -> Path:
    subprocess.run(["make", "-s", "-C", str(SIM.parent.parent), "pace_sim"], check=True)
    return SIM


@dataclass
class Proc:
    share: List[float] = field(default_factory=list)     # throughput, % per window
    cardtime: List[float] = field(default_factory=list)  # % of each window the GPU ran it
    charged: float = 0.0     # charged / GPU time (1: exact)
    maxgap: float = 0.0      # ms without a kernel done, after 1 s
    maxwait: float = 0.0     # ms one launch was held back for others, after 1 s
    cut: float = -1.0        # ms of credit its bucket's refills did not keep, after 1 s
    latency: Tuple[float, float, float] = (0.0, 0.0, 0.0)  # p50, p99, max in ms
    launches: int = 0        # all its launches
    ticketed: int = 0        # of those after 1 s, the ones on tickets (a quiet card)
    guests: int = 0          # guest stretches it began after 1 s
    open: List[float] = field(default_factory=list)  # % of each window it had a request open
    # Side by side, whole run: epochs side by side, epochs, its own waits per mille,
    # epochs it said it was short in while learning, for long kernels, for a cap over half
    # the card, short of its cap.
    side: Tuple[int, ...] = ()
    # Its holds for running short: how many, and (ms after its first epoch, per mille
    # short) for the first of them.
    holds: int = 0
    held: List[Tuple[int, int]] = field(default_factory=list)


@dataclass
class Run:
    procs: Dict[str, Proc]
    executing: float  # percent of the time the GPU executed kernels

    def __getitem__(self, name: str) -> Proc:
        return self.procs[name]


def simulate(sim: Path, seconds: int, *procs: str, turns: bool = True,
             side: bool = True) -> Run:
    flag = [] if turns and side else ["--no-side"] if turns else ["--no-turns"]
    res = subprocess.run([str(sim), *flag, str(seconds), *procs],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    out: Dict[str, Proc] = {}
    executing = -1.0
    for line in res.stdout.splitlines():
        word, *rest = line.split()
        if word == "executing":
            executing = float(rest[0])
            continue
        if word == "switches":
            continue
        p = out.setdefault(rest[0], Proc())
        values = [float(v) for v in rest[1:]]
        if word in ("share", "cardtime", "open"):
            setattr(p, word, values)
        elif word in ("charged", "maxgap", "maxwait", "cut"):
            setattr(p, word, values[0])
        elif word in ("launches", "ticketed", "guests"):
            setattr(p, word, int(values[0]))
        elif word == "latency":
            p.latency = (values[0], values[1], values[2])
        elif word == "side":
            p.side = tuple(int(v) for v in values)
        elif word == "holds":
            p.holds = int(values[0])
            p.held = [(int(a), int(b)) for a, b in zip(values[1::2], values[2::2])]
    return Run(out, executing)


def settled(windows: List[float]) -> List[float]:
    return windows[1:]  # every window after the first second


def within(windows: List[float], target: float, tol: float = TOLERANCE) -> bool:
    return all(abs(s - target) <= tol for s in settled(windows))


# ------------------------------------------------------------------ accuracy

@pytest.mark.parametrize("program", ["matmul", "tiny", "graph"])
@pytest.mark.parametrize("cap", [10, 25, 50, 75])
def test_alone_every_window_within_two_points(sim: Path, program: str, cap: int) -> None:
    a = simulate(sim, 6, f"a:{program}:{cap}:0")["a"]
    assert within(a.share, cap), a.share
    # Settles within the first second too: no slow start, no overshoot.
    assert abs(a.share[0] - cap) <= TOLERANCE, a.share


@pytest.mark.parametrize("cap", [1, 5, 99, 100])
def test_extreme_caps(sim: Path, cap: int) -> None:
    a = simulate(sim, 5, f"a:matmul:{cap}:0")["a"]
    assert within(a.share, cap), a.share


def test_no_oscillation(sim: Path) -> None:
    for program in ("matmul", "graph", "tiny"):
        shares = settled(simulate(sim, 8, f"a:{program}:40:0")["a"].share)
        assert max(shares) - min(shares) <= 2.0, (program, shares)
        assert statistics.pstdev(shares) <= 1.0, (program, shares)


@pytest.mark.parametrize("procs", [
    ("a:matmul:25:0",), ("a:graph:50:0", "b:matmul:0:1"), ("a:matmul:30:0", "b:matmul:70:1"),
    ("l:request:50:0", "a:matmul:30:1", "b:matmul:0:2"), ("a:matmul:40:0", "h:request:0:1:high"),
])
def test_charges_are_the_card_time(sim: Path, procs: Tuple[str, ...]) -> None:
    # What the limiter charges a capped process is the time the GPU ran its
    # kernels: with turns the card is its own while it runs (a neighbour that
    # lingers, a guest, a high-priority tenant's work never lands in its bill).
    run = simulate(sim, 5, *procs)
    for spec in procs:
        name, program, cap = spec.split(":")[:3]
        if cap != "0" and program != "tiny":
            assert abs(run[name].charged - 1.0) <= 0.01, (spec, run[name].charged)


def test_two_tenants_30_and_70(sim: Path) -> None:
    run = simulate(sim, 6, "a:matmul:30:0", "b:matmul:70:1")
    assert within(run["a"].share, 30) and within(run["b"].share, 70), run.procs
    # Replays of 0.57 ms move the 30's windows by a point, which the 70 absorbs.
    run = simulate(sim, 6, "a:graph:30:0", "b:graph:70:1")
    assert within(run["a"].share, 30) and within(run["b"].share, 70, 2.5), run.procs


def test_fairness_between_equal_caps(sim: Path) -> None:
    run = simulate(sim, 6, "a:matmul:40:0", "b:graph:40:1")
    for name in "ab":
        assert within(run[name].share, 40), run.procs
    gap = [abs(x - y) for x, y in zip(settled(run["a"].share), settled(run["b"].share))]
    assert max(gap) <= 2.0, run.procs


def test_capped_beside_uncapped_holds_its_share(sim: Path) -> None:
    run = simulate(sim, 6, "a:matmul:30:0", "b:matmul:0:1")
    assert within(run["a"].share, 30), run.procs
    # The uncapped one gets the rest, less what the hand-overs cost.
    assert all(s >= 62 for s in settled(run["b"].share)), run.procs


def test_light_neighbour_does_not_lift_a_cap(sim: Path) -> None:
    # A CPU-bound process holds the card while it launches and is charged
    # for that time: it must not run at twice its cap beside a busy one.
    # (3 points: its throughput also rides on when its windows fall.)
    run = simulate(sim, 6, "a:tiny:30:0", "b:matmul:0:1")
    assert within(run["a"].share, 30, 3.0), run.procs
    # The other way round the capped one can only lose (never exceed).
    run = simulate(sim, 6, "a:matmul:30:0", "b:tiny:0:1")
    assert all(s <= 30 + TOLERANCE for s in run["a"].share), run.procs


def test_cap_binds_the_container(sim: Path) -> None:
    run = simulate(sim, 6, "a:matmul:50:0", "b:matmul:50:0")
    total = [x + y for x, y in zip(run["a"].share, run["b"].share)]
    assert all(abs(t - 50) <= TOLERANCE for t in settled(total)), run.procs
    # Beside a third, uncapped context: never above the cap.
    run = simulate(sim, 6, "a:matmul:50:0", "b:matmul:50:0", "c:graph:0:1")
    total = [x + y for x, y in zip(run["a"].share, run["b"].share)]
    assert all(50 - 2 * TOLERANCE <= t <= 50 + TOLERANCE for t in settled(total)), run.procs


def test_burst_after_idle(sim: Path) -> None:
    # Idle from 2 s to 4 s: the credit saved while idle is capped, so the
    # first window back is no burst, and the cap holds from there on.
    shares = simulate(sim, 8, "a:matmul:25:0:idle=2-4")["a"].share
    assert shares[2] == shares[3] == 0.0, shares
    for w in (1, 4, 5, 6, 7):
        assert abs(shares[w] - 25) <= TOLERANCE, (w, shares)


def test_long_kernels_hold_on_average(sim: Path) -> None:
    # A 40 ms kernel cannot be split: single windows move by a kernel (4
    # points at 30%), the average over the run holds.
    shares = settled(simulate(sim, 11, "a:long:30:0")["a"].share)
    assert abs(statistics.mean(shares) - 30) <= 1.5, shares
    assert all(abs(s - 30) <= 12 for s in shares), shares


def test_three_tenants(sim: Path) -> None:
    run = simulate(sim, 6, "a:matmul:20:0", "b:graph:30:1", "c:matmul:0:2")
    # Replays of 0.57 ms move the 30's windows by a half point more.
    assert within(run["a"].share, 20) and within(run["b"].share, 30, 2.5), run.procs
    # Beside two busy uncapped ones, which share their turn side by side (the
    # GPU switches between them too), a 50 holds its cap.
    run = simulate(sim, 6, "a:matmul:50:0", "b:matmul:0:1", "c:matmul:0:2")
    assert within(run["a"].share, 50), run.procs


def test_turns_recover_the_switching_loss(sim: Path) -> None:
    # Side by side (GPUSLICE_COMPUTE_TURNS=0) the GPU switches contexts every
    # slice and the capped tenant pays its part of the idle switches: it
    # gets less than its cap (never more). In turns, the card switches a few
    # times per on/off cycle and the cap holds.
    pair = ("a:matmul:30:0", "b:matmul:0:1")
    side = simulate(sim, 6, *pair, turns=False)
    turns = simulate(sim, 6, *pair)
    assert all(s <= 30 + TOLERANCE for s in side["a"].share), side.procs
    assert statistics.mean(settled(side["a"].share)) < 28, side.procs
    assert within(turns["a"].share, 30), turns.procs
    assert turns.executing > side.executing + 0.5, (side.executing, turns.executing)


@pytest.mark.parametrize("program,neighbour", [("matmul", "big"), ("graph", "big"),
                                               ("matmul", "huge"), ("graph", "huge")])
def test_a_neighbour_with_long_kernels_is_drained_and_the_turn_grows(sim: Path, program: str,
                                                                    neighbour: str) -> None:
    # 8 and 13.7 ms kernels: a new holder waits for the neighbour's kernel,
    # and after such a drain holds the card in proportion; the neighbour
    # starts no kernel that would outlast its window by more than the
    # holder's drain (the H200's 30 beside 16384² matmuls got 13-16 without),
    # and never has more in flight than that drain waits for: while the 30
    # slept, 13.7 ms kernels queued two deep outlasted its 16 ms drain when
    # it came back, and shared its turn (a 30 of 0.57 ms replays got 22 %,
    # charged a third more than its card time).
    run = simulate(sim, 6, f"a:{program}:30:0", f"b:{neighbour}:0:1")
    assert within(run["a"].share, 30), run.procs
    assert 0.98 <= run["a"].charged <= 1.02, run.procs


@pytest.mark.parametrize("program", ["matmul", "graph"])
def test_a_90_beside_kernels_of_13_ms_gets_its_cap(sim: Path, program: str) -> None:
    # Each window left to the neighbour holds one of its 13.7 ms kernels: a
    # 90's turn must last nine times that (and the hand-overs), past the 100
    # ms longest turn (it got 87.3-88.7 when its turns stopped there). The
    # neighbour, whose launches are that long, waits so long within its
    # grace: it keeps its tenth, and no more than one such turn at a stretch.
    run = simulate(sim, 6, f"m:{program}:90:0", "h:huge:0:1")
    assert within(run["m"].cardtime, 90), run.procs
    assert all(s >= 8 for s in settled(run["h"].share)), run.procs
    assert run["h"].maxwait <= 200, run.procs
    # Beside a third, a neighbour of short kernels, that one waits one such
    # turn, not more (200 ms, the longest turn and the most grace); the 90
    # is short of its cap by up to 3.2 points there (a shortfall of three
    # tenants, docs/compute-limit.md), 4.6 when its turns stopped at 100 ms.
    run = simulate(sim, 6, f"m:{program}:90:0", "h:huge:0:1", "e:eagerloop:0:2")
    assert statistics.mean(settled(run["m"].cardtime)) >= 87.5, run.procs
    assert min(settled(run["m"].cardtime)) >= 86.0, run.procs
    assert run["e"].maxwait <= 200, run.procs


# ------------------------------------------------------------------- waiting

ROUND_MS = 20.0  # GS_PACE_ROUND_NS: a round of turns beside uncapped tenants


def longest_turn_ms(cap: int) -> float:
    """The longest an uncapped neighbour waits beside one capped tenant: the
    holder's turn, a quarter more than cap / (100 - cap) times what it was away
    (the uncapped turn, (100 - cap) % of a round, and the hand-overs), at most
    100 ms (GS_PACE_LONG_TURN_NS)."""
    if cap >= 100:
        return 100.0 + 2.0  # and the hand-overs around it
    away = ROUND_MS * (100 - cap) / 100 + 2.0
    return min(100.0, 1.25 * away * cap / (100 - cap)) + 1.0


@pytest.mark.parametrize("cap", [30, 50, 75, 90, 100])
def test_an_uncapped_neighbour_waits_its_share_of_a_round_at_most(sim: Path, cap: int) -> None:
    run = simulate(sim, 5, f"a:matmul:{cap}:0", "b:matmul:0:1")
    assert run["b"].maxgap <= longest_turn_ms(cap), (run["b"].maxgap, longest_turn_ms(cap))
    # Every cap holds, 90 too: its turns grow with what the rounds cost it
    # (issue 13 left 86.5 % on the H200 with turns of 4 ms).
    if cap < 100:
        assert within(run["a"].share, cap), run.procs
        # The uncapped one gets the rest, less the hand-overs (goal 2's card time).
        assert all(s >= 100 - cap - 2 * TOLERANCE for s in settled(run["b"].share)), run.procs
    else:
        # A cap of 100 holds the card whenever it competes: the uncapped one
        # gets the window after each of its longest turns, and no more.
        assert all(s > 0 for s in settled(run["b"].share)), run.procs
        assert all(s >= 100 - TOLERANCE for s in settled(run["a"].cardtime)), run.procs


def test_a_capped_tenant_beside_an_uncapped_one_keeps_every_credit_it_earns(sim: Path) -> None:
    # Its turns let it spend what it earns: none is cut at the burst (the
    # exit account's "its bucket" line; docs/compute-limit.md, Charges).
    # Where caps fall short, the cut says how much of it the turns cost:
    # three 30s beside an uncapped one lose 42-78 ms of 5 s, what they lack
    # of their caps within 25 ms (What is left).
    for cap in (30, 50, 90):
        run = simulate(sim, 6, f"a:matmul:{cap}:0", "b:matmul:0:1")
        assert run["a"].cut == 0 and within(run["a"].cardtime, cap), (cap, run.procs)
    run = simulate(sim, 6, "a:matmul:30:0", "b:matmul:30:1", "c:matmul:30:3", "e:matmul:0:2")
    for p in "abc":
        short_ms = sum(30 - w for w in settled(run[p].cardtime)) * 10  # points of 1 s windows
        assert abs(run[p].cut - short_ms) <= 25, (p, run[p].cut, short_ms, run.procs)


@pytest.mark.parametrize("caps", [(30, 30), (20, 20), (40, 40), (10, 50)])
def test_capped_tenants_beside_a_busy_uncapped_one_each_get_their_cap(
        sim: Path, caps: Tuple[int, int]) -> None:
    # A holder passed the card to a capped waiter after its part of the 12 ms
    # even while an uncapped one waited too, and left the uncapped ones a
    # window of (100 - its cap) % of a round after each turn: the first
    # capped process of each round got less than its cap (two 30s: 21.4-22.0
    # and 29.6-30.6; two 40s: 21.3-23.1; a 30 of graph replays beside a 30
    # and 13.7 ms kernels: 5.7-7.2). It now keeps its share of the round
    # first (should_yield), and the window is shared with the capped waiters
    # (uncapped_turn).
    for busy in ("matmul", "eagerloop"):
        run = simulate(sim, 6, f"a:matmul:{caps[0]}:0", f"b:matmul:{caps[1]}:1",
                       f"c:{busy}:0:2")
        assert within(run["a"].cardtime, caps[0]), (busy, run.procs)
        assert within(run["b"].cardtime, caps[1]), (busy, run.procs)


@pytest.mark.parametrize("order", [
    ("a:graph:30:0", "b:matmul:30:1", "c:huge:0:2"),
    ("c:huge:0:2", "a:graph:30:0", "b:matmul:30:1"),
    ("a:graph:30:0", "c:huge:0:2", "b:matmul:30:1"),
    ("c:huge:0:2", "a:matmul:30:0", "b:matmul:30:1"),
])
def test_two_30s_beside_long_kernels_hold_their_cap_whoever_starts_first(
        sim: Path, order: Tuple[str, str, str]) -> None:
    # The uncapped loop of 13.7 ms kernels launched one as its window closed
    # when the one before had just run out (its queue empty, it passed for
    # the first of the window): the next holder's turn began 13.7 ms late,
    # and in every order here but the first the 30s dipped to 26.2-27.0 in
    # a window (window_too_short).
    run = simulate(sim, 6, *order)
    assert within(run["a"].cardtime, 30) and within(run["b"].cardtime, 30), run.procs


UNEVEN_LOOPS = (
    "loop,k=3000,k2=40,every=10,l=20,n=50,h=500",  # a 3 ms kernel in ten
    "loop,k=5000,k2=40,every=10,l=20,n=50,h=500",  # a 5 ms kernel in ten
    "loop,k=8000,k2=100,every=4,l=15,n=20,h=300",  # an 8 ms kernel in four
)


@pytest.mark.parametrize("loop", UNEVEN_LOOPS)
def test_a_capped_tenant_beside_a_loop_of_uneven_kernels_gets_its_cap(sim: Path,
                                                                      loop: str) -> None:
    # The loop's learned time a launch is its short kernels': it launches a
    # long one late in its window and waits for it, and its seat's stamp
    # shows no queue. The holder took the card back at once and shared its
    # turn with that kernel in time slices, charged for them (its lease
    # lapsed too as it waited behind them, and the loop launched on): a 30
    # got 18-19 beside the 5 ms kernels, a 50 34-35 and 43-44 beside the
    # 3 ms ones, a 70 64 beside the 8 ms ones. A process waiting for its
    # own queue now counts as launching until the wait returns, and the
    # holder drains it first (pace_card.c). The loop gets the rest, or what
    # plain time slicing gives it, less the hand-overs and the window's tail
    # where its long kernel did not fit (25.7-27.4 beside the 70).
    plain = simulate(sim, 6, "a:matmul:0:0:noshim", f"b:{loop}:0:1:noshim")
    floor = min(settled(plain["b"].cardtime))
    for cap in (30, 50, 70):
        run = simulate(sim, 6, f"a:matmul:{cap}:0", f"b:{loop}:0:1")
        assert within(run["a"].cardtime, cap), (cap, run.procs)
        assert all(s >= min(floor, 100 - cap) - 3 * TOLERANCE
                   for s in settled(run["b"].cardtime)), (cap, floor, run.procs)


def test_three_capped_tenants_beside_a_busy_uncapped_one(sim: Path) -> None:
    # Short by a little more than the bar where three share, or the caps
    # leave the uncapped one little (named in docs/compute-limit.md, What is
    # left): three 30s got 13-16, 14-16 and 27-30 before, two 45s 21.9-24.4.
    run = simulate(sim, 6, "a:matmul:30:0", "b:matmul:30:1", "c:matmul:30:3", "e:matmul:0:2")
    assert all(s >= 27 for p in "abc" for s in settled(run[p].cardtime)), run.procs
    assert all(s <= 32 for p in "abc" for s in settled(run[p].cardtime)), run.procs
    run = simulate(sim, 6, "a:matmul:45:0", "b:matmul:45:1", "e:matmul:0:2")
    assert all(39 <= s <= 47 for p in "ab" for s in settled(run[p].cardtime)), run.procs


def test_uncapped_neighbours_of_two_capped_tenants_wait_a_round(sim: Path) -> None:
    # Two capped holders and the uncapped ones get a round between them.
    run = simulate(sim, 5, "a:matmul:20:0", "b:graph:30:1", "c:matmul:0:2")
    assert run["c"].maxgap <= longest_turn_ms(20) + longest_turn_ms(30) + ROUND_MS / 2, run.procs


def test_capped_tenants_take_longer_turns_among_themselves(sim: Path) -> None:
    # Between capped tenants alone each pass costs the card a switch, and
    # their buckets divide it: turns of 12 ms, each waits one at most.
    run = simulate(sim, 5, "a:matmul:30:0", "b:matmul:70:1")
    assert run["a"].maxwait <= 14 and run["b"].maxwait <= 14, run.procs
    assert run.executing >= 98.5, run.executing


# ------------------------------------------------------------------- latency

REF = {1: ("n:matmul:0:1:noshim",), 2: ("n:matmul:0:1:noshim", "m:matmul:0:2:noshim")}


def reference_p99(sim: Path, neighbours: int) -> float:
    """The request tenant's p99 beside the same neighbour(s) without the shim: plain time slicing."""
    return simulate(sim, 4, "l:request:0:0:noshim", *REF[neighbours])["l"].latency[1]


@pytest.mark.parametrize("latency_cap", [0, 50])
@pytest.mark.parametrize("caps", [(30,), (50,), (90,), (30, 30)])
def test_requests_beside_capped_neighbours_wait_less_than_time_slicing(
        sim: Path, latency_cap: int, caps: Tuple[int, ...]) -> None:
    ref = reference_p99(sim, len(caps))
    names = "nm"
    run = simulate(sim, 4, f"l:request:{latency_cap}:0",
                   *(f"{names[i]}:matmul:{c}:{i + 1}" for i, c in enumerate(caps)))
    p99 = run["l"].latency[1]
    assert p99 <= 1.5 * ref, (p99, ref)
    assert p99 <= 1.5, (p99, ref)  # and in absolute terms: a guest is served at once
    for i, c in enumerate(caps):
        assert within(run[names[i]].share, c), run.procs


@pytest.mark.parametrize("neighbour", ["n:matmul:50:1", "n:matmul:0:1", "n:graph:50:1"])
def test_high_priority_requests_are_served_within_a_millisecond(sim: Path,
                                                                neighbour: str) -> None:
    run = simulate(sim, 4, "l:request:0:0:high", neighbour)
    # A graph replay (570 us) cannot be cut: up to two of them run first.
    bound = 1.7 if ":graph:" in neighbour else 1.0
    assert run["l"].latency[1] <= bound, run["l"].latency
    if ":50:" in neighbour:
        assert within(run["n"].share, 50), run.procs


def test_a_high_priority_tenant_obeys_its_own_cap(sim: Path) -> None:
    run = simulate(sim, 5, "h:matmul:30:0:high", "n:matmul:0:1")
    assert within(run["h"].share, 30), run.procs
    assert all(s >= 60 for s in settled(run["n"].share)), run.procs


def test_low_priority_yields_to_normal_work(sim: Path) -> None:
    # Beside a busy normal tenant a low one gets only a trickle (its patience);
    # a normal request beside a busy low tenant is served at once.
    run = simulate(sim, 4, "a:matmul:0:0:low", "b:matmul:0:1")
    assert all(s >= 95 for s in settled(run["b"].share)), run.procs
    assert all(0 < s <= 4 for s in settled(run["a"].share)), run.procs
    run = simulate(sim, 4, "a:matmul:0:0:low", "l:request:0:1")
    assert run["l"].latency[1] <= 1.0, run["l"].latency
    # A low request is no guest: it waits for normal work.
    run = simulate(sim, 4, "l:request:0:0:low", "b:matmul:0:1")
    assert run["l"].latency[1] > 5, run["l"].latency


# --------------------------------------------------------------------- trust

@pytest.mark.parametrize("cap", [0, 50])
def test_a_forged_lease_leaves_a_tenth(sim: Path, cap: int) -> None:
    # Anyone can write the card file: a lease renewed every 0.5 ms for a
    # process that does not exist makes others wait 90 % of their time at
    # most (the first wait takes its grace, then patience): they keep a tenth.
    run = simulate(sim, 5, f"a:matmul:{cap}:0", "f:forge:0:1")
    assert all(s >= 9 for s in settled(run["a"].share)), run.procs


def test_a_seat_that_says_it_waits_for_its_queue_holds_a_holder_16_ms(sim: Path) -> None:
    # A seat that says its process waits for its own queue (GPUSLICE_CARDFILE_
    # BLOCKED, renewed every 0.5 ms by a process with no work) holds a holder
    # taking the card as a forged stamp does, 16 ms at most: capped tenants
    # keep their caps. Waiting for it up to 100 ms, tried, held a lone 50 to
    # 30-35 and a 30 among three tenants to 2.6-3.8.
    run = simulate(sim, 6, "a:matmul:50:0", "f:forgeblocked:0:1")
    assert within(run["a"].cardtime, 50), run.procs
    run = simulate(sim, 6, "a:matmul:30:0", "b:matmul:30:2", "e:matmul:0:3",
                   "f:forgeblocked:0:1")
    assert within(run["a"].cardtime, 30) and within(run["b"].cardtime, 30), run.procs


def test_forged_high_priority_takes_half_at_most(sim: Path) -> None:
    # Courtesy for guests and high priority is half of a process's time: a
    # tenant that claims high work it does not have gains what running
    # without the shim beside it would (the hardware's time slicing).
    run = simulate(sim, 5, "a:matmul:0:0", "f:forgehigh:0:1")
    assert all(s >= 48 for s in settled(run["a"].share)), run.procs


def test_bad_arguments_are_named(sim: Path) -> None:
    res = subprocess.run([str(sim), "6", "a:quantum:30:0"], capture_output=True, text=True)
    assert res.returncode == 2 and '"a:quantum:30:0"' in res.stderr
    res = subprocess.run([str(sim), "6", "a:matmul:30:0:urgent"], capture_output=True, text=True)
    assert res.returncode == 2 and '"a:matmul:30:0:urgent"' in res.stderr
    res = subprocess.run([str(sim), "1", "a:matmul:30:0"], capture_output=True, text=True)
    assert res.returncode == 2 and "SECONDS=1" in res.stderr
    for bad in ("a:trainh:30:0:wake=-1", "a:trainh:30:0:wake=x", "a:trainh:30:0:wake=2ms"):
        res = subprocess.run([str(sim), "6", bad], capture_output=True, text=True)
        assert res.returncode == 2 and f'"{bad}"' in res.stderr and "wake=MS" in res.stderr


def test_bad_turns_flag_position_is_named(sim: Path) -> None:
    res = subprocess.run([str(sim), "6", "--no-turns", "a:matmul:30:0"], capture_output=True,
                         text=True)
    assert res.returncode == 2 and '"--no-turns"' in res.stderr


# ------------------------------------------------------ the workload suite
# Issue 25's goals on every request shape of the simulator (pace_sim's
# programs: request, eager, eagerl, graphreq, decode, cnn), periodic and
# Poisson arrivals: a request tenant is served first while it idles at least
# as long as it holds the card (guest credit), so beside capped neighbours
# it waits no longer than with plain time slicing.

SHAPES = ["request", "eager", "eagerl", "graphreq", "decode", "cnn"]
ARRIVALS = ["", ":poisson"]
ASIDE_MS = 0.5  # GS_PACE_ASIDE_NS: neighbours stand aside this long past a guest's last launch


def plain_p99(sim: Path, shape: str, arrival: str, neighbours: int) -> float:
    """p99 of the shape beside busy matmul neighbours with no shim anywhere."""
    return simulate(sim, 6, f"l:{shape}:0:0{arrival}:noshim", *REF[neighbours])["l"].latency[1]


@pytest.mark.parametrize("arrival", ARRIVALS)
@pytest.mark.parametrize("shape", SHAPES)
def test_every_request_shape_waits_no_longer_than_time_slicing(sim: Path, shape: str,
                                                              arrival: str) -> None:
    refs = {k: plain_p99(sim, shape, arrival, k) for k in (1, 2)}
    for latency_cap in (0, 50):
        for caps in ((30,), (50,), (90,), (30, 30)):
            names = "nm"
            run = simulate(sim, 6, f"l:{shape}:{latency_cap}:0{arrival}",
                           *(f"{names[i]}:matmul:{c}:{i + 1}" for i, c in enumerate(caps)))
            p99 = run["l"].latency[1]
            assert p99 <= refs[len(caps)], (shape, arrival, latency_cap, caps, p99, refs)
            # A capped neighbour never holds more than its cap in a window, and
            # over the run gets its cap, less what the requests claimed: the
            # time a request was open, with the hand-back after each (others
            # stand aside GS_PACE_ASIDE_NS past a guest's last launch), shared
            # among the neighbours; and the hand-overs around the requests
            # (drains, context switches, a waker's lateness): 1.5 points more.
            per_request = 1 + ASIDE_MS / max(run["l"].latency[0], 0.1)
            claimed = statistics.mean(settled(run["l"].open)) * per_request / len(caps)
            for i, c in enumerate(caps):
                shares = settled(run[names[i]].cardtime)
                assert all(s <= c + TOLERANCE for s in shares), (shape, arrival, caps, shares)
                floor = min(c, 100 - claimed) - TOLERANCE - 1.5
                assert statistics.mean(shares) >= floor, (
                    shape, arrival, latency_cap, caps, names[i], shares, claimed)


@pytest.mark.parametrize("neighbour", ["big", "huge"])
@pytest.mark.parametrize("shape", SHAPES)
def test_every_request_shape_beside_long_kernels_waits_as_under_time_slicing(
        sim: Path, shape: str, neighbour: str) -> None:
    # Goal 1 beside a neighbour whose kernels run for 8 and 13.7 ms: a guest
    # queues its request while the neighbour's kernel runs out, as with no
    # shim (held to a short queue, each of its launches waited out a time
    # slice of that kernel: an eager request's p99 was 41 ms against 7.7).
    # What is left is a context switch of the hand-over (0.2 ms) and 1 %.
    # Short of it: the GPU-bound eagerl, itself capped at 50, in Poisson
    # bursts beside 13.7 ms kernels (its own bucket runs dry in a burst:
    # 48 ms against 38; named in docs/compute-limit.md).
    for arrival in ARRIVALS:
        ref = simulate(sim, 6, f"l:{shape}:0:0{arrival}:noshim",
                       f"n:{neighbour}:0:1:noshim")["l"].latency[1]
        for latency_cap in (0, 50):
            run = simulate(sim, 6, f"l:{shape}:{latency_cap}:0{arrival}", f"n:{neighbour}:50:1")
            short = (shape, arrival, latency_cap, neighbour) == ("eagerl", ":poisson", 50, "huge")
            limit = 1.3 * ref if short else 1.01 * ref + 0.2
            assert run["l"].latency[1] <= limit, (shape, arrival, latency_cap,
                                                  run["l"].latency, ref)
            assert all(s <= 50 + TOLERANCE for s in settled(run["n"].cardtime)), run.procs


# The suite's mm2 at its heavy rate as an H100 runs it: two kernels of 30 us.
MM2_H100 = "req,k=30,l=10,n=2,r=300"
# A request that reads a value back halfway, then its answer: two waits.
TWO_WAITS = "req,k=30,l=10,n=20,h=30,t=2-2,r=100"


@pytest.mark.parametrize("arrival", ARRIVALS)
@pytest.mark.parametrize("cap", [70, 90])
@pytest.mark.parametrize("shape", [MM2_H100, TWO_WAITS])
def test_a_request_answered_lets_its_neighbours_go(sim: Path, shape: str, arrival: str,
                                                   cap: int) -> None:
    # Others stand aside GS_PACE_ASIDE_NS past a guest's last launch (the
    # gaps between a request's launches); a request's wait that returns
    # ends its work, and a guest whose waits at that place in its requests
    # end its launching lets its stamp go there (gs_pace_waited). Else a
    # capped 90 beside tiny requests at 300 a second idled half a
    # millisecond after each: 79 % of the card in Poisson bursts, where
    # plain time slicing leaves an uncapped loop 87 (the rest are context
    # switches, which no pacer can save); and beside requests of two waits,
    # told apart only on the whole, the first let go and the last held on
    # (76.5 against 80.5).
    plain = simulate(sim, 6, f"l:{shape}:0:0{arrival}:noshim", "n:matmul:0:1:noshim")
    ref = statistics.mean(settled(plain["n"].cardtime))
    run = simulate(sim, 6, f"l:{shape}:0:0{arrival}", f"n:matmul:{cap}:1")
    shares = settled(run["n"].cardtime)
    assert all(s <= cap + TOLERANCE for s in shares), (shape, arrival, cap, shares)
    assert statistics.mean(shares) >= min(cap, ref) - TOLERANCE, (shape, arrival, cap, shares,
                                                                  ref)
    assert run["l"].latency[1] <= plain["l"].latency[1], (shape, arrival, cap,
                                                           run["l"].latency, plain["l"].latency)


@pytest.mark.parametrize("arrival", ARRIVALS)
@pytest.mark.parametrize("shape", ["decode", "req,k=15,l=12,n=40,h=80,t=16-64,r=6"])
def test_a_token_loop_keeps_its_stamp_over_its_waits(sim: Path, shape: str, arrival: str) -> None:
    # A decode loop waits for every token and launches the next one at once:
    # its waits do not end its launching, and it keeps its stamp over them
    # (each let go cost the next token a neighbour's queue and a switch:
    # p99 62 -> 74 ms beside a 90). As if the shim did not see them at all.
    for cap in (50, 90):
        seen = simulate(sim, 6, f"l:{shape}:0:0{arrival}", f"n:matmul:{cap}:1")
        unseen = simulate(sim, 6, f"l:{shape}:0:0{arrival}:unseensync", f"n:matmul:{cap}:1")
        assert seen["l"].latency[1] <= 1.02 * unseen["l"].latency[1], (
            shape, arrival, cap, seen["l"].latency, unseen["l"].latency)


@pytest.mark.parametrize("arrival", ARRIVALS)
@pytest.mark.parametrize("shape", SHAPES)
def test_high_priority_requests_of_every_shape_wait_a_hand_over_at_most(
        sim: Path, shape: str, arrival: str) -> None:
    # Goal 3 asks p99 <= 1.2 x alone; what a request beside a busy neighbour
    # cannot avoid on time-sliced hardware is one hand-over: the neighbour's
    # last quarter millisecond of queue and a context switch (0.2 ms).
    alone = simulate(sim, 6, f"l:{shape}:0:0{arrival}:noshim")["l"].latency[1]
    for neighbour in ("n:matmul:50:1", "n:matmul:0:1", "n:train:50:1"):
        run = simulate(sim, 6, f"l:{shape}:0:0{arrival}:high", neighbour)
        # Measured: up to 1.2 ms more for the sub-millisecond shapes with
        # Poisson bursts (a shortfall of goal 3, named in docs/compute-limit.md).
        assert run["l"].latency[1] <= 1.2 * alone + 1.5, (shape, neighbour, run["l"].latency,
                                                          alone)


@pytest.mark.parametrize("shape", ["decode", "eager", "cnn"])
def test_sparse_high_priority_requests_beside_a_busy_uncapped_loop(sim: Path, shape: str) -> None:
    # Requests seconds apart: a high tenant idles past the second after which
    # its last stamp is stale. Its presence (the shim's thread) keeps the
    # uncapped loop paced, its queue short; without it the loop went back to
    # the free path, queued as deep as the driver lets it, and the next
    # request shared the card with that queue slice by slice (decode 377 ms
    # at p99 against 56 alone, eager 180 against 2.2).
    alone = simulate(sim, 8, f"l:{shape}:0:0:poisson:rate=0.5:noshim")["l"].latency[1]
    run = simulate(sim, 8, f"l:{shape}:0:0:poisson:rate=0.5:high", "n:matmul:0:1")
    assert run["l"].latency[1] <= 1.2 * alone + 1.5, (shape, run["l"].latency, alone)


def test_beside_an_idle_managed_tenant_launches_skip_the_pacer_between_fences(sim: Path) -> None:
    # Presence keeps an uncapped process paced beside a high or capped tenant
    # that idles; on a quiet card (no turn, no stamp, no window) it launches
    # between fence points on tickets, as a capped process alone does (on an
    # H100 it took the mutex at every launch: 0.64-0.86 of native launches).
    # Not while a turn is held or high work is stamped: then every launch
    # asks the card (beside a busy 50 only while it sleeps for its credit,
    # turn given back; it takes the next turn on time and keeps its cap),
    # unless it goes side by side through the turn (the default; off here).
    idle = simulate(sim, 4, "b:tiny:0:0", "h:request:0:1:high:idle=0.5-4")
    assert idle["b"].ticketed > 0.8 * idle["b"].launches * 3 / 4, idle.procs
    turns = simulate(sim, 4, "b:tiny:0:0:noside", "m:matmul:50:1")
    assert turns["b"].ticketed < 0.2 * turns["b"].launches, turns.procs
    assert within(turns["m"].cardtime, 50) and max(settled(turns["b"].share)) <= 52, turns.procs
    # High requests 40 a second: tickets between them, none inside them (the
    # stamp changes the card's words), and the requests wait no longer.
    alone = simulate(sim, 6, "h:eager:0:1:poisson:noshim")["h"].latency[1]
    busy = simulate(sim, 6, "b:eagerloop:0:0", "h:eager:0:1:high:poisson")
    assert busy["b"].ticketed > 0 and busy["h"].latency[1] <= 1.2 * alone + 1.5, busy.procs


def test_a_capped_holder_nobody_waits_for_launches_on_tickets(sim: Path) -> None:
    # A capped process holding the turn with nobody wanting the card (alone,
    # or beside requests between them) launches between fence points on
    # tickets, as an uncapped one does on a quiet card (on an H100 the look
    # at every launch cost a host-bound eager loop at 100 2-3 % of its
    # passes). A want renewed anywhere changes the card's words: beside a
    # busy uncapped tenant, which waits for its window, none go on tickets.
    # Its cap holds either way, and requests are served as before.
    alone = simulate(sim, 4, "b:eagerloop:50:1")
    assert alone["b"].ticketed > 0.8 * alone["b"].launches * 3 / 4, alone.procs
    assert within(alone["b"].share, 50), alone.procs
    busy = simulate(sim, 4, "b:eagerloop:50:1", "n:matmul:0:2")
    assert busy["b"].ticketed == 0 and within(busy["b"].share, 50), busy.procs
    served = simulate(sim, 6, "b:eagerloop:50:1", "r:eager:0:2:poisson")
    plain = simulate(sim, 6, "b:eagerloop:0:1:noshim", "r:eager:0:2:poisson:noshim")
    assert served["b"].ticketed > 0.5 * served["b"].launches * 5 / 6, served.procs
    assert within(served["b"].share, 50) and served["r"].latency[1] <= plain["r"].latency[1]


@pytest.mark.parametrize("capped,busy,cap", [("matmul", "matmul", 50), ("graph", "eagerloop", 30)])
def test_a_capped_tenant_back_from_idle_gets_its_cap_at_once(sim: Path, capped: str, busy: str,
                                                            cap: int) -> None:
    # Idle for two seconds beside a busy uncapped tenant, then busy again: its
    # first window back is its cap (without its presence: 35 of 50 and 22 of
    # 30, for its turns shared the card with the deep queue the neighbour
    # built while it went unpaced).
    run = simulate(sim, 7, f"a:{capped}:{cap}:0:idle=2-4", f"b:{busy}:0:1")
    assert all(abs(s - cap) <= TOLERANCE for s in run["a"].cardtime[4:]), run.procs


def test_a_busy_tenant_of_many_kernels_gets_the_rest_of_the_card(sim: Path) -> None:
    # Goal 2: an eager model's forward passes back to back (host-bound, a sync
    # each) beside a capped matmul. Plain time slicing beside the same matmul
    # uncapped gives it 56 % of its rate alone (it launches while the
    # neighbour runs). Beside a 30 it gets more than that; beside a 50 its
    # half of the card, less the hand-overs: 45 %, short of plain time slicing,
    # since exact charges for the capped one rule out launching into its
    # turns (the shortfall docs/compute-limit.md names).
    plain = statistics.mean(settled(
        simulate(sim, 6, "a:matmul:0:0:noshim", "b:eagerloop:0:1:noshim")["b"].share))
    run = simulate(sim, 6, "a:matmul:30:0", "b:eagerloop:0:1")
    assert within(run["a"].share, 30), run.procs
    assert all(s >= plain for s in settled(run["b"].share)), (plain, run.procs)
    run = simulate(sim, 6, "a:matmul:50:0", "b:eagerloop:0:1")
    assert within(run["a"].share, 50), run.procs
    assert all(s >= 50 - 3 * TOLERANCE for s in settled(run["b"].share)), run.procs


# Plain time slicing beside a busy matmul, and what gates must give at least
# beside a capped one (goal 2): all of it beside a 30 (for the CPU-bound tiny
# loop 95 %: the hand-overs), 0.8 of it beside a 50 (the eager loop 0.90,
# the host-bound training step 0.82: the shortfall docs/compute-limit.md names).
GATED_FLOOR = {30: 0.95, 50: 0.8}


@pytest.mark.parametrize("cap", [30, 50])
@pytest.mark.parametrize("program", ["eagerloop", "trainh", "tiny"])
def test_a_gated_busy_tenant_beside_a_capped_one(sim: Path, program: str, cap: int) -> None:
    # Gates, the pacer's side (pace_sim's `gates`; the shim has none yet): an
    # uncapped busy tenant whose turn it is not closes its gate and goes on
    # launching, its work held on the GPU until its watcher opens the gate;
    # its window ends once the GPU has caught up with it, so its work runs in
    # dense batches and the card passes at about time slicing's pace.
    # Waiting on the host for turns it did 64-66 % of its steps alone beside
    # a 30 and 45-47 beside a 50, whatever its shape; plain time slicing gives
    # the eager loop 56, the host-bound training step 91, the tiny loop 100.
    # (Side by side, the default, does as well beside a 30 and better beside
    # a 50: test_a_host_bound_tenant_side_by_side_gets_what_time_slicing_gives.)
    plain = statistics.mean(settled(
        simulate(sim, 6, "m:matmul:0:0:noshim", f"e:{program}:0:1:noshim")["e"].share))
    host = simulate(sim, 6, f"m:matmul:{cap}:0", f"e:{program}:0:1:noside")
    gated = simulate(sim, 6, f"m:matmul:{cap}:0", f"e:{program}:0:1:gates")
    assert within(gated["m"].cardtime, cap), gated.procs
    assert all(s >= GATED_FLOOR[cap] * plain for s in settled(gated["e"].share)), (plain, gated.procs)
    assert min(settled(gated["e"].share)) > max(settled(host["e"].share)), (host.procs, gated.procs)
    # Held on the host a watcher's look at most (waiting for turns: 9-15 ms).
    assert gated["e"].maxwait <= 2.0 < WAIT_MS <= host["e"].maxwait, (host.procs, gated.procs)


@pytest.mark.parametrize("program", ["matmul", "graph", "huge", "eagerloop", "trainh"])
def test_a_gated_tenant_leaves_a_90_its_cap(sim: Path, program: str) -> None:
    # A gated batch runs whole once its gate opens: kernels of 2 ms or more
    # are not gated (they wait on the host, as before), and behind the gate
    # a process keeps no deeper queue than the batch it had.
    run = simulate(sim, 6, "m:matmul:90:0", f"e:{program}:0:1:gates")
    assert within(run["m"].cardtime, 90), run.procs
    for cap in (30, 50):
        run = simulate(sim, 6, f"m:matmul:{cap}:0", f"e:{program}:0:1:gates")
        assert within(run["m"].cardtime, cap), (cap, run.procs)


def test_two_busy_uncapped_tenants_share_the_window_a_capped_one_leaves(sim: Path) -> None:
    # Each held to the short queue in the window, their queues ran dry at
    # every kernel and the GPU moved between their contexts every 0.27 ms,
    # each move an idle switch: beside a 50 the host-bound step and the
    # eager loop did 11 and 15 % of their steps alone (each alone beside it
    # 46; plain time slicing 72 and 36). Beside another uncapped process's
    # queue, a window's queue is half the window left, a time slice at most.
    for cap, floors in ((50, (25, 20)), (30, (38, 30))):
        run = simulate(sim, 6, f"a:matmul:{cap}:0", "e:trainh:0:1", "f:eagerloop:0:2")
        assert within(run["a"].cardtime, cap), (cap, run.procs)
        assert min(settled(run["e"].share)) >= floors[0], (cap, run.procs)
        assert min(settled(run["f"].share)) >= floors[1], (cap, run.procs)


# ------------------------------------------------------------- side by side

def without_side(run: Run) -> Dict[str, Proc]:
    """Its processes' figures but side by side's own account (only a process with the
    option reckons its epochs)."""
    return {k: dataclasses.replace(v, side=()) for k, v in run.procs.items()}


@pytest.mark.parametrize("cap", [30, 50])
@pytest.mark.parametrize("program", ["eagerloop", "trainh", "tiny"])
def test_a_host_bound_tenant_side_by_side_gets_what_time_slicing_gives(
        sim: Path, program: str, cap: int) -> None:
    # Side by side (the default; pace_sim's `noside`, GPUSLICE_COMPUTE_SIDE=0,
    # turns it off): a busy uncapped tenant whose own waits take little of
    # its time launches through the capped holder's turns, as under plain
    # time slicing, and the holder is charged its own launches at the time
    # each takes alone. With
    # turns the eager loop did 65 % of its passes alone beside a 30 and 46
    # beside a 50, the host-bound training step 65 and 46 (plain time slicing:
    # 56 and 91; goal 2). Side by side the eager loop 73 and 56, the step 94
    # and 90, the tiny loop 98 (means: a window in which the capped one
    # learns its own time again drops by up to a tenth).
    plain = statistics.mean(settled(
        simulate(sim, 8, "m:matmul:0:0:noshim", f"e:{program}:0:1:noshim")["e"].share))
    turns = simulate(sim, 8, f"m:matmul:{cap}:0", f"e:{program}:0:1:noside")
    side = simulate(sim, 8, f"m:matmul:{cap}:0", f"e:{program}:0:1")
    assert within(side["m"].cardtime, cap), side.procs
    assert 0.97 <= side["m"].charged <= 1.03, side.procs
    got = statistics.mean(settled(side["e"].share))
    assert got >= 0.97 * plain, (plain, side.procs)
    assert got > max(settled(turns["e"].share)), (turns.procs, side.procs)
    # Whoever holds the turn, its launches between fence points go past the
    # pacer on tickets while the card's words stay (59-84 %; 0-10 without).
    assert side["e"].ticketed >= 0.5 * side["e"].launches, side.procs
    # Side by side in most of its epochs (its own waits: the eager loop's 44 %
    # of its time, the nearest to the 40 that lets it go).
    assert side["e"].side[0] >= 0.8 * side["e"].side[1], side.procs


@pytest.mark.parametrize("program", ["eagerloop", "trainh", "trainv", "tiny"])
def test_side_by_side_tenants_leave_a_capped_one_its_cap(sim: Path, program: str) -> None:
    # Time slicing gives a matmul beside these 48-67 % of the card: a 70 and
    # a 90 say at every epoch that they are short (the test below), a 30 or
    # a 50 that runs short says so, and the uncapped one takes turns again
    # (for longer each time it is told: 1, 2, then 4 s).
    for cap in (30, 50, 70, 90):
        run = simulate(sim, 8, f"m:matmul:{cap}:0", f"e:{program}:0:1")
        assert within(run["m"].cardtime, cap), (cap, run.procs)


def test_a_capped_tenant_tells_when_its_holds_for_running_short_began(sim: Path) -> None:
    # Beside a loop under which time slicing gives a matmul 46 % of the
    # card, a 50 side by side runs short, says so after its first second,
    # and holds its neighbour in turns: the exit line (and pace_sim's
    # `holds`) says when each hold began and how short it ran then, for a
    # GPU run to show how its holds come, while its windows stay in band.
    run = simulate(sim, 8, "m:matmul:50:0", "e:loop,k=60,k2=6,l=60,n=300,h=200:0:1")
    m = run["m"]
    assert m.holds >= 2 and len(m.held) == min(m.holds, 8), run.procs  # GS_PACE_HOLDS_KEPT
    assert m.held[0][0] >= 1000, run.procs  # GS_PACE_SHORT_SETTLE_NS
    assert all(pm > 25 for _, pm in m.held), run.procs  # GS_PACE_SHORT_PM
    # A hold lasts 100 ms at least (GS_PACE_SHORT_HOLD_MIN_NS), and an epoch
    # of side by side comes before the next.
    assert all(b[0] - a[0] >= 120 for a, b in zip(m.held, m.held[1:])), run.procs
    assert within(m.cardtime, 50), run.procs
    # An uncapped one holds nothing.
    assert run["e"].holds == 0 and not run["e"].held, run.procs


@pytest.mark.parametrize("shape", ["loop,k=60,k2=6,l=60,n=300,h=200",
                                   "loop,k=60,k2=6,l=50,n=300,h=200",
                                   "loop,k=60,k2=6,l=65,n=300,h=200",
                                   "loop,k=40,k2=10,l=45,n=200,h=400"])
def test_a_capped_tenant_short_side_by_side_holds_its_neighbour_for_what_it_ran_short(
        sim: Path, shape: str) -> None:
    # A 40 beside loops under which time slicing gives a matmul 46 % runs
    # short side by side at moments (the GPU's slices), and holds its
    # neighbour in turns long enough that the stretch and the hold leave it
    # a point short at most (GS_PACE_SHORT_MEAN_PM): a duty cycle. Holds of
    # 1 s, then 2, then 4 left the loop side by side in three short
    # stretches of 8 s (65.3, 62.6 and 85.4 % of its steps alone beside the
    # first three; plain time slicing 83.8, 70.0 and 90.7; the fourth is
    # seldom short). Outside shapes; the 40 in its band.
    plain = statistics.mean(settled(
        simulate(sim, 8, "m:matmul:0:0:noshim", f"e:{shape}:0:1:noshim")["e"].share))
    turns = statistics.mean(settled(simulate(sim, 8, "m:matmul:40:0",
                                             f"e:{shape}:0:1:noside")["e"].share))
    run = simulate(sim, 8, "m:matmul:40:0", f"e:{shape}:0:1")
    assert within(run["m"].cardtime, 40), run.procs
    got = statistics.mean(settled(run["e"].share))
    assert got >= 0.95 * plain and got > turns, (plain, turns, run.procs)


@pytest.mark.parametrize("cap", [70, 90])
@pytest.mark.parametrize("program", ["eagerloop", "trainh", "tiny", "eager"])
def test_beside_a_cap_over_half_the_card_no_one_goes_side_by_side(
        sim: Path, program: str, cap: int) -> None:
    # Time slicing gives a busy context about half the card: a capped one
    # above that runs short side by side, and went back to turns only once
    # it had (on an H100 a 90 beside eager requests side by side lost its
    # band, 78.3 in a window). It says it is short at every epoch, learns
    # nothing, and every figure is the run's without the option.
    turns = simulate(sim, 6, f"m:matmul:{cap}:0", f"e:{program}:0:1:noside")
    side = simulate(sim, 6, f"m:matmul:{cap}:0", f"e:{program}:0:1")
    assert side["e"].side[0] == 0, side.procs
    assert side["m"].side[5] == side["m"].side[1] > 0 and side["m"].side[3] == 0, side.procs
    assert without_side(side) == without_side(turns), (cap, turns.procs, side.procs)


@pytest.mark.parametrize("program", ["matmul", "graph", "train", "huge"])
def test_a_gpu_bound_tenant_with_side_by_side_on_takes_turns(sim: Path, program: str) -> None:
    # Its waits for its own work take most of its time: it never goes side by
    # side, and every figure is the run without the option's.
    for cap in (30, 90):
        turns = simulate(sim, 6, f"m:matmul:{cap}:0", f"e:{program}:0:1:noside")
        side = simulate(sim, 6, f"m:matmul:{cap}:0", f"e:{program}:0:1")
        assert side["e"].side[0] == 0 and side["e"].side[2] > 600, side.procs
        assert without_side(side) == without_side(turns), (cap, turns.procs, side.procs)


@pytest.mark.parametrize("shape", ["eager", "graphreq", "cnn"])
def test_requests_beside_a_capped_tenant_and_a_side_by_side_one(sim: Path, shape: str) -> None:
    # The capped 50 stands aside for each request, which counts as time it
    # was owed: it says it is short, and the busy step takes turns most of
    # the time (it gains little here); the requests stay under half their
    # p99 with no shim (eager 2.9 against 6.8 ms).
    plain = simulate(sim, 6, "m:matmul:0:0:noshim", "e:trainh:0:1:noshim",
                     f"r:{shape}:0:2:noshim")
    run = simulate(sim, 6, "m:matmul:50:0", "e:trainh:0:1", f"r:{shape}:0:2")
    assert within(run["m"].cardtime, 50), run.procs
    assert run["r"].latency[1] <= 0.6 * plain["r"].latency[1], (plain.procs, run.procs)


@pytest.mark.parametrize("neighbour", ["tiny", "eagerloop"])
@pytest.mark.parametrize("capped", ["trainv:50", "loop,k=300,k2=20,every=5,l=60,n=40,h=800:40"])
def test_a_capped_tenant_charged_in_full_beside_side_by_side_says_it_is_short(
        sim: Path, capped: str, neighbour: str) -> None:
    # A capped process that is host-bound, or whose kernels are uneven,
    # pays its intervals' elapsed time beside a side-by-side seat (no bound
    # per interval: pace_side.c), and they hold the neighbour's time slices:
    # by its charges it was at its cap while it did 7-14 % of its steps
    # alone (the step of a 0.6 ms kernel in twenty at 50; an outside loop,
    # a 300 us kernel in five, at 40), and never said it was short. Judged
    # by its launches at their own time, it says so, and gets what it gets
    # with its neighbour in turns (48.6 against 49.7, 30.6-31.2 against
    # 33.4-33.7: what a host-bound capped loop loses in turns, What is left).
    turns = simulate(sim, 8, f"a:{neighbour}:0:0:noside", f"n:{capped}:1")
    side = simulate(sim, 8, f"a:{neighbour}:0:0", f"n:{capped}:1")
    got, owed = statistics.mean(settled(side["n"].share)), statistics.mean(settled(turns["n"].share))
    assert got >= owed - 3.5, (got, owed, side.procs)
    assert side["n"].holds >= 1 and side["n"].side[6] > 0, side.procs
    cap = int(capped.rsplit(":", 1)[1])
    assert all(c <= cap + TOLERANCE for c in settled(side["n"].share)), side.procs


def test_a_capped_tenant_of_long_kernels_keeps_its_neighbours_in_turns(sim: Path) -> None:
    # The GPU lets a neighbour's work into every 13.7 ms kernel (its time
    # slice is 2 ms): the loop's time a launch is never its own beside one,
    # so it says it is short at every epoch and nobody goes side by side
    # (side by side, it got 20 % at a cap of 50). Every figure is the run's
    # without the option.
    for cap in (30, 50):
        turns = simulate(sim, 6, f"m:huge:{cap}:0", "e:trainh:0:1:noside")
        side = simulate(sim, 6, f"m:huge:{cap}:0", "e:trainh:0:1")
        # It says it is short at every epoch (its time a launch is never
        # learned: the neighbour's work is on the card in all its intervals).
        assert sum(side["m"].side[3:]) == side["m"].side[1] > 0, side.procs
        assert side["e"].side[0] == 0, side.procs
        assert without_side(side) == without_side(turns), (cap, turns.procs, side.procs)


# Busy loops the suite does not have (outside checks): 100 launches of 20 us
# kernels, 50 us apart, then 2 ms of host work after the step's sync; 40
# launches of 20 us kernels with a 300 us one in five, 60 us apart, 0.8 ms
# of host work.
OUTSIDE_LOOPS = ("loop,k=20,l=50,n=100,h=2000", "loop,k=300,k2=20,every=5,l=60,n=40,h=800")


@pytest.mark.parametrize("loop", OUTSIDE_LOOPS)
def test_outside_busy_loops_side_by_side_beside_a_40(sim: Path, loop: str) -> None:
    # With turns 55 and 52 % of their steps alone beside a 40, plain time
    # slicing 82 and 47; side by side 82 and 61, the 40 within its band.
    plain = statistics.mean(settled(
        simulate(sim, 8, "a:matmul:0:0:noshim", f"b:{loop}:0:1:noshim")["b"].share))
    turns = simulate(sim, 8, "a:matmul:40:0", f"b:{loop}:0:1:noside")
    side = simulate(sim, 8, "a:matmul:40:0", f"b:{loop}:0:1")
    assert within(side["a"].cardtime, 40), side.procs
    got = statistics.mean(settled(side["b"].share))
    assert got >= 0.97 * plain and got > statistics.mean(settled(turns["b"].share)) + 5, \
        (plain, turns.procs, side.procs)


@pytest.mark.parametrize("caps", [(30, 30), (40, 40), (10, 50), (20, 30)])
@pytest.mark.parametrize("program", ["eagerloop", "trainh"])
def test_two_capped_tenants_beside_a_side_by_side_one_each_get_their_cap(
        sim: Path, caps: Tuple[int, int], program: str) -> None:
    # Two capped ones share the card by turns; a tenant side by side beside
    # them halved each turn (a 50 beside a 10 and the eager loop got 17 %
    # while it was, 47.5 in the window after; two 40s 36.3): side by side
    # only beside one other process, and every figure is what it is without
    # the option (the capped ones then keep their caps: the test above).
    procs = (f"a:matmul:{caps[0]}:0", f"b:matmul:{caps[1]}:1", f"c:{program}:0:2")
    turns = simulate(sim, 6, *procs[:2], procs[2] + ":noside")
    side = simulate(sim, 6, *procs)
    assert side["c"].side[0] == 0, side.procs
    assert without_side(side) == without_side(turns), (turns.procs, side.procs)


def test_pace_sim_no_side_keeps_every_process_in_turns(sim: Path) -> None:
    # pace_sim --no-side: GPUSLICE_COMPUTE_SIDE=0 in every container, turns as
    # they were before side by side was the default: as the option noside on
    # each process; without either, the host-bound step goes side by side.
    procs = ("a:matmul:30:0", "e:trainh:0:1")
    none = simulate(sim, 4, *procs, side=False)
    assert none["e"].side == (), none.procs
    assert none.procs == simulate(sim, 4, procs[0], procs[1] + ":noside").procs
    assert simulate(sim, 4, *procs)["e"].side[0] > 0, none.procs


@pytest.mark.parametrize("cap", [30, 50])
def test_two_busy_uncapped_tenants_with_side_by_side_on_beside_a_capped_one_take_turns(
        sim: Path, cap: int) -> None:
    # The host-bound step went side by side, the eager loop stayed in turns
    # (its waits for its windows), and the capped 30 waited for the loop's
    # windows with the step's work in its own turns: 26.1-27.1, its credit
    # lost (simulated). Beside two others neither goes: as without the option.
    turns = simulate(sim, 6, f"a:matmul:{cap}:0", "e:trainh:0:1:noside", "f:eagerloop:0:2:noside")
    side = simulate(sim, 6, f"a:matmul:{cap}:0", "e:trainh:0:1", "f:eagerloop:0:2")
    assert side["e"].side[0] == side["f"].side[0] == 0, side.procs
    assert without_side(side) == without_side(turns), (turns.procs, side.procs)
    assert within(side["a"].cardtime, cap), side.procs


@pytest.mark.parametrize("program", ["eagerloop", "trainh"])
@pytest.mark.parametrize("cap", [30, 50])
def test_a_tenant_whose_gate_the_driver_refuses_fares_as_one_without_gates(
        sim: Path, program: str, cap: int) -> None:
    # Every close refused (the driver would not queue the wait): the process
    # waits for turns on the host, and its windows are not cut short as a
    # gated one's are (they were: 36 % of its steps beside a 50, 45 without).
    host = simulate(sim, 6, f"m:matmul:{cap}:0", f"e:{program}:0:1")
    refused = simulate(sim, 6, f"m:matmul:{cap}:0", f"e:{program}:0:1:gatefail")
    assert within(refused["m"].cardtime, cap), refused.procs
    mean = lambda r: sum(settled(r["e"].share)) / len(settled(r["e"].share))  # noqa: E731
    assert mean(refused) >= mean(host) - 1, (host.procs, refused.procs)


@pytest.mark.parametrize("program", ["eagerloop", "trainh", "tiny"])
def test_two_capped_tenants_beside_a_gated_one_each_get_their_cap(sim: Path, program: str) -> None:
    # A capped process that slept through a gated tenant's window counts its
    # wait from the window on: it had waited less than the gated one, which
    # closes its gate as its batch ends, and got window after window (20-24).
    run = simulate(sim, 6, "a:matmul:30:0", "b:matmul:30:2", f"e:{program}:0:1:gates")
    assert within(run["a"].cardtime, 30) and within(run["b"].cardtime, 30), run.procs


@pytest.mark.parametrize("program", ["eagerloop", "trainh", "tiny"])
def test_three_capped_tenants_beside_a_gated_one_each_get_their_cap(sim: Path,
                                                                    program: str) -> None:
    # A gated wait that outlasted the grace made the process doubt for good:
    # from then on its gate opened whenever its patience ran out, its batch
    # beside every holder (three 30s beside a gated eager loop got 22.8-28.3,
    # beside a gated matmul 15.5-24.3). It doubts now until the card comes
    # to it within the grace again.
    run = simulate(sim, 6, "a:matmul:30:0", "b:matmul:30:2", "c:matmul:30:3",
                   f"e:{program}:0:1:gates")
    assert all(within(run[p].cardtime, 30) for p in "abc"), run.procs
    if program == "eagerloop":
        # Two 45s: 34.6-43.1 before; a little short still (named in the docs).
        run = simulate(sim, 6, "a:matmul:45:0", "b:matmul:45:2", f"e:{program}:0:1:gates")
        assert all(41.5 <= s <= 47 for p in "ab" for s in settled(run[p].cardtime)), run.procs


@pytest.mark.parametrize("shape", ["request", "eager", "graphreq", "cnn"])
def test_requests_beside_a_gated_tenant_still_beat_plain_time_slicing(sim: Path, shape: str) -> None:
    # Goal 1 beside a capped 50 and a gated busy tenant: a gate stays closed
    # while a guest's (or high) work runs, so a request does not wait behind
    # a batch let out as it arrives.
    for busy in ("eagerloop", "trainh"):
        plain = simulate(sim, 6, f"r:{shape}:0:2:poisson:noshim", "m:matmul:0:0:noshim",
                         f"e:{busy}:0:1:noshim")["r"].latency[1]
        run = simulate(sim, 6, f"r:{shape}:0:2:poisson", "m:matmul:50:0", f"e:{busy}:0:1:gates")
        assert run["r"].latency[1] <= plain, (shape, busy, run["r"].latency, plain)


def test_a_gated_tenant_keeps_a_tenth_beside_a_holder_that_never_lets_go(sim: Path) -> None:
    # The watcher opens the gate after the grace (100 ms), then while the
    # patience left lasts: a forged turn or forged high work holds a gated
    # victim no more than one that waits on the host (a tenth, a half).
    for program in ("matmul", "eagerloop", "tiny"):
        run = simulate(sim, 6, f"e:{program}:0:1:gates", "f:forge:0:0")
        assert all(s >= 10 for s in settled(run["e"].share)), (program, run.procs)
        run = simulate(sim, 6, f"e:{program}:0:1:gates", "f:forgehigh:0:0")
        assert all(s >= 45 for s in settled(run["e"].share)), (program, run.procs)


@pytest.mark.parametrize("cap", [30, 50, 90])
def test_a_training_loop_holds_its_cap(sim: Path, cap: int) -> None:
    # Goal 4 for the suite's training loop: alone and beside a busy uncapped tenant.
    assert within(simulate(sim, 6, f"a:train:{cap}:0")["a"].share, cap)
    run = simulate(sim, 6, f"a:train:{cap}:0", "b:matmul:0:1")
    # Its steps end in a sync the turns do not see: at 90 it gets 86.7-88.6
    # (a shortfall named in docs/compute-limit.md).
    assert all(cap - 2 * TOLERANCE <= s <= cap + TOLERANCE for s in settled(run["a"].cardtime)), \
        run.procs


@pytest.mark.parametrize("cap", [30, 50, 70])
def test_a_host_bound_training_loop_holds_its_cap(sim: Path, cap: int) -> None:
    # Goal 4 for a training loop bound by its host (PyTorch's eager steps on
    # the H200, which got 22-23 at 30 there): it holds the card between its
    # launches too, so the gaps inside a busy period are charged and its work
    # is what the cap gives, though the card runs its kernels 45 % of the
    # time at most. The H200's shortfall is outside this model
    # (docs/compute-limit.md, What is left).
    alone = simulate(sim, 4, "a:trainh:0:0")["a"]
    assert all(35 <= c <= 55 for c in settled(alone.cardtime)), alone.cardtime
    run = simulate(sim, 6, f"a:trainh:{cap}:0")["a"]
    assert within(run.share, cap), run.share
    assert statistics.mean(settled(run.cardtime)) < 0.6 * cap, run.cardtime


@pytest.mark.parametrize("cap", [30, 70, 100])
def test_a_host_bound_loop_of_uneven_kernels_alone_holds_its_cap(sim: Path, cap: int) -> None:
    # Goal 4 for a training step bound by its host on the whole but not
    # kernel by kernel (a 0.6 ms GEMM every 20 launches: pace_sim's trainv).
    # Held to a queue of 250 us at every fence, it waited for each long
    # kernel where it would have launched the next ones meanwhile: 82 % of
    # its uncapped steps at 100, 0.82 of its cap at 30 and 70, as the H100's
    # training loop did (83-93 % at 100, 19.5-23.4 at 30). Alone on the card
    # it queues up to 1 ms and loses nothing at 100.
    alone = simulate(sim, 4, "a:trainv:0:0")["a"]
    assert all(40 <= c <= 55 for c in settled(alone.cardtime)), alone.cardtime
    run = simulate(sim, 6, f"a:trainv:{cap}:0")["a"]
    if cap == 100:
        assert all(s >= 97 for s in settled(run.share)), run.share
    else:
        assert within(run.share, cap), run.share


@pytest.mark.parametrize("cap", [30, 50])
@pytest.mark.parametrize("requests", ["eager:0:1", "graphreq:0:1:poisson", "cnn:0:1:poisson"])
def test_a_host_bound_loop_of_uneven_kernels_beside_requests_holds_its_cap(
        sim: Path, cap: int, requests: str) -> None:
    # Goal 4 beside another tenant: held to the short queue by its estimate
    # (launches in flight at a learned time that holds the host's gaps), the
    # training step waited for each long kernel: capped at 50 beside any
    # tenant it did 40 % of its uncapped steps (the H100's training loop at
    # 50 got 37-47 beside requests). Its fences show it host-bound, and it
    # keeps the queue it keeps alone; what it has in flight is short, so the
    # requests beside it lose nothing to it: p99 at most plain time slicing's.
    run = simulate(sim, 6, f"a:trainv:{cap}:0", f"r:{requests}")
    assert within(run["a"].share, cap), run.procs
    plain = simulate(sim, 6, "a:trainv:0:0:noshim", f"r:{requests}:noshim")["r"].latency[1]
    assert run["r"].latency[1] <= plain, (run["r"].latency, plain)


@pytest.mark.parametrize("program", ["trainh", "eagerloop"])
@pytest.mark.parametrize("cap", [30, 50])
def test_a_host_bound_loop_is_not_charged_for_the_requests_it_stands_aside_for(
        sim: Path, program: str, cap: int) -> None:
    # Goal 4 beside requests. A host-bound loop's queue runs dry between its
    # launches, the GPU goes to a request there, and the request's work ran
    # inside the intervals the loop's drain timed before it stood aside: it
    # was charged for them and got 45.9-48.7 % of its uncapped passes or
    # steps at 50, 27.5-30.0 at 30 (the H100's training loop at 50 beside
    # requests did 37.5-47.6 while charged 49.2-50.8). What the drain took
    # beyond its own queue is no longer charged to it.
    for requests in ("graphreq:0:1", "graphreq:0:1:poisson", "request:0:1"):
        run = simulate(sim, 6, f"a:{program}:{cap}:0", f"r:{requests}")
        assert within(run["a"].share, cap), (requests, run.procs)


def test_a_cost_per_wake_up_as_a_what_if_gives_the_h200s_figures(sim: Path) -> None:
    # pace_sim's wake=MS, a what-if: after the pacer kept it asleep 1 ms or
    # more within a launch, the host launches at half speed until it has lost
    # MS ms. At 4 ms the model gives what the H200 measured: a host-bound
    # training loop at 30 and 70 got 22-23 and 56-61, an eager loop beside a
    # 30 and a 50 0.82 and 0.52 x plain time slicing. bench/wake_cost found no
    # such cost on an H100 host that shows the same shortfalls
    # (docs/compute-limit.md, What is left): the model is kept to weigh one if
    # a host has it. Without the pacer (plain time slicing) nothing sleeps,
    # and nothing changes. Turns as they were then (no side by side).
    def work(*procs: str) -> float:
        run = simulate(sim, 6, *procs, side=False)
        return statistics.mean(settled(run[procs[-1].split(":")[0]].share))

    assert work("a:trainh:30:0:wake=0") >= 28
    assert 21 <= work("a:trainh:30:0:wake=4") <= 25
    assert 60 <= work("a:trainh:70:0:wake=4") <= 65
    plain = work("a:matmul:0:0:noshim", "b:eagerloop:0:1:noshim")
    assert plain == work("a:matmul:0:0:noshim", "b:eagerloop:0:1:noshim:wake=4")
    assert 0.85 <= work("a:matmul:30:0", "b:eagerloop:0:1:wake=4") / plain <= 0.95
    assert 0.5 <= work("a:matmul:50:0", "b:eagerloop:0:1:wake=4") / plain <= 0.6


# ------------------------------------------------------------ outside checks
# The pacer was judged on the suite's shapes (SHAPES; matmul, train and long
# kernels beside them; caps 30, 50 and 90). These check it on shapes and
# sizes the suite does not have, given to pace_sim by their figures: request
# tenants from a small GPU-bound MLP to 25 steps of 9 ms (a diffusion
# model's), neighbours from 120 us kernels to one 3 ms kernel in ten, caps
# 40 and 70. The bounds are the contract's; where a shape falls short, the
# shortfall is named here and in docs/compute-limit.md (What is left).
OUTSIDE_SHAPES = {
    "mlp": "req,k=90,l=8,n=12,h=20,r=60",  # 12 GPU-bound kernels, 1.1 ms of work
    "bert": "req,k=4,k2=9,l=9,n=400,h=40,r=15",  # 400 launches, host-bound
    "whisper": "req,k=20,k2=5,l=11,n=60,h=150,t=8-24,r=8",  # 8-24 tokens of 60 launches
    "twograph": "req,k=3200,l=25,n=2,h=30,r=40",  # two 3.2 ms graph replays
    "rpc": "req,k=30,l=6,n=3,h=5,r=400",  # 90 us of work, 400 a second
    "diffusion": "req,k=9000,l=20,n=1,h=50,t=20-30,r=1",  # 20-30 steps of 9 ms
}
OUTSIDE_NEIGHBOURS = {
    "k120": "loop,k=120,l=9",  # GPU-bound, kernels shorter than a fence
    "step": "loop,k=60,k2=8,l=14,n=120,h=300",  # a host-bound step, a sync each
    "k1100": "loop,k=1100,l=12",  # kernels of a millisecond
    "uneven": "loop,k=3000,k2=40,every=10,l=20,n=50,h=500",  # one 3 ms kernel in ten
}
OUTSIDE_CAPS = (40, 70)


def outside_plain(sim: Path, spec: str, arrival: str, neighbour: str) -> float:
    return simulate(sim, 6, f"l:{spec}:0:0{arrival}:noshim",
                    f"n:{neighbour}:0:1:noshim")["l"].latency[1]


@pytest.mark.parametrize("shape", sorted(OUTSIDE_SHAPES))
def test_outside_shapes_wait_no_longer_than_time_slicing(sim: Path, shape: str) -> None:
    # Goal 1 and the contract's floor: a normal tenant's p99 beside a capped
    # neighbour at most plain time slicing's (1 % for the simulator's
    # resolution), and a high one's never longer than with no shim at all.
    # The uneven loop's seat counts its launches at their average and hides
    # its 3 ms kernel: a guest back from idle queues on once its own fences
    # show it behind others, as high work does (pace.c); held to a short
    # queue, bert's 400 launches waited out a time slice at each of its
    # fences beside it (1.23-1.25 x plain time slicing, periodic).
    # The capped neighbour never above its cap in a window, by card time (a
    # host-bound step whose card is busy 93 % of its time alone does 43 % of
    # its steps alone at a card time of 40: the contract's measure is time).
    spec = OUTSIDE_SHAPES[shape]
    for arrival in ARRIVALS:
        for nname, neighbour in OUTSIDE_NEIGHBOURS.items():
            plain = outside_plain(sim, spec, arrival, neighbour)
            limit = 1.01 * plain
            for cap in OUTSIDE_CAPS:
                run = simulate(sim, 6, f"l:{spec}:0:0{arrival}", f"n:{neighbour}:{cap}:1")
                assert run["l"].latency[1] <= limit, (shape, arrival, nname, cap,
                                                      run["l"].latency, plain)
                assert all(c <= cap + TOLERANCE for c in settled(run["n"].cardtime)), (
                    shape, arrival, nname, cap, run["n"].cardtime)
            for cap in (0,) + OUTSIDE_CAPS:
                run = simulate(sim, 6, f"l:{spec}:0:0{arrival}:high", f"n:{neighbour}:{cap}:1")
                assert run["l"].latency[1] <= 1.02 * plain, (shape, arrival, nname, cap,
                                                             run["l"].latency, plain)


@pytest.mark.parametrize("shape", sorted(set(OUTSIDE_SHAPES) - {"diffusion"}))
def test_outside_high_priority_beside_short_kernels_waits_a_hand_over_at_most(
        sim: Path, shape: str) -> None:
    # Goal 3 where the hardware allows it: beside a neighbour whose kernels
    # are shorter than a fence, capped or not, high work waits one hand-over
    # at most (the bound the suite's shapes meet). Beside kernels of a
    # millisecond and more it waits out the GPU's time slice (2 ms) whatever
    # the pacer does, and diffusion's requests outlast the courtesy a
    # neighbour saves (a victim of forged high work keeps half its time,
    # Trust): both named in docs/compute-limit.md. The uncapped host-bound
    # step turns guest after its syncs; a guest now stands aside for high
    # work too (two graph replays beside it took 14.5 ms at p99, 6.5 alone).
    spec = OUTSIDE_SHAPES[shape]
    for arrival in ARRIVALS:
        alone = simulate(sim, 6, f"l:{spec}:0:0{arrival}:noshim")["l"].latency[1]
        for nname in ("k120", "step"):
            for cap in (0,) + OUTSIDE_CAPS:
                run = simulate(sim, 6, f"l:{spec}:0:0{arrival}:high",
                               f"n:{OUTSIDE_NEIGHBOURS[nname]}:{cap}:1")
                assert run["l"].latency[1] <= 1.2 * alone + 1.5, (
                    shape, arrival, nname, cap, run["l"].latency, alone)


# Busy loops that sync every step, beside requests of 225 ms (a diffusion
# model's 25 steps of 9 ms): a step's sync waits out a time slice of the
# request and more, longer than GS_PACE_GAP_NS.
SYNC_LOOPS = ("step", "train", "eagerloop")
DIFFUSION = OUTSIDE_SHAPES["diffusion"]


def sync_loop(name: str) -> str:
    return OUTSIDE_NEIGHBOURS.get(name, name)


def test_a_busy_loops_wait_in_its_sync_earns_it_no_first_service(sim: Path) -> None:
    # The shim sees the application's syncs (launch.c) and counts idling
    # from their return: a loop whose sync waited behind a request is no
    # guest after it, capped or not, beside normal or high requests (the
    # shim sees syncs, blocking copies and polls). With the waits unseen (a
    # poll that sleeps between looks, a spin on mapped memory) the wait
    # looks like idling and it turns guest, as every loop did before the
    # shim saw syncs.
    unseen = 0
    for loop in SYNC_LOOPS:
        for cap in (0, 40):
            for prio in ("", ":high"):
                for arrival in ARRIVALS:
                    req = f"l:{DIFFUSION}:0:0{arrival}{prio}"
                    run = simulate(sim, 6, req, f"n:{sync_loop(loop)}:{cap}:1")
                    assert run["n"].guests == 0, (loop, cap, prio, arrival, run.procs)
                    unseen += simulate(sim, 6, req,
                                       f"n:{sync_loop(loop)}:{cap}:1:unseensync")["n"].guests
    assert unseen > 0


def test_a_capped_loop_keeps_no_first_service_past_its_cap(sim: Path) -> None:
    # A new process starts with half a second of first service; a capped
    # loop that sleeps for its cap gives what is left of it up. Else, with
    # its syncs unseen, it turned guest on that leftover whenever a sync
    # waited out a request: 10 stretches in 5 s beside requests of 225 ms
    # that came 5 times. Now at most once a request it waited behind.
    for loop in SYNC_LOOPS:
        for prio in ("", ":high"):
            run = simulate(sim, 6, f"l:{DIFFUSION}:0:0{prio}",
                           f"n:{sync_loop(loop)}:40:1:unseensync")
            assert run["n"].guests <= 5, (loop, prio, run.procs)


@pytest.mark.parametrize("nname", ["k120", "k1100", "step"])
def test_outside_neighbours_keep_their_cap_beside_requests(sim: Path, nname: str) -> None:
    # Goal 4 beside every outside shape but diffusion: the capped loop's
    # throughput within 2 points of its cap, less what the requests claimed
    # (the suite's rule: the time a request was open and the hand-back after
    # it, 1.5 points for the hand-overs). Beside diffusion's requests of
    # 225 ms a 40 got 27-32 of the 65-77 % they left: it stood aside for each
    # longer than its bucket holds credit (20 ms), named in docs. Above, by
    # card time (the test before this one says why).
    neighbour = OUTSIDE_NEIGHBOURS[nname]
    for shape in sorted(set(OUTSIDE_SHAPES) - {"diffusion"}):
        for arrival in ARRIVALS:
            for cap in OUTSIDE_CAPS:
                run = simulate(sim, 6, f"l:{OUTSIDE_SHAPES[shape]}:0:0{arrival}",
                               f"n:{neighbour}:{cap}:1")
                per_request = 1 + ASIDE_MS / max(run["l"].latency[0], 0.1)
                claimed = statistics.mean(settled(run["l"].open)) * per_request
                shares = settled(run["n"].share)
                assert all(c <= cap + TOLERANCE for c in settled(run["n"].cardtime)), (
                    shape, arrival, cap, run["n"].cardtime)
                assert statistics.mean(shares) >= min(cap, 100 - claimed) - TOLERANCE - 1.5, (
                    shape, arrival, nname, cap, shares, claimed)


@pytest.mark.parametrize("cap", [30, 40])
@pytest.mark.parametrize("neighbour", ["step", "uneven"])
@pytest.mark.parametrize("shape,arrival", [("mlp", ""), ("bert", ":poisson"), ("twograph", ""),
                                           ("rpc", ":poisson")])
def test_a_capped_tenant_of_uneven_kernels_beside_side_by_side_requests_keeps_its_cap(
        sim: Path, shape: str, arrival: str, neighbour: str, cap: int) -> None:
    # Beside a side-by-side seat a capped process is charged at most what its
    # launches take alone; held to their average, an interval of its longer
    # kernels paid for a mean one while a shorter one paid its own: the step
    # (60 and 8 us kernels in turn) at 40 ran at 43.2 by card time beside
    # graph replays, one 3 ms kernel in ten at 30 up to 67.9 beside mlp
    # (pace_side.c). Outside shapes: none of these is the suite's.
    run = simulate(sim, 6, f"l:{OUTSIDE_SHAPES[shape]}:0:0{arrival}",
                   f"n:{OUTSIDE_NEIGHBOURS[neighbour]}:{cap}:1")
    assert run["l"].side[0] > 0, run.procs
    assert all(c <= cap + TOLERANCE for c in settled(run["n"].cardtime)), run.procs


def test_a_program_given_by_its_figures_runs_as_given(sim: Path) -> None:
    # The outside checks' shapes are read from the command line: a request
    # of 12 kernels of 90 us is 1.1 ms of GPU work; a malformed or
    # out-of-range figure is refused with the usage line.
    run = simulate(sim, 4, "l:req,k=90,l=8,n=12,h=20,r=60:0:0:noshim")
    assert 1.08 <= run["l"].latency[0] <= 1.3, run["l"].latency
    loop = simulate(sim, 3, "n:loop,k=120,l=9:0:0")
    assert all(99 <= c <= 100.5 for c in settled(loop["n"].cardtime)), loop["n"].cardtime
    for bad in ("req", "req,k=0", "req,zz=1", "loop,k=90,r=5", "req,k=90,t=5-2", "mat,k=90",
                ",", ",,"):
        res = subprocess.run([str(sim), "3", f"l:{bad}:0:0"], capture_output=True, text=True)
        assert res.returncode == 2 and "bad process" in res.stderr and "req,..." in res.stderr, (
            bad, res.stderr)
