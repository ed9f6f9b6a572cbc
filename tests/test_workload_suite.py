"""The workload suite's pure parts (bench/suite.py), bench/compute_latency's plan and
verdicts, and bench/compute_share --suite's goal-2 rows, on synthetic timestamps.

No torch: bench/workloads.py and bench/compute_prog.py need a GPU and are
not loaded. bench/ is no package: its modules are loaded from their paths.
"""
import gzip
import importlib.machinery
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))  # compute_latency imports compute_run, compute_table, suite


def load(name: str, path: Path):
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    spec = importlib.util.spec_from_loader(name, loader)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up there
    loader.exec_module(mod)
    return mod


suite = load("suite", BENCH / "suite.py")
ct = load("compute_table", BENCH / "compute_table.py")
cr = load("compute_run", BENCH / "compute_run.py")
cl = load("compute_latency", BENCH / "compute_latency")
cs = load("compute_share", BENCH / "compute_share")


# --- arrivals --------------------------------------------------------------

def test_periodic_arrivals_are_evenly_spaced_half_a_period_in():
    t = suite.arrival_times("periodic", 40.0, 1.5, seed=1)
    assert len(t) == 60
    assert t[0] == pytest.approx(0.0125)
    assert all(b - a == pytest.approx(0.025) for a, b in zip(t, t[1:]))
    assert t[-1] < 1.5
    assert suite.arrival_times("periodic", 3.0, 2.0, seed=1) == pytest.approx([1 / 6, 0.5,
                                                                              5 / 6, 7 / 6,
                                                                              1.5, 11 / 6])


def test_poisson_arrivals_are_seeded_and_have_the_rate():
    a = suite.arrival_times("poisson", 200.0, 50.0, seed=7)
    assert a == suite.arrival_times("poisson", 200.0, 50.0, seed=7)
    assert a != suite.arrival_times("poisson", 200.0, 50.0, seed=8)
    assert all(0 <= x < 50.0 for x in a) and a == sorted(a)
    assert len(a) / 50.0 == pytest.approx(200.0, rel=0.03)  # 10000 expected: sd 1 %
    gaps = [b - x for x, b in zip(a, a[1:])]
    assert statistics.mean(gaps) == pytest.approx(1 / 200.0, rel=0.03)
    # Exponential: the sd of the gaps equals their mean (periodic: 0).
    assert statistics.pstdev(gaps) == pytest.approx(1 / 200.0, rel=0.05)


@pytest.mark.parametrize("kind,rate,seconds", [("uniform", 1.0, 1.0), ("poisson", 0.0, 1.0),
                                               ("periodic", -1.0, 1.0)])
def test_bad_arrivals_are_refused(kind, rate, seconds):
    with pytest.raises(ValueError):
        suite.arrival_times(kind, rate, seconds, seed=1)


def test_decode_sizes_are_seeded_tokens_in_range_and_others_one():
    s = suite.request_sizes("decode", 500, seed=3)
    assert s == suite.request_sizes("decode", 500, seed=3)
    assert min(s) == suite.DECODE_TOKENS[0] and max(s) == suite.DECODE_TOKENS[1]
    assert suite.request_sizes("eager-s", 4, seed=3) == [1, 1, 1, 1]


def test_a_phase_is_the_same_requests_in_every_process():
    p = suite.Phase("decode", "poisson", "heavy", at=3.0, seconds=2.0)
    q = suite.from_json(suite.to_json([p]))[0]
    assert q == p and q.requests() == p.requests() and q.rate == 4.0
    # Each (shape, arrival, load) has its own seed: two phases do not share arrivals.
    seeds = {suite.Phase(s, a, ld, 0, 1).seed for s in suite.SHAPES for a in suite.ARRIVALS
             for ld in suite.LOADS}
    assert len(seeds) == len(suite.SHAPES) * len(suite.ARRIVALS) * len(suite.LOADS)


def test_rates_are_light_then_heavy_and_graph_s_is_offered_eager_s_rates():
    for shape in suite.SHAPES.values():
        lo, hi = shape.rates
        assert 0 < lo < hi
        # Phases long enough for requests to report on: several even at the light rate.
        assert lo * shape.phase_s >= 4
    assert suite.SHAPES["graph-s"].rates == suite.SHAPES["eager-s"].rates


def test_phases_run_back_to_back_after_a_settling_phase():
    ph = suite.phases(["mm2", "decode"])
    assert not ph[0].judged and ph[0].at == 0 and ph[0].seconds == 1.0
    judged = [p for p in ph if p.judged]
    assert len(judged) == 2 * len(suite.ARRIVALS) * len(suite.LOADS)
    for a, b in zip(ph, ph[1:]):
        assert b.at == pytest.approx(a.at + a.seconds)
    assert suite.length(ph) == pytest.approx(1 + 4 * 1.5 + 4 * 2.0)
    with pytest.raises(ValueError):
        suite.phases(["bert"])


# --- the plan and its device-time budget -------------------------------------

@pytest.mark.parametrize("part", ["1", "2"])
def test_each_part_fits_the_device_budget(part):
    args = cl.parse(["--part", part])
    plain, under_mps = cl.build(args.shapes, args.arrivals, args.neighbours, args.rows, True)
    total = cl.estimate(plain, under_mps, args.lead)
    assert total <= cr.BUDGET_S
    names = [sc.name for sc in plain + under_mps]
    for must in ("alone", "ref 1 matmul", "ref 2 matmul", "beside matmul 30", "beside matmul 90",
                 "beside matmul 30+30", "L50 beside matmul 50", "high beside matmul 50",
                 "high beside matmul none", "MPS 50/50", "MPS 40/30/30", "baseline matmul"):
        assert must in names
    other = "train" if part == "1" else "bigmm"
    assert f"ref 1 {other}" in names and f"beside {other} 50" in names
    # Runs follow one another: each starts after the one before ended and its own setup.
    runs = plain + under_mps
    for a, b in zip(runs, runs[1:]):
        assert b.start_at >= a.start_at + a.windows(0) + cr.TAIL_S + cr.GAP_S + b.lead(0) - 1e-9
    # Phases last 1.5-2.5 s and a run's windows cover its phases.
    for sc in runs:
        for p in sc.tenants[0].phases:
            assert not p.judged or 1.5 <= p.seconds <= 2.5
        assert sc.windows(0) >= suite.length(sc.tenants[0].phases)


def test_tenants_set_up_early_but_mps_clients_in_a_lead_after_the_daemon():
    args = cl.parse(["--part", "2"])
    plain, under_mps = cl.build(args.shapes, args.arrivals, args.neighbours, args.rows, True)
    daemon_at, _ = cl.schedule(plain, under_mps, args.lead)
    assert all(sc.early and sc.lead(99.0) == cr.EARLY_LEAD_S for sc in plain)
    # An MPS client connects at its setup: the daemon must be up by then, and the lead
    # covers L's setup (a context, the encoder, each shape) with room to spare.
    need = cl.SETUP_CONTEXT_S + sum(cl.SETUP_SHAPE_S[s] for s in args.shapes)
    for sc in under_mps:
        assert not sc.early and sc.lead(0.0) > need
        assert sc.start_at - sc.lead(0.0) > daemon_at


def test_consecutive_scenarios_pin_disjoint_cpus(monkeypatch):
    monkeypatch.setattr(cr.os, "sched_getaffinity", lambda pid: set(range(16)))
    args = cl.parse(["--part", "1"])
    plain, _ = cl.build(args.shapes, args.arrivals, args.neighbours, args.rows, False)
    pinned = [{cr.tenant_cpu(i, sc, t) for t in sc.tenants} for i, sc in enumerate(plain)]
    for i, (a, b) in enumerate(zip(pinned, pinned[1:])):
        assert None not in a and not a & b, (plain[i].name, a, plain[i + 1].name, b)
    # Too few CPUs for two blocks: one CPU a tenant, or none pinned.
    monkeypatch.setattr(cr.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert cr.tenant_cpu(1, plain[0], plain[0].tenants[0]) == 3


def test_both_parts_cover_every_shape_and_all_is_over_budget():
    shapes = set(cl.PARTS["1"][0]) | set(cl.PARTS["2"][0])
    assert shapes == set(suite.SHAPES)
    args = cl.parse(["--part", "all"])
    plain, under_mps = cl.build(args.shapes, args.arrivals, args.neighbours, args.rows, True)
    assert cl.estimate(plain, under_mps, args.lead) > cr.BUDGET_S


def test_subsets_shrink_the_plan():
    args = cl.parse(["--quick", "--rows", "beside", "--no-mps"])
    plain, under_mps = cl.build(args.shapes, args.arrivals, args.neighbours, args.rows, False)
    assert under_mps == []
    names = [sc.name for sc in plain]
    assert "high beside matmul 50" not in names and "L50 beside matmul 50" not in names
    assert "beside matmul 50" in names and "ref 2 matmul" in names
    assert {p.arrival for sc in plain for p in sc.tenants[0].phases} <= {"poisson", ""} or all(
        p.arrival == "poisson" for sc in plain for p in sc.tenants[0].phases)
    with pytest.raises(SystemExit):
        cl.parse(["--neighbours", "resnet"])


@pytest.mark.parametrize("flag,suffix,off,on", [
    ("--gates", " gated", cr.GATES_OFF, cr.GATES_ON),
    ("--turns", " turns", {}, cr.SIDE_OFF)])
def test_gates_or_turns_run_each_uncapped_normal_tenants_scenario_twice_and_judge_both(
        flag, suffix, off, on):
    args = cl.parse(["--part", "1", "--no-mps", flag])
    assert getattr(args, flag[2:])
    plain, _ = cl.build(args.shapes, args.arrivals, args.neighbours, args.rows, False,
                        **{flag[2:]: True})
    names = [sc.name for sc in plain]
    for base in ("beside matmul 30", "beside matmul 30+30", "beside train 50",
                 "high beside matmul none"):
        i = names.index(base)
        assert names[i + 1] == f"{base}{suffix}"
        for sc, want in ((plain[i], off), (plain[i + 1], on)):
            for t in sc.tenants:
                assert t.env == (want if t.shim else {}), (sc.name, t.key)
    # No tenant there waits for turns: a capped L, a high L beside a capped
    # neighbour, a reference.
    for name in ("L50 beside matmul 50", "high beside matmul 50", "ref 1 matmul", "alone"):
        assert name in names and f"{name}{suffix}" not in names
        assert all(not t.env for t in plain[names.index(name)].tenants)
    # The twin is judged against the same plain time slicing run.
    p99 = {"ref 1 matmul": 5.0, "ref 2 matmul": 9.0, "ref 1 train": 6.0, "alone": 1.0,
           "beside matmul 50": 4.0, f"beside matmul 50{suffix}": 6.0}
    fill(plain, p99)
    rows, _ = rows_of(plain)
    got = {(r[0], r[1], r[2]): r for r in rows}
    key = next(k for k in got if k[2] == "beside matmul 50")
    assert got[key][7] == "0.80" and got[key][-2] == ct.PASS
    twin = got[(key[0], key[1], f"beside matmul 50{suffix}")]
    assert twin[7] == "1.20" and twin[-2] == ct.FAIL
    # Without the flag, nothing is doubled and nothing is steered.
    plain, _ = cl.build(args.shapes, args.arrivals, args.neighbours, args.rows, False)
    assert not any(sc.name.endswith(suffix) or any(t.env for t in sc.tenants) for sc in plain)
    # Two doubling flags at once: one line, exit 2.
    with pytest.raises(SystemExit) as e:
        cl.parse(["--gates", "--turns"])
    assert e.value.code == 2


def test_an_ab_runs_each_shim_scenario_with_both_builds_alternating_and_compares_them(
        tmp_path):
    lib = tmp_path / "libgpuslice.so"
    lib.write_bytes(b"")
    args = cl.parse(["--part", "1", "--ab", str(lib)])
    plain, under_mps = cl.build(args.shapes, args.arrivals, args.neighbours, args.rows, True,
                                other_shim=str(lib))
    names = [sc.name for sc in plain]
    twins = [n for n in names if n.endswith(cl.AB_SUFFIX)]
    assert "beside matmul 30 B" in twins and "high beside matmul none B" in twins
    firsts = []
    for twin in twins:
        a, b = names.index(twin[:-len(cl.AB_SUFFIX)]), names.index(twin)
        assert abs(a - b) == 1, (twin, names)
        firsts.append(a < b)
        for t in plain[b].tenants:
            assert t.env == ({"LD_PRELOAD": str(lib)} if t.shim else {}), (twin, t.key)
        assert all(not t.env for t in plain[a].tenants)
    # The first of each pair alternates: a drift over the command falls on both builds.
    assert firsts[:4] == [True, False, True, False]
    # References, the alone run, baselines and MPS runs have no shim: never doubled.
    for name in ("ref 1 matmul", "alone", "baseline matmul"):
        assert name in names and f"{name}{cl.AB_SUFFIX}" not in names
    assert under_mps and not any(sc.name.endswith(cl.AB_SUFFIX) for sc in under_mps)
    # Judged alike, and compared: B twice as fast, its capped neighbours as well kept.
    p99 = {"ref 1 matmul": 5.0, "ref 2 matmul": 9.0, "ref 1 train": 6.0, "alone": 1.0}
    p99.update({n: 4.0 for n in names if n not in p99})
    p99.update({n: 2.0 for n in twins})
    fill(plain + under_mps, p99)
    rows, meta = rows_of(plain + under_mps)
    got = {(r[1], r[2]): r for r in rows}
    key = next(k for k in got if k[1] == "beside matmul 50")
    assert got[key][7] == "0.80" and got[(key[0], "beside matmul 50 B")][7] == "0.40"
    line = cl.ab_line(meta["ab"])
    n = sum(sum(p.judged for p in sc.tenants[0].phases) for sc in plain if sc.name in twins)
    assert line.startswith(f"A/B (A: this tree's shim, B: --ab's), {n} phases run with both: "
                           "B's p99 / A's median 0.50 (0.50-0.50; B faster in "), line
    windows = sum(len(ca) for _, _, ca, _, _ in meta["ab"])
    assert windows and line.endswith(f"windows under cap - 2 A 0 B 0 of {windows}"), line
    # A build whose neighbours fall short: counted against it alone.
    short = [(a, b, ca, [c - 5 for c in cb], caps) for a, b, ca, cb, caps in meta["ab"]]
    assert cl.ab_line(short).endswith(f"windows under cap - 2 A 0 B {windows} of {windows}")
    # Both doubling flags at once, or a build that is not there: one line, exit 2.
    with pytest.raises(SystemExit) as e:
        cl.parse(["--ab", str(lib), "--gates"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        cl.parse(["--ab", str(tmp_path / "missing.so")])
    assert e.value.code == 2
    assert cl.parse(["--ab", str(tmp_path / "missing.so"), "--plan"]).plan


def test_plan_prints_without_running(capsys):
    assert cl.main(["--plan", "--part", "2"]) == 0
    out = capsys.readouterr().out
    assert "estimated" in out and "decode" in out and "EXCEEDED" not in out


# --- verdicts ----------------------------------------------------------------

def test_percentile_and_latency_verdicts():
    v = [float(i) for i in range(1, 101)]
    assert ct.pct(v, 50) == 51.0 and ct.pct(v, 99) == 99.0 and ct.pct(v, 100) == 100.0
    assert ct.latency_verdict(10.0, 10.0, 1.0) == ct.PASS
    assert ct.latency_verdict(10.01, 10.0, 1.0) == ct.FAIL
    assert ct.latency_verdict(11.9, 10.0, 1.2) == ct.PASS
    assert ct.latency_verdict(1.0, None, 1.0) == ct.ERROR


def test_neighbour_band_is_its_cap_or_what_is_left():
    assert ct.neighbour_band(50, 10) == (48, 52)
    assert ct.neighbour_band(90, 30) == (68, 92)     # L held 30: 70 left
    assert ct.neighbour_band(30, 20 + 30) == (28, 32)  # L and the other 30
    card = [99.0, 88.5, 69.0, 91.9]
    ok, _ = ct.band_verdict(card, 90, [0.0, 5.0, 30.0, 8.0], [1, 2, 3])
    assert ok
    ok, why = ct.band_verdict(card, 90, [0.0, 5.0, 20.0, 8.0], [1, 2, 3])
    assert not ok and "window 2" in why  # 69 < min(90, 80) - 2
    assert not ct.band_verdict([0, 92.5], 90, [0, 0], [1])[0]


def test_held_windows_spread_spans_and_never_count_twice():
    assert ct.held_windows([(0.5, 1.5), (1.9, 2.0)], 3) == pytest.approx([50.0, 60.0, 0.0])
    # Overlapping estimates: the later span counts from the earlier one's end.
    assert ct.held_windows([(0.0, 0.3), (0.2, 0.4)], 1) == pytest.approx([40.0])


def test_busy_tenant_verdict_needs_the_reference_rate_and_its_share():
    card = [10.0, 52.0, 49.0, 50.5]
    ok, why = ct.busy_tenant_verdict(300.0, 292.0, card, 50)
    assert ok and "1.03" in why
    assert not ct.busy_tenant_verdict(290.0, 292.0, card, 50)[0]   # slower than no product
    assert not ct.busy_tenant_verdict(300.0, 292.0, [50, 52, 47.9], 50)[0]  # short of 100-cap
    assert not ct.busy_tenant_verdict(300.0, 0.0, card, 50)[0]


# --- compute_latency's analysis on a synthetic run ---------------------------

BASE_RATE = 1000.0  # the neighbour's units/s alone


def fake_busy(seconds: float, share: float) -> List[float]:
    """A busy loop's done_s: units back to back at BASE_RATE while it runs, `share` of the time."""
    out: List[float] = []
    w = 0
    while w < seconds:
        n = int(round(BASE_RATE * share))
        out += [w + (i + 1) / BASE_RATE for i in range(n)]
        w += 1
    return out


def fake_requests(t, p99_ms: float, unanswered: int = 0) -> dict:
    """L's result: every request answered after 0.5 ms, but 1 in 10 after p99_ms (its p99)."""
    arrival, begin, end, phase, size, done, span = [], [], [], [], [], [], []
    for i, p in enumerate(t.phases):
        for j, (at, sz) in enumerate(p.requests()):
            a = p.at + at
            lat = (p99_ms if j % 10 == 9 else 0.5) / 1e3
            arrival.append(a)
            begin.append(a)
            end.append(a + lat)
            phase.append(i)
            size.append(sz)
            done.append(a + lat)
            span.append(0.0004)
    for k in range(len(end) - unanswered, len(end)):
        begin[k] = end[k] = None
    n = len(end) - unanswered
    return {"phases": json.loads(suite.to_json(t.phases)), "phase": phase, "arrival_s": arrival,
            "begin_s": begin, "end_s": end, "size": size, "done_s": done[:n],
            "span_s": span[:n]}


def fill(plan, p99: Dict[str, float], share: Optional[Dict[str, float]] = None,
         unanswered: int = 0) -> None:
    """Give every tenant a result, as compute_prog would write it, started on time."""
    at = 1000.0
    for sc in plan:
        secs = sc.windows(0)
        for t in sc.tenants:
            d = {"setup_monotonic": at - 3, "warmup_monotonic": at - 3, "start_monotonic": at,
                 "end_monotonic": at + secs + 0.3, "late_s": 0.0, "setup_s": 2.0, "seconds": secs + 0.25}
            if t.program == "requests":
                d.update(fake_requests(t, p99.get(sc.name, 1.0), unanswered))
            else:
                cap = t.cap if t.cap is not None and t.shim else None
                s = (share or {}).get(sc.name, 1.0 if cap is None else cap / 100)
                d["done_s"] = fake_busy(secs + 0.25, s)
            t.data = d
        at += secs + 10


def synthetic(part: str = "1"):
    args = cl.parse(["--part", part])
    plain, under_mps = cl.build(args.shapes, args.arrivals, args.neighbours, args.rows, True)
    return plain + under_mps


def rows_of(plan):
    rows, meta = cl.analyse(plan, cr.Clocks([]))
    return rows, meta


def test_every_row_passes_when_capped_neighbours_keep_latency_below_plain_time_slicing():
    plan = synthetic()
    p99 = {"ref 1 matmul": 5.0, "ref 2 matmul": 9.0, "ref 1 train": 6.0, "alone": 1.0}
    p99.update({sc.name: 1.1 for sc in plan if sc.name.startswith("high")})
    fill(plan, p99)
    rows, meta = rows_of(plan)
    lines, ok = cl.verdicts(rows, meta["goals"])
    results = {r[-2] for r in rows}
    assert ok, [r for r in rows if r[-2] not in ("PASS", "ref", "report")][:3]
    assert results <= {ct.PASS, "ref"}
    # One row per scenario with requests and judged phase.
    n_phases = {sc.name: sum(p.judged for p in sc.tenants[0].phases) for sc in plan
                if sc.tenants[0].program == "requests"}
    assert len(rows) == sum(n_phases.values())
    beside = [r for r in rows if r[2] == "beside matmul 50"]
    assert beside and all(r[7] == f"{1.0 / 5.0:.2f}" for r in beside)  # p99 / ts
    assert all(r[8] == "1.00" for r in beside)  # MPS got the same p99 here
    assert any(line.startswith("goal 1:") for line in lines)
    assert any("goal 3" in line for line in lines)
    # The table prints.
    assert "beside matmul 30+30" in cl.table(rows)


def test_warm_rows_give_l_beside_a_spinning_cpu_and_an_awake_card_against_alone_and_ts():
    # Not by default; with --rows warm, next to alone (the host drifts over a command).
    assert not [sc for sc in synthetic() if sc.name.startswith("ref 1 spin")]
    args = cl.parse(["--shapes", "cnn", "--neighbours", "matmul", "--rows", "beside,warm"])
    plan = cl.build(args.shapes, args.arrivals, args.neighbours, args.rows, False)[0]
    names = [sc.name for sc in plan]
    assert names[names.index("alone") + 1:names.index("alone") + 3] == [
        "ref 1 spin", "ref 1 awake"]
    warm = [sc for sc in plan if sc.name in ("ref 1 spin", "ref 1 awake")]
    assert all([(t.program, t.shim) for t in sc.tenants] == [
        ("requests", False), (sc.name.split()[-1], False)] for sc in warm)
    # Reported against plain time slicing (the ratio column) and alone (the note),
    # never judged: L faster beside a spinning CPU than alone is the host's doing.
    fill(plan, {"alone": 2.0, "ref 1 spin": 1.5, "ref 1 awake": 3.0, "ref 1 matmul": 2.5,
                "ref 2 matmul": 5.0})
    rows, meta = rows_of(plan)
    spin = [r for r in rows if r[2] == "ref 1 spin"]
    awake = [r for r in rows if r[2] == "ref 1 awake"]
    assert spin and awake and len(spin) == len(awake) == sum(
        p.judged for p in warm[0].tenants[0].phases)
    assert all(r[-2] == "ref" and r[7] == "0.60" and "p99/alone 0.75" in r[-1] for r in spin)
    assert all(r[-2] == "ref" and r[7] == "1.20" and "p99/alone 1.50" in r[-1] for r in awake)
    assert not any("spin" in label for _, label in meta["goals"]["goal 1"])
    assert "--rows warm" not in cl.plan_text(plan, [], 45.0)  # a plan names its runs
    assert "ref 1 awake" in cl.plan_text(plan, [], 45.0)


def test_ref_again_runs_each_reference_after_its_rows_and_judges_against_their_mean():
    args = cl.parse(["--part", "1", "--no-mps", "--ref-again"])
    plan = cl.build(args.shapes, args.arrivals, args.neighbours, args.rows, False,
                    ref_again=args.ref_again)[0]
    names = [sc.name for sc in plan]
    refs = [n for n in names if n.startswith("ref ") and not n.endswith(" again")]
    assert refs and [n for n in names if n.endswith(" again")] == [f"{n} again" for n in refs]
    # Each again-run comes after every row it judges.
    assert min(names.index(f"{n} again") for n in refs) > max(
        i for i, n in enumerate(names) if n.startswith(("beside", "L50", "high")))
    assert cl.parse(["--ref-again", "--plan"]).ref_again and not cl.parse([]).ref_again
    # 5.5 ms beside a 50: over the first reference (5.0), under the two's mean (6.0).
    p99 = {"ref 1 matmul": 5.0, "ref 1 matmul again": 7.0, "ref 2 matmul": 9.0,
           "ref 2 matmul again": 9.0, "ref 1 train": 6.0, "ref 1 train again": 6.0,
           "alone": 1.0, "beside matmul 50": 5.5}
    p99.update({sc.name: 1.1 for sc in plan if sc.name.startswith("high")})
    fill(plan, p99)
    rows, _ = rows_of(plan)
    beside = [r for r in rows if r[2] == "beside matmul 50"]
    assert beside and all(r[-2] == ct.PASS and r[7] == f"{5.5 / 6.0:.2f}"
                          and "refs 5.00/7.00" in r[-1] for r in beside)
    once = [sc for sc in plan if not sc.name.endswith(" again")]
    fill(once, p99)
    assert all(r[-2] == ct.FAIL and r[7] == "1.10" and "refs" not in r[-1]
               for r in rows_of(once)[0] if r[2] == "beside matmul 50")


def test_rows_fail_on_latency_over_plain_time_slicing_or_a_cap_not_held():
    plan = synthetic()
    p99 = {"ref 1 matmul": 5.0, "ref 2 matmul": 9.0, "ref 1 train": 6.0, "alone": 1.0,
           "beside matmul 90": 5.5, "high beside matmul 50": 1.3, "high beside matmul none": 1.1}
    fill(plan, p99, share={"L50 beside matmul 50": 0.45})
    rows, meta = rows_of(plan)
    res = {(r[2], r[0], r[1]): r[-2] for r in rows}
    assert all(v == ct.FAIL for (name, _, _), v in res.items() if name == "beside matmul 90")
    assert all(v == ct.FAIL for (name, _, _), v in res.items()
               if name == "high beside matmul 50")  # 1.3 > 1.2 x 1.0
    assert all(v == ct.PASS for (name, _, _), v in res.items()
               if name == "high beside matmul none")
    bad = [r for r in rows if r[2] == "L50 beside matmul 50"]
    assert all(r[-2] == ct.FAIL and "(cap FAIL)" in r[10] for r in bad)
    # The note says what plain time slicing left a busy loop beside the same
    # requests (ref 1 matmul: the whole card, here).
    assert all("(plain time slicing left an uncapped matmul 100.0-100.0)" in r[-1] for r in bad)
    assert not cl.verdicts(rows, meta["goals"])[1]


def test_a_capped_neighbours_cell_gives_what_the_pacer_charged_beside_its_card_time():
    # run_all sampled the regions: the 50 beside requests was charged 47 %
    # of each second while its units held the card 50 %.
    plan = synthetic()
    fill(plan, {"ref 1 matmul": 5.0, "ref 2 matmul": 9.0, "ref 1 train": 6.0, "alone": 1.0})
    for sc in plan:
        for t in sc.tenants:
            if t.cap is not None and t.shim and t.program != "requests":
                at = t.data["start_monotonic"]
                t.data["charges"] = [(at - 0.05 + i / 10, int(0.47e8 * i))
                                     for i in range(10 * (sc.windows(0) + 1))]
    rows, _ = rows_of(plan)
    beside = [r for r in rows if r[2] == "beside matmul 50"]
    assert beside and all("matmul 50: card 50.0-50.0 thr 50.0-50.0 charged 47.0-47.0" in r[10]
                          for r in beside), beside[0][10]
    # No samples (a run without the repository on the path): no charges in the cell.
    fill(plan, {"ref 1 matmul": 5.0, "ref 2 matmul": 9.0, "ref 1 train": 6.0, "alone": 1.0})
    assert all("charged" not in r[10] for r in rows_of(plan)[0])


def test_run_all_samples_the_charges_of_the_running_scenarios_shim_tenants(tmp_path,
                                                                          monkeypatch):
    from test_region_reader import write_region
    now = time.monotonic()
    running = cr.Scenario("single", [cr.Tenant("00-a", "matmul", 30),
                                     cr.Tenant("00-b", "matmul", None, shim=False)],
                          start_at=now - 1.0)
    later = cr.Scenario("single", [cr.Tenant("01-c", "matmul", 30)], start_at=now + 60)
    for key, charged in (("00-a", 123), ("00-b", 7), ("01-c", 9)):
        (tmp_path / key / "state").mkdir(parents=True)
        write_region(tmp_path / key / "state" / "region",
                     devices=(("GPU-aaaa", 0, 0, 30, charged, 0),))
    (tmp_path / "00-x" / "state").mkdir(parents=True)  # no region yet: skipped
    running.tenants.append(cr.Tenant("00-x", "matmul", 50))
    samples: Dict[str, list] = {}
    read = cr.region_reader()
    assert read is not None
    cr.sample_charges([running, later], 4, tmp_path, read, samples)
    # Only the running scenario's tenants under the shim, and only those with a region.
    assert list(samples) == ["00-a"] and samples["00-a"][0][1] == 123
    assert abs(samples["00-a"][0][0] - now) < 5


class ShellTenants(cr.Launcher):
    """Starts each tenant as a shell line of its program's name, not compute_prog.py."""

    def start(self, t, cmd, env, folder, log):
        return subprocess.Popen(["sh", "-c", t.program], stdout=log, stderr=subprocess.STDOUT)


def test_run_all_stops_when_every_finished_tenant_failed_and_shows_the_failed_ones(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cr, "PROCESSES", ShellTenants())
    fail = "echo 'RuntimeError: CUDA error: out of memory'; exit 3"
    now = time.monotonic()
    # The first scenario's tenants still run when the later ones have failed: their
    # logs, not the first ones launched, say why the bench stopped.
    plan = [cr.Scenario("single", [cr.Tenant("00-a", "sleep 30", None)], start_at=now + 0.2),
            cr.Scenario("single", [cr.Tenant("01-b", fail, 30)], start_at=now + 5),
            cr.Scenario("single", [cr.Tenant("02-c", fail, None)], start_at=now + 10)]
    with pytest.raises(SystemExit) as stopped:
        cr.run_all(plan, tmp_path, 4, 0.1, "bench")
    assert "every tenant so far failed" in str(stopped.value)
    err = capsys.readouterr().err
    assert "--- 01-b (exit 3):" in err and "--- 02-c (exit 3):" in err, err
    assert "out of memory" in err and "--- 00-a" not in err, err
    assert plan[0].tenants[0].proc.wait(timeout=10) == -9  # the one still running was killed


def test_batches_hold_whole_scenarios_in_order_and_at_most_their_tenants():
    def sc(name: str, n: int) -> cr.Scenario:
        return cr.Scenario(name, [cr.Tenant(f"{name}-{i}", "matmul", None) for i in range(n)])
    plan = [sc("a", 1), sc("b", 2), sc("c", 2), sc("d", 5), sc("e", 1), sc("f", 3)]
    got = [[s.name for s in batch] for batch in cr.batches(plan, 4)]
    # d has more than 4: it runs alone; no scenario is cut.
    assert got == [["a", "b"], ["c"], ["d"], ["e", "f"]]
    assert [[s.name for s in b] for b in cr.batches(plan, 100)] == [list("abcdef")]
    assert cr.batches([], 4) == []


def test_tenants_at_once_follows_the_cards_memory_and_the_cpus():
    per = cr.TENANT_MIB
    assert cr.tenants_at_once(80 * 1024, 16) == min(80 * 1024 // per, 16 * cr.TENANTS_PER_CPU)
    assert cr.tenants_at_once(10 * per, 64) == 10          # the memory bounds it
    assert cr.tenants_at_once(1000 * per, 2) == 2 * cr.TENANTS_PER_CPU  # the CPUs do
    assert cr.tenants_at_once(None, 4) == 4 * cr.TENANTS_PER_CPU        # no NVML: the CPUs
    assert cr.tenants_at_once(per // 2, 4) == 1             # a small card: one at a time


def test_the_card_is_read_through_nvml_as_the_clocks_read_it(fake_env):
    # The real path (ctypes, libnvidia-ml.so.1), on the fake NVML: the card's
    # memory bounds the batches; no NVML, and only the CPUs do.
    from fakehost import fake_gpu
    code = ("import os, sys; sys.path.insert(0, sys.argv[1]); import compute_run as cr; "
            "print(cr.card_mib(), cr.tenants_here(), cr.Clocks().nv is not None, "
            "len(os.sched_getaffinity(0)))")
    env = fake_env(gpus=[fake_gpu(0, memory_mib=81559)])
    out = subprocess.run([sys.executable, "-c", code, str(BENCH)], env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    cpus = int(out[3])
    assert out[:3] == ["81559", str(cr.tenants_at_once(81559, cpus)), "True"], out
    env["LD_LIBRARY_PATH"] = "/nonexistent"
    out = subprocess.run([sys.executable, "-c", code, str(BENCH)], env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    if out[0] == "None":  # a host with a real NVML answers for its own card
        assert out[1:3] == [str(cpus * cr.TENANTS_PER_CPU), "False"], out


def test_run_batches_starts_a_batch_only_once_the_one_before_has_exited(tmp_path,
                                                                        monkeypatch, capsys):
    monkeypatch.setattr(cr, "PROCESSES", ShellTenants())
    mark = tmp_path / "marks"
    mark.mkdir()
    # Batch one's tenants leave a mark as they end; batch two's look for both.
    first = f"sleep 0.5; touch {mark}/$$"
    second = f"ls {mark} | grep -cv seen > {mark}/seen-$$"
    plan = [cr.Scenario("pair", [cr.Tenant("00-a", first, None), cr.Tenant("00-b", first, 30)]),
            cr.Scenario("single", [cr.Tenant("01-c", second, 30)])]
    cr.run_batches(plan, tmp_path, 1, 0.1, "bench", 2)
    seen = sorted(mark.glob("seen-*"))
    assert len(seen) == 1 and seen[0].read_text().strip() == "2"
    # Each scenario its own card folder, numbered across the batches.
    assert [sc.card_dir.name for sc in plan] == ["card-00", "card-01"]
    err = capsys.readouterr().err
    assert "[1/2] pair" in err and "[2/2] single" in err, err
    assert plan[1].start_at > plan[0].start_at


# The shim's account at exit as a tenant's log holds it (native/shim/src/launch.c; the
# lines' form is checked against the real shim in tests/test_shim.py).
EXIT_LOG = """Traceback (most recent call last):
RuntimeError: CUDA error: out of memory
gpuslice[41]: debug: device 0: at exit host-bound: 14 of 64 at its last fence points found \
the GPU behind it; 28000 ns a launch, learned
gpuslice[41]: debug: device 0: pacing's host time: 9 launches (0 on tickets), 1 fences; \
0 us at fence points, 0 us waiting for its queue (0 waits), 0 us asleep for its cap, 0 us \
at the card before launches
gpuslice[41]: debug: device 0: pacing's charges: 2254 us in 230 first intervals of busy \
periods (230 launches), 3000000 us in later ones (105000 launches), 12 us at the estimate; \
120 stand-asides, 8200 us of others' work in their drains not charged
gpuslice[41]: debug: device 0: its bucket: 41734 us of credit earned and not kept (over its \
burst) in 90 refills
"""  # (a backslash at a line's end joins it to the next: one line each)


def test_a_shim_tenants_account_at_exit_is_read_from_its_log_and_noted():
    acct = cr.pacer_account(EXIT_LOG)
    assert acct["bound"] == {"bound": "host", "behind": 14, "of": 64}
    assert acct["charged"]["firsts"] == 230 and acct["charged"]["others_us"] == 8200
    assert acct["cut"] == {"cut_us": 41734, "cuts": 90}
    assert cr.pacer_account("no shim here") == {}
    # A failed tenant's error is its own last line, not the shim's account after it.
    assert cr.last_line(EXIT_LOG) == "RuntimeError: CUDA error: out of memory"
    note = ct.pacer_note({"pacer": acct})
    assert note == ("host-bound (14 of 64 behind); a launch charged 9.8 us in 230 busy periods' "
                    "first intervals, 28.6 in later ones; 120 stand-asides, 8.2 ms of others' "
                    "work off; 41.7 ms of credit not kept in 90 refills")
    # None kept back: nothing said.
    acct["cut"] = {"cut_us": 0, "cuts": 0}
    assert "credit" not in ct.pacer_note({"pacer": acct})
    assert ct.pacer_note({}) == "" and ct.pacer_note({"pacer": {}}) == ""


SIDE_LOG = ("gpuslice[7]: debug: device 0: side by side: 180 of 200 epochs side by side, its "
            "own waits 212 per mille of its time; said it was short in 0 while it learned its "
            "time a launch, 0 for long kernels, 0 for a cap over half the card, 0 short of its cap "
            "(0 per mille at exit)\n")


def test_side_by_side_at_exit_is_read_and_noted():
    # An uncapped tenant side by side: how often, and its own waits.
    acct = cr.pacer_account(SIDE_LOG)
    assert acct == {"side": {"side": 180, "epochs": 200, "waiting_pm": 212, "learning": 0,
                             "long": 0, "high": 0, "owed": 0, "owed_pm": 0}}
    assert ct.pacer_note({"pacer": acct}) == ("side by side in 180 of 200 epochs, its own "
                                              "waits 21 % of its time")
    # One that never went: why is in its waits.
    never = SIDE_LOG.replace("180 of 200", "0 of 200").replace("212 per", "734 per")
    assert ct.pacer_note({"pacer": cr.pacer_account(never)}) == (
        "side by side in 0 of 200 epochs, its own waits 73 % of its time")
    # A capped one beside it: the epochs it said it was short in, and why.
    capped = ("gpuslice[8]: debug: device 0: side by side: 0 of 300 epochs side by side, its own "
              "waits 0 per mille of its time; said it was short in 3 while it learned its time "
              "a launch, 0 for long kernels, 0 for a cap over half the card, 150 short of its "
              "cap (41 per mille at exit)\n")
    assert ct.pacer_note({"pacer": cr.pacer_account(capped)}) == (
        "said it was short in 3 epochs learning its time a launch, 0 for long kernels, 0 for a "
        "cap over half the card, 150 short of its cap (of 300)")
    # Learning alone (every capped tenant, at its start) is not worth a note.
    learning = capped.replace("150 short of", "0 short of")
    assert ct.pacer_note({"pacer": cr.pacer_account(learning)}) == ""
    # When its holds for running short began, and how short it ran then.
    held = capped + ("gpuslice[8]: debug: device 0: side by side: 3 holds for running short, "
                     "from 1001 ms (36 per mille), 2159 ms (27 per mille), 4331 ms (27 per "
                     "mille)\n")
    acct = cr.pacer_account(held)
    assert acct["holds"] == {"holds": 3, "at": [[1001, 36], [2159, 27], [4331, 27]]}
    assert ct.pacer_note({"pacer": acct}).endswith(
        "; 3 holds for running short, from 1.00 s (3.6 points), 2.16 s (2.7 points), 4.33 s "
        "(2.7 points) after its first epoch")
    # More than the shim keeps: the rest counted.
    many = held.replace("3 holds", "11 holds")
    assert ct.pacer_note({"pacer": cr.pacer_account(many)}).endswith(
        "4.33 s (2.7 points) after its first epoch and 8 more")
    # Its first epoch on the monotonic clock (its setup's, in a bench that warms a
    # tenant up first): the holds at the seconds of its run, which began 7.5 s later.
    dated = held.replace(" mille)\n", " mille); its first epoch at 1000.250 s\n")
    acct = cr.pacer_account(dated, start_at=1007.75)
    assert acct["holds"]["first_s"] == 1000.25
    assert acct["holds"]["run_s"] == [-6.499, -5.341, -3.169]
    assert ct.pacer_note({"pacer": acct}).endswith(
        "from -6.50 s (3.6 points), -5.34 s (2.7 points), -3.17 s (2.7 points) of its run")
    acct = cr.pacer_account(dated, start_at=995.0)
    assert ct.pacer_note({"pacer": acct}).endswith(
        "from 6.25 s (3.6 points), 7.41 s (2.7 points), 9.58 s (2.7 points) of its run")
    # Without its run's start (a bench that runs no scenario): after its first epoch.
    assert "run_s" not in cr.pacer_account(dated)["holds"]
    # One capped above half the card says so at every epoch, and learns nothing.
    high = (capped.replace("in 3 while", "in 0 while").replace("150 short of", "0 short of")
            .replace("0 for a cap over", "300 for a cap over"))
    assert ct.pacer_note({"pacer": cr.pacer_account(high)}) == (
        "said it was short in 0 epochs learning its time a launch, 0 for long kernels, 300 for a "
        "cap over half the card, 0 short of its cap (of 300)")


def test_shim_tenants_log_their_account_unless_told_otherwise(monkeypatch):
    monkeypatch.delenv("GPUSLICE_LOG", raising=False)
    capped, plain = cr.Tenant("00-a", "train", 50), cr.Tenant("00-b", "matmul", None, shim=False)
    assert cr.tenant_env(capped, Path("/s"), Path("/c"))["GPUSLICE_LOG"] == "debug"
    assert "GPUSLICE_LOG" not in cr.tenant_env(plain, Path("/s"), Path("/c"))
    monkeypatch.setenv("GPUSLICE_LOG", "warn")
    assert cr.tenant_env(capped, Path("/s"), Path("/c"))["GPUSLICE_LOG"] == "warn"


def test_the_benches_show_a_capped_tenants_account(monkeypatch):
    # compute_latency: one line per capped neighbour after the table.
    plan = synthetic()
    fill(plan, {"ref 1 matmul": 5.0, "ref 2 matmul": 9.0, "ref 1 train": 6.0, "alone": 1.0})
    acct = cr.pacer_account(EXIT_LOG)
    for sc in plan:
        for t in sc.tenants:
            if t.shim and t.program != "requests":
                t.data["pacer"] = acct
    lines = cl.pacer_lines(plan)
    assert lines[0].startswith("the pacer's account at exit")
    assert "  beside train 50: train 50: host-bound (14 of 64 behind)" in "\n".join(lines)
    assert all("none:" not in ln for ln in lines)  # capped ones only
    fill(plan, {"ref 1 matmul": 5.0, "ref 2 matmul": 9.0, "ref 1 train": 6.0, "alone": 1.0})
    assert cl.pacer_lines(plan) == []  # no account: no section
    # compute_share: in a capped row's note.
    rows = judged_suite(monkeypatch, {}, [0.6, 0.6, 0.6, 0.6], account=acct)
    capped = [r for (_, _, cap), r in rows.items() if cap != "none"]
    assert capped and all("host-bound (14 of 64 behind)" in r.note for r in capped), capped[0].note
    # And an uncapped tenant's beside a capped one (side by side, the default,
    # or what kept it in turns); not alone, not beside uncapped ones.
    beside = [r for (name, _, cap), r in rows.items()
              if cap == "none" and name.startswith("pair ") and r.program != "matmul"]
    assert beside and all("host-bound (14 of 64 behind)" in r.note for r in beside)
    assert all("host-bound" not in r.note for (name, _, cap), r in rows.items()
               if cap == "none" and not name.startswith("pair "))


def test_a_failed_tenant_is_an_error_and_unanswered_requests_count():
    plan = synthetic()
    fill(plan, {"ref 1 matmul": 5.0, "ref 2 matmul": 9.0, "ref 1 train": 6.0}, unanswered=1)
    broken = next(sc for sc in plan if sc.name == "beside matmul 30")
    broken.tenants[1].data, broken.tenants[1].error = None, "exit 1: CUDA error"
    rows, meta = rows_of(plan)
    assert all(r[-2] == ct.ERROR for r in rows if r[2] == "beside matmul 30")
    assert any("unanswered" in r[-1] for r in rows)
    assert not cl.verdicts(rows, meta["goals"])[1]


def test_replay_reads_a_raw_file_back(tmp_path, capsys):
    plan = synthetic("2")
    fill(plan, {"ref 1 matmul": 5.0, "ref 2 matmul": 9.0, "ref 1 bigmm": 20.0})
    raw = cl.raw_of(plan, "H200 (synthetic)", "2", cr.Clocks([]), "")
    path = tmp_path / "raw.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(raw, f)
    assert cl.main(["--replay", str(path)]) == 0
    out = capsys.readouterr().out
    assert "part 2" in out and "ALL PASS" in out and "decode" in out
    # A file written since names what it covers, a part or the selection given.
    raw["part"] = cl.parse(["--shapes", "decode", "--neighbours", "bigmm"]).covers
    with gzip.open(path, "wt") as f:
        json.dump(raw, f)
    cl.main(["--replay", str(path)])
    assert "; shapes decode; arrivals periodic,poisson; neighbours bigmm;" in \
        capsys.readouterr().out


def test_a_run_names_the_part_or_the_selection_it_covers():
    assert cl.parse([]).covers == "part 1" and cl.parse(["--part", "all"]).covers == "part all"
    assert cl.parse(["--quick"]).covers == "quick"
    # The part's own lists given again are still the part.
    assert cl.parse(["--part", "2", "--shapes", "eager-l,decode,cnn"]).covers == "part 2"
    assert cl.parse(["--shapes", "cnn,eager-s", "--arrivals", "poisson", "--neighbours",
                     "matmul"]).covers == (
        "shapes cnn,eager-s; arrivals poisson; neighbours matmul")


# --- compute_share --suite ---------------------------------------------------

SUITE_SECONDS = 4


def judged_suite(monkeypatch, eagerloop: Dict[str, float], refs: List[float],
                 charged: Optional[float] = None, account: Optional[dict] = None,
                 turns: bool = False, trio: Optional[List[float]] = None) -> Dict:
    """compute_share --suite's plan (caps 30) on synthetic runs: eagerloop at the
    given share of its rate in each pair, at refs[k] in the k-th plain time
    slicing run (its uncapped matmul at 0.4), every other program at its cap
    or whole; with `charged`, the capped tenants' regions sampled at that
    share of each second; with `account`, every shim tenant's account at exit
    (run_all's "pacer"); with `turns`, the pairs waiting for turns too (--turns);
    with `trio`, --crowds too, eagerloop at trio[k] in the k-th run of the
    trio and its references, in plan order; its rows, by (scenario,
    program, cap)."""
    plan = cs.scenarios((30,), pairs_only=True, crowds=trio is not None, suite_rows=True,
                        turns=turns)
    ref_shares = iter(refs)
    trio_shares = iter(trio or [])
    at = 1000.0
    for sc in plan:
        ref = next(ref_shares) if sc.name == cs.ts_ref("eagerloop") else None
        in_trio = next(trio_shares) if sc.name in (cs.TRIO, cs.TRIO_TS) else None
        for t in sc.tenants:
            if t.program == "eagerloop" and in_trio is not None:
                s = in_trio
            elif t.program == "eagerloop":
                s = ref if ref is not None else eagerloop.get(sc.name, 1.0)
            elif ref is not None:
                s = 0.4
            else:
                s = 1.0 if t.cap is None else t.cap / 100
            t.data = {"setup_monotonic": at - 2, "warmup_monotonic": at - 0.5,
                      "start_monotonic": at, "end_monotonic": at + SUITE_SECONDS + 0.3,
                      "late_s": 0.0, "done_s": [] if t.program == "idle" else
                      fake_busy(SUITE_SECONDS + 0.25, s)}
            if charged is not None and t.cap is not None:
                t.data["charges"] = [(at - 0.05 + i / 10, int(charged * 1e8 * i))
                                     for i in range(10 * (SUITE_SECONDS + 1))]
            if account is not None and t.shim:
                t.data["pacer"] = account
        at += SUITE_SECONDS + 5
    monkeypatch.setattr(cs, "clocks", cr.Clocks([]), raising=False)
    rows, _ = cs.analyse(plan, SUITE_SECONDS)
    return {(r.scenario, r.program, r.cap): r for r in rows}


def test_compute_share_notes_what_the_pacer_charged_a_capped_tenant(monkeypatch):
    rows = judged_suite(monkeypatch, {}, [0.6, 0.6, 0.6, 0.6], charged=0.27)
    capped = [r for (_, _, cap), r in rows.items() if cap not in ("none",)]
    assert capped and all("charged 27.0-27.0" in r.note for r in capped), capped[0].note
    uncapped = [r for (_, _, cap), r in rows.items() if cap == "none"]
    assert all("charged" not in r.note for r in uncapped)


def test_compute_share_suite_rows_judge_goal_2(monkeypatch):
    names = [sc.name for sc in cs.scenarios((30,), pairs_only=True, crowds=False,
                                            suite_rows=True)]
    assert cs.ts_ref("eagerloop") in names and "pair eagerloop+30" in names and "pair eagerloop+50" in names
    assert names.count("single") == 1 + len(cs.SUITE_CAPS)
    by = judged_suite(monkeypatch, {"pair eagerloop+30": 0.70, "pair eagerloop+50": 0.45},
                      [0.6, 0.6, 0.6])
    assert by[("pair eagerloop+30", "eagerloop", "none")].result == ct.PASS
    # 45 % of the passes beside 50: fewer than plain time slicing's 60 %, and short of 48.
    r50 = by[("pair eagerloop+50", "eagerloop", "none")]
    assert r50.result == ct.FAIL and "goal 2" in r50.note
    assert by[("pair eagerloop+50", "matmul", "50")].result == ct.PASS
    assert by[(cs.ts_ref("eagerloop"), "eagerloop", "none")].result == "ref"
    assert {r.result for r in by.values() if r.program == "train" and r.cap != "none"} == {
        ct.PASS}


def test_compute_share_suite_reports_what_an_idle_high_tenant_costs_its_neighbours(
        monkeypatch):
    # Presence keeps an uncapped process paced while a high-priority tenant
    # idles on its card: each busy program runs beside one, between its own
    # baselines, and its throughput is reported against them.
    plan = cs.scenarios((30,), pairs_only=True, crowds=False, suite_rows=True)
    names = [sc.name for sc in plan]
    for prog in ("matmul", "eagerloop", "train"):
        i = names.index(cs.beside_idle(prog))
        progs = sorted(t.program for t in plan[i].tenants)
        assert progs == sorted([prog, "idle"])
        idle = next(t for t in plan[i].tenants if t.program == "idle")
        assert idle.priority == "high" and idle.shim and idle.cap is None
        assert "GPUSLICE_PRIORITY" not in idle.env  # set by tenant_env, from priority
        assert cr.tenant_env(idle, Path("/s"), Path("/c"))["GPUSLICE_PRIORITY"] == "high"
        for j in (i - 1, i + 1):  # between two baselines of the busy program
            assert names[j] == "baseline" and plan[j].tenants[0].program == prog
    by = judged_suite(monkeypatch, {cs.beside_idle("eagerloop"): 0.97}, [0.6, 0.6, 0.6])
    busy = by[(cs.beside_idle("eagerloop"), "eagerloop", "none")]
    assert busy.result == "report" and 96 <= min(busy.shares) <= max(busy.shares) <= 98, busy
    idle_row = by[(cs.beside_idle("eagerloop"), "idle", "none")]
    assert idle_row.result == "report" and "idle" in idle_row.note


def test_goal_2_judges_the_training_loop_against_its_own_references(monkeypatch):
    # The training loop is goal 2's second busy tenant: its pairs are judged
    # against the plain time slicing runs of the training loop, not the eager one's.
    names = [sc.name for sc in cs.scenarios((30,), pairs_only=True, crowds=False,
                                            suite_rows=True)]
    first = names.index("pair train+30")
    assert names[first - 1] == names[first + 1] == cs.ts_ref("train")
    by = judged_suite(monkeypatch, {"pair eagerloop+30": 0.70, "pair eagerloop+50": 0.45},
                      [0.6, 0.6, 0.6])
    r30 = by[("pair train+30", "train", "none")]
    # judged_suite runs every other tenant at its whole rate, the training
    # loop beside its uncapped matmul too: 1.0 against 1.0.
    assert "goal 2" in r30.note and "(1.00)" in r30.note, r30.note
    assert by[(cs.ts_ref("train"), "train", "none")].result == "ref"


def test_compute_share_turns_runs_each_goal_2_pair_in_turns_too_and_judges_it(monkeypatch):
    plan = cs.scenarios((30,), pairs_only=True, crowds=False, suite_rows=True, turns=True)
    names = [sc.name for sc in plan]
    for busy in cs.SUITE_BUSY:
        for cap in cs.SUITE_NEIGHBOUR_CAPS:
            i = names.index(f"pair {busy}+{cap}")
            # Right after the pair side by side (the default), the loop's drift aside.
            assert names[i + 1] == f"pair {busy}+{cap} turns"
            assert all(t.env == cr.SIDE_OFF for t in plan[i + 1].tenants)
            assert not any(t.env for t in plan[i].tenants)
    by = judged_suite(monkeypatch, {"pair eagerloop+30 turns": 0.7, "pair eagerloop+50 turns": 0.5},
                      [0.6, 0.6, 0.6], turns=True)
    r30 = by[("pair eagerloop+30 turns", "eagerloop", "none")]
    assert r30.result == ct.PASS and "(1.17)" in r30.note, r30.note
    r50 = by[("pair eagerloop+50 turns", "eagerloop", "none")]
    assert r50.result == ct.FAIL and "(0.83)" in r50.note, r50.note
    # Without --turns, no pair is steered.
    plain = cs.scenarios((30,), pairs_only=True, crowds=False, suite_rows=True)
    assert not any(sc.name.endswith(" turns") or any(t.env for t in sc.tenants) for sc in plain)


def test_compute_share_crowds_with_suite_runs_two_busy_tenants_beside_a_50_between_references(
        monkeypatch):
    plan = cs.scenarios((30,), pairs_only=True, crowds=True, suite_rows=True)
    names = [sc.name for sc in plan]
    i = names.index(cs.TRIO)
    ts3 = cs.TRIO_TS
    assert names[i - 1] == names[i + 1] == ts3
    assert [(t.program, t.cap, t.shim) for t in plan[i].tenants] == [
        ("eagerloop", None, True), ("train", None, True), ("matmul", 50, True)]
    assert all(not t.shim for t in plan[i - 1].tenants + plan[i + 1].tenants)
    # Reported against the mean of the two: 0.3 against (0.5 + 0.7) / 2.
    by = judged_suite(monkeypatch, {}, [0.6, 0.6, 0.6], trio=[0.5, 0.3, 0.7])
    row = by[(cs.TRIO, "eagerloop", "none")]
    assert row.result == "report" and row.note.startswith("0.50 x plain time slicing"), row.note
    assert by[(cs.TRIO, "matmul", "50")].result == ct.PASS
    # Neither without the suite nor without --crowds.
    for kw in ({"crowds": True, "suite_rows": False}, {"crowds": False, "suite_rows": True}):
        assert ts3 not in [sc.name for sc in cs.scenarios((30,), pairs_only=True, **kw)]


def test_compute_share_crowds_with_suite_runs_a_capped_training_loop_beside_the_eager_loop(
        monkeypatch):
    # A capped tenant charged in full (the training loop: host-bound, uneven
    # kernels) beside one that goes side by side, between two runs of the
    # two under plain time slicing; with --turns once more, its neighbour
    # in turns, next to it in time.
    plan = cs.scenarios((30,), pairs_only=True, crowds=True, suite_rows=True, turns=True)
    names = [sc.name for sc in plan]
    i = names.index(cs.CAPPED_TRAIN)
    assert names[i - 1] == names[i + 2] == cs.CAPPED_TRAIN_TS
    assert names[i + 1] == f"{cs.CAPPED_TRAIN} turns"
    assert [(t.program, t.cap, t.shim) for t in plan[i].tenants] == [
        ("train", 50, True), ("eagerloop", None, True)]
    assert all(t.env == cr.SIDE_OFF for t in plan[i + 1].tenants)
    assert all(not t.shim for t in plan[i - 1].tenants + plan[i + 2].tenants)
    # The capped loop judged on its cap; the eager loop reported against the
    # mean of the two: 0.45 against 0.6.
    by = judged_suite(monkeypatch, {cs.CAPPED_TRAIN: 0.45, f"{cs.CAPPED_TRAIN} turns": 0.3,
                                    cs.CAPPED_TRAIN_TS: 0.6}, [0.6, 0.6, 0.6],
                      turns=True, trio=[0.5, 0.3, 0.7])
    assert by[(cs.CAPPED_TRAIN, "train", "50")].result == ct.PASS
    row = by[(cs.CAPPED_TRAIN, "eagerloop", "none")]
    assert row.result == "report" and row.note.startswith("0.75 x plain time slicing"), row.note
    turns = by[(f"{cs.CAPPED_TRAIN} turns", "eagerloop", "none")]
    assert turns.note.startswith("0.50 x plain time slicing"), turns.note
    # Not without --crowds.
    assert cs.CAPPED_TRAIN not in [sc.name for sc in cs.scenarios(
        (30,), pairs_only=True, crowds=False, suite_rows=True)]


def test_compute_share_turns_without_suite_exits_2_naming_it():
    res = subprocess.run([sys.executable, str(BENCH / "compute_share"), "--turns"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "--turns compares the suite's goal-2 pairs: give --suite too" in res.stderr


def test_goal_2_judges_each_pair_against_the_time_slicing_runs_around_it(monkeypatch):
    # The loop's own speed drifts within a command: each pair's reference is
    # the mean of the plain time slicing runs just before and just after it.
    names = [sc.name for sc in cs.scenarios((30,), pairs_only=True, crowds=False,
                                            suite_rows=True)]
    first = names.index("pair eagerloop+30")
    assert names[first - 1] == names[first + 1] == names[first + 3] == cs.ts_ref("eagerloop")
    assert names[first + 2] == "pair eagerloop+50"
    by = judged_suite(monkeypatch, {"pair eagerloop+30": 0.62, "pair eagerloop+50": 0.75},
                      [0.5, 0.7, 0.9])
    # 0.62 against (0.5 + 0.7) / 2: its throughput holds (its card time does not: 62 < 68).
    r30 = by[("pair eagerloop+30", "eagerloop", "none")]
    assert "(1.03)" in r30.note, r30.note
    # 0.75 against (0.7 + 0.9) / 2 = 0.8: short, though above the first reference alone.
    r50 = by[("pair eagerloop+50", "eagerloop", "none")]
    assert r50.result == ct.FAIL and "(0.94)" in r50.note, r50.note


def test_a_starved_neighbour_reads_zero_and_fails_its_floor():
    plan = synthetic()
    fill(plan, {"ref 1 matmul": 5.0, "ref 2 matmul": 9.0, "ref 1 train": 6.0})
    starved = next(sc for sc in plan if sc.name == "beside matmul 50")
    starved.tenants[1].data["done_s"] = []
    rows, _ = rows_of(plan)
    got = [r for r in rows if r[2] == "beside matmul 50"]
    assert got and all(r[-2] == ct.FAIL and "card 0.0-0.0" in r[10] for r in got)


# --- bench/compute_mps: an MPS card through gpuslice-runtime ------------------

cm = load("compute_mps", BENCH / "compute_mps")
cc = load("compute_container", BENCH / "compute_container.py")


def mps_runs(*argv: str):
    args = cm.parse(list(argv))
    stages = cm.build(args.shapes, args.loads, args.lead)
    return stages, [sc for st in stages for sc in st.scenarios]


def test_compute_mps_plan_runs_each_split_in_its_slices_within_the_budget():
    stages, runs = mps_runs()
    assert [sc.name for sc in runs] == ["baseline matmul", "ts", "time 50", "mps 50/50",
                                        "mps 70/30", "mps 90/10"]
    assert [st.mode for st in stages] == ["time", "mps", "mps", "mps"]
    # ts: plain processes without the shim; the rest in containers on card 0's slices.
    assert all(t.device is None and not t.shim for sc in runs[:2] for t in sc.tenants)
    assert [t.device for t in runs[2].tenants] == ["0-8g", "0-8g-50"]
    for sc, (a, b) in zip(runs[3:], ((50, 50), (70, 30), (90, 10))):
        assert [t.program for t in sc.tenants] == ["requests", "matmul"]
        assert [t.device for t in sc.tenants] == [f"0-8g-{a}", f"0-8g-{b}"]
        assert all(t.cap is None for t in sc.tenants)  # MPS's share, not the pacer's
    # L serves the reduced suite: Poisson, heavy, eager-s, graph-s and mm2.
    judged = [p for p in runs[1].tenants[0].phases if p.judged]
    assert [(p.shape, p.arrival, p.load) for p in judged] == [
        ("eager-s", "poisson", "heavy"), ("graph-s", "poisson", "heavy"),
        ("mm2", "poisson", "heavy")]
    assert all(sc.tenants[0].phases == runs[1].tenants[0].phases for sc in runs[1:])
    total = cm.schedule(stages, cm.STARTUP_S)
    assert total <= cm.BUDGET_S <= 8 * 60
    # Each split's containers start after the one before is over (MPS shares add up to
    # 100 on a card): its lead begins after that run's end.
    for a, b in zip(runs[3:], runs[4:]):
        assert b.start_at - cm.MPS_LEAD_S >= a.start_at + a.windows(0) + cr.TAIL_S
    # More phases lengthen each of the five runs with L by as much.
    more, more_runs = mps_runs("--loads", "light,heavy", "--shapes", ",".join(suite.SHAPES))
    longer = more_runs[1].windows(0) - runs[1].windows(0)
    assert longer >= 12
    assert cm.schedule(more, cm.STARTUP_S) == pytest.approx(total + 5 * longer)


def test_compute_mps_plan_prints_without_running(capsys, monkeypatch):
    assert cm.main(["--plan"]) == 0
    out = capsys.readouterr().out
    assert "GPUSLICE=0-8g-90" in out and "estimated" in out and "EXCEEDED" not in out
    monkeypatch.setattr(cm, "BUDGET_S", 200.0)
    assert cm.main(["--plan"]) == 0
    assert "EXCEEDED" in capsys.readouterr().out


@pytest.mark.parametrize("mps", [False, True])
def test_compute_mps_node_offers_every_device_its_runs_name(tmp_path, mps):
    """The node's configuration, read by gpuslice's own reader: each device a run asks
    for is a profile of that memory and compute figure, and card 0's mode is the stage's."""
    from ocihook import config

    path = tmp_path / "config.yaml"
    path.write_text(f"spec_dir: {tmp_path}/cdi\n" + cm.node_config(mps))
    cfg = config.parse_text(path.read_text(), str(path))
    profiles = {p.name: p for p in cfg.profiles}
    _, runs = mps_runs()
    for t in (t for sc in runs for t in sc.tenants if t.device):
        card, name = t.device.split("-", 1)
        want = 0 if name == "8g" else int(name.split("-")[1])
        assert card == "0" and profiles[name].memory_mib == 8192
        assert profiles[name].cores == want
    assert cfg.mode_of(0, "GPU-x") == ("mps" if mps else "time")


def runc_spec() -> dict:
    """What `runc spec` writes, in the parts the bench touches."""
    return {"process": {"terminal": True, "args": ["sh"], "env": ["PATH=/bin", "TERM=xterm"]},
            "root": {"path": "rootfs", "readonly": True},
            "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}]}


def test_a_container_tenant_runs_compute_prog_from_the_bound_bench(tmp_path, monkeypatch):
    _, runs = mps_runs()
    sc, t = runs[3], runs[3].tenants[0]
    sc.start_at = 123.5
    monkeypatch.setenv("GPUSLICE_LOG", "debug")
    launcher = cc.Containers(None, tmp_path / "bundles")
    folder = tmp_path / t.key
    cmd = cr.command(sc, t, launcher, folder, 3, 2.5, cpu=7)
    assert cmd[:5] == [launcher.python, "/bench/compute_prog.py", "requests",
                       f"{sc.windows(0) + cr.TAIL_S}", "123.500000"]
    assert cmd[5] == "/out/out.json" and cmd[cmd.index("--phases") + 1] == "/out/phases.json"
    assert "--setup-early" in cmd and cmd[-2:] == ["--cpu", "7"]
    spec = cc.tenant_spec(cc.check_runtime.host_spec(runc_spec()), t, cmd, folder)
    assert spec["process"]["args"] == cmd and spec["process"]["terminal"] is False
    env = spec["process"]["env"]
    # The slice is asked for once; its limits, the shim and MPS's env are the spec's to give.
    assert [e for e in env if e.startswith("GPUSLICE=")] == ["GPUSLICE=0-8g-50"]
    assert "PYTHONUNBUFFERED=1" in env and "GPUSLICE_LOG=debug" in env
    assert not any(e.startswith(("LD_PRELOAD=", "GPUSLICE_CORE_LIMIT=", "CUDA_MPS_"))
                   for e in env)
    binds = {m["destination"]: (m["source"], m["options"]) for m in spec["mounts"]
             if m["type"] == "bind"}
    assert binds["/bench"] == (str(BENCH), ["rbind", "ro"])
    assert binds["/out"] == (str(folder), ["rbind", "rw"])
    assert all(binds[d] == (d, ["rbind", "ro"]) for d in ("/usr", "/etc", "/opt"))
    assert spec["root"] == {"path": "rootfs", "readonly": False}


class Recorder(cr.Launcher):
    def __init__(self) -> None:
        self.started = []

    def start(self, t, cmd, env, folder, log):
        self.started.append((t.key, cmd, env))
        return None


def test_a_tenant_naming_a_device_starts_only_through_a_container_launcher(tmp_path,
                                                                            monkeypatch):
    _, runs = mps_runs()
    for sc in runs:
        sc.card_dir = tmp_path / "card"
    with pytest.raises(ValueError, match="0-8g"):
        cr.launch(2, runs[2], runs[2].tenants[0], tmp_path, 3, 2.5)
    containers, processes = Recorder(), Recorder()
    monkeypatch.setattr(cr, "PROCESSES", processes)
    cr.launch(2, runs[2], runs[2].tenants[1], tmp_path, 3, 2.5, containers)
    for t in runs[1].tenants:  # ts: no device, plain processes whatever launcher is given
        cr.launch(1, runs[1], t, tmp_path, 3, 2.5, containers)
    assert [k for k, _, _ in containers.started] == [runs[2].tenants[1].key]
    assert [k for k, _, _ in processes.started] == [t.key for t in runs[1].tenants]
    key, cmd, env = processes.started[0]
    # A plain process sees its folder where it is, and no shim was asked for.
    assert cmd[5] == str(tmp_path / key / "out.json") and "LD_PRELOAD" not in env
    assert suite.from_json((tmp_path / key / "phases.json").read_text()) == \
        runs[1].tenants[0].phases


def test_compute_mps_rows_give_p99_against_ts_and_time_and_the_neighbours_share():
    _, runs = mps_runs()
    p99 = {"ts": 10.0, "time 50": 5.0, "mps 50/50": 4.0, "mps 70/30": 2.0, "mps 90/10": 1.0}
    fill(runs, p99, share={"mps 50/50": 0.5, "mps 70/30": 0.3, "mps 90/10": 0.1})
    text, ok = cm.report("H200", runs, cr.Clocks([]), "")
    rows, closing, rate = cm.analyse(runs, cr.Clocks([]))
    assert ok and rate == pytest.approx(BASE_RATE)
    assert len(rows) == 5 * 3  # five runs with L, three judged phases each
    by = {(r[0], r[2]): r for r in rows}
    for shape in ("eager-s", "graph-s", "mm2"):
        assert by[(shape, "ts")][7:9] == ["1.00", "2.00"] and by[(shape, "ts")][10] == "ref"
        assert by[(shape, "mps 70/30")][7:9] == ["0.20", "0.40"]
        assert by[(shape, "mps 90/10")][6] == "1.00"  # max
        assert by[(shape, "mps 90/10")][9] == "10.0-10.0"  # N's throughput, % of alone
        assert by[(shape, "time 50")][9] == "50.0-50.0"
        assert by[(shape, "mps 50/50")][10] == "measured"
    assert any(line.startswith("p99 mps 90/10 / time 50: median 0.20") for line in closing)
    assert "ALL MEASURED" in text
    broken = runs[4].tenants[1]
    broken.data, broken.error = None, "exit 1: admission refused"
    text, ok = cm.report("H200", runs, cr.Clocks([]), "")
    assert not ok and "admission refused" in text and "NOT ALL MEASURED" in text


def test_compute_share_only_keeps_a_scenario_and_the_baselines_around_it():
    plan = cs.scenarios((30,), pairs_only=True, crowds=True, suite_rows=False)
    kept = cs.only(plan, ["pair 30+bigmm"])
    # matmul's nearest baselines before and after the pair, bigmm's before it
    # (none comes after): in the plan's order.
    assert [(sc.name, [t.program for t in sc.tenants]) for sc in kept] == [
        ("baseline", ["matmul"]), ("baseline", ["bigmm"]),
        ("pair 30+bigmm", ["matmul", "bigmm"]), ("baseline", ["matmul"])]
    assert [plan.index(sc) for sc in kept] == sorted(plan.index(sc) for sc in kept)
    assert plan.index(kept[0]) == max(i for i, sc in enumerate(plan[:plan.index(kept[2])])
                                      if sc.name == "baseline"
                                      and sc.tenants[0].program == "matmul")


def test_compute_share_only_an_unknown_scenario_exits_2_naming_it():
    res = subprocess.run([sys.executable, str(BENCH / "compute_share"), "--pairs", "--crowds",
                          "--only", "pair 30+big"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "--only 'pair 30+big'" in res.stderr and "'pair 30+bigmm'" in res.stderr


def test_compute_share_plan_prints_the_batches_and_the_estimate_and_runs_nothing():
    args = ["--suite", "--gates", "--seconds", "4", "--lead", "25", "--at-once", "48"]
    res = subprocess.run([sys.executable, str(BENCH / "compute_share"), *args, "--plan"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    plan = cs.scenarios(cs.CAPS, suite_rows=True, gates=True)
    parts = cr.batches(plan, 48)
    total = cr.STARTUP_S + cr.batches_end(plan, 0.0, 4, 25.0, 48)
    assert lines[0].startswith(f"{len(plan)} runs of {sum(len(sc.tenants) for sc in plan)} "
                               f"processes in {len(parts)} batches of at most 48; "
                               f"estimated {total:.0f} s")
    assert len(parts) > 1 and "EXCEEDED" not in lines[0]
    # Every run once, under its batch, at its own start from that batch's lead.
    assert [line for line in lines if line.startswith("batch ")] == [
        f"batch {i + 1}:" for i in range(len(parts))]
    runs = [line for line in lines if line.startswith("  at ")]
    assert len(runs) == len(plan) and float(runs[0].split()[1]) == 25.0
    assert any("eagerloop" in r and "matmul cap 50" in r for r in runs)
    assert any("matmul (no shim)" in r for r in runs)
    assert "build" not in res.stderr  # nothing built, nothing run
    # More than one command holds, it says so and how to cut it.
    res = subprocess.run([sys.executable, str(BENCH / "compute_share"), *args[:-2], "--at-once",
                          "6", "--plan"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "EXCEEDED: use --only" in res.stdout.splitlines()[0]


def test_shim_launch_ab_without_the_other_build_exits_2_naming_it(tmp_path):
    # Refused before anything is built or run (no GPU needed to get this far).
    missing = tmp_path / "old" / "libgpuslice.so"
    res = subprocess.run([sys.executable, str(BENCH / "shim_launch"), "--ab", str(missing)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"--ab {missing}: no such file" in res.stderr and "native/shim" in res.stderr
    assert res.stdout == ""


def test_launch_host_cost_times_each_variant_through_the_fake_driver(tmp_path):
    # Through the fake driver, as CI has it: every variant runs and gets a
    # figure (no figure is judged here: a time is the host's, not the shim's).
    res = subprocess.run([sys.executable, str(BENCH / "launch_host_cost"), "--launches", "20000",
                          "--rounds", "1"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    rows = [line.split() for line in res.stdout.splitlines()[1:]]
    names = [" ".join(r[:r.index("ns") - 1]) for r in rows]
    assert names == ["no shim", "shim, no cap", "cap 100, no card files", "cap 100, card files",
                     "no cap, beside idle high"]
    assert all(float(r[r.index("ns") - 1]) > 0 for r in rows)
    assert all("the shim adds" in line for line in res.stdout.splitlines()[2:])


@pytest.mark.parametrize("bench, args, named", [
    ("launch_host_cost", ["--launches", "10"], "--launches 10: fewer than 1,000"),
    ("launch_host_cost", ["--ab", "/nonexistent/libgpuslice.so"],
     "--ab /nonexistent/libgpuslice.so: no such file"),
    ("shim_training", ["--ab", "/nonexistent/libgpuslice.so"],
     "--ab /nonexistent/libgpuslice.so: no such file"),
    ("shim_training", ["--rounds", "0"], "--rounds 0: must be at least 1"),
    ("shim_training", ["--program", "bert"], "argument --program: invalid choice: 'bert'"),
    ("fence_calls", ["--every", "0"], "--every 0: must be at least 1"),
    ("fence_calls", ["--fences", "-3"], "--fences -3: must be at least 1"),
])
def test_host_cost_benches_refuse_what_they_cannot_measure(bench, args, named):
    # Refused before anything is built or run (no GPU needed to get this far).
    res = subprocess.run([sys.executable, str(BENCH / bench), *args],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and named in res.stderr, res.stderr
    assert res.stdout == ""


def test_phases_of_a_given_length_hold_hundreds_of_requests():
    ph = suite.phases(["cnn"], ["periodic"], phase_s=10.0)
    judged = [p for p in ph if p.judged]
    assert [p.seconds for p in judged] == [10.0, 10.0]
    assert [len(p.requests()) for p in judged] == [300, 800]
    assert suite.length(ph) == pytest.approx(1 + 20)
    with pytest.raises(ValueError):
        suite.phases(["cnn"], phase_s=0)


def test_compute_latency_phase_seconds_in_the_plan_and_out_of_range():
    args = cl.parse(["--shapes", "cnn", "--arrivals", "poisson", "--neighbours", "matmul",
                     "--no-mps", "--phase-seconds", "10"])
    plain, under_mps = cl.build(args.shapes, args.arrivals, args.neighbours, args.rows, False,
                                args.phase_seconds)
    assert cl.estimate(plain, under_mps, args.lead) <= cr.BUDGET_S
    for sc in plain:
        assert all(p.seconds == 10.0 for p in sc.tenants[0].phases if p.judged)
        assert sc.windows(0) >= suite.length(sc.tenants[0].phases)
    res = subprocess.run([sys.executable, str(BENCH / "compute_latency"), "--plan",
                          "--phase-seconds", "0.5"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "--phase-seconds 0.5" in res.stderr, res.stderr
