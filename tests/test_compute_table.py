"""bench/compute_table.py, the analysis of bench/compute_share, on synthetic timestamps.

bench/ is no package: the module is loaded from its path.
"""
import importlib.util
import sys
from pathlib import Path
from typing import List, Sequence

import pytest

_PATH = Path(__file__).resolve().parent.parent / "bench" / "compute_table.py"
_spec = importlib.util.spec_from_file_location("compute_table", _PATH)
ct = importlib.util.module_from_spec(_spec)
sys.modules["compute_table"] = ct  # dataclasses look their module up there
_spec.loader.exec_module(ct)


def timestamps(rates: Sequence[float], tail: float = 0.25) -> List[float]:
    """Units finished evenly at rates[w] per second in window w (the last rate in the tail)."""
    out: List[float] = []
    for w, r in enumerate(list(rates) + [rates[-1]]):
        span = 1.0 if w < len(rates) else tail
        n = round(r * span)
        out += [w + (i + 0.5) * span / n for i in range(n)]
    return out


BASE = 1000.0  # uncapped units/s


def run_shares(rates: Sequence[float]) -> List[float]:
    rate = ct.baseline_rate(ct.windows(timestamps([BASE] * len(rates)), len(rates)))
    return ct.shares(ct.windows(timestamps(rates), len(rates)), rate)


def test_windows_count_units_per_second_and_drop_the_tail():
    done = timestamps([100, 200, 300])
    assert len(done) == 100 + 200 + 300 + 75
    assert ct.windows(done, 3) == [100, 200, 300]
    assert ct.windows([0.0, 0.999, 1.0, 2.5], 2) == [2, 1]


def test_baseline_rate_is_the_mean_after_the_first_window():
    assert ct.baseline_rate([10, 1000, 1010, 990]) == pytest.approx(1000.0)


def test_capped_run_within_tolerance_passes():
    shares = run_shares([240, 251, 249, 253, 248, 250])
    assert shares == pytest.approx([24.0, 25.1, 24.9, 25.3, 24.8, 25.0])
    worst, ok = ct.verdict(shares, 25.0)
    assert ok
    assert worst == pytest.approx(0.3)


def test_one_window_off_by_3_5_points_fails():
    shares = run_shares([250, 250, 250, 285, 250, 250])
    worst, ok = ct.verdict(shares, 25.0)
    assert not ok
    assert worst == pytest.approx(3.5)
    worst, ok = ct.verdict(run_shares([500, 500, 465, 500]), 50.0)
    assert not ok and worst == pytest.approx(-3.5)


def test_exactly_2_points_is_within():
    worst, ok = ct.verdict(run_shares([750, 770, 730]), 75.0)
    assert ok and abs(worst) == pytest.approx(2.0)
    assert not ct.verdict(run_shares([750, 771]), 75.0)[1]


def test_card_time_decides_where_it_is_measured():
    # A lone card that boosts gives more throughput than the cap: not a breach.
    boosted = ct.judge(ct.Row("single", "matmul", "25", 25.0, [25.0, 29.5, 29.8],
                              busy=[25.0, 25.3, 24.6]))
    assert boosted.result == ct.PASS and boosted.busy_result == ct.PASS
    assert boosted.worst == pytest.approx(4.8)
    over = ct.judge(ct.Row("single", "matmul", "25", 25.0, [25.0, 25.0], busy=[25.0, 27.5]))
    assert over.result == ct.FAIL and over.busy_worst == pytest.approx(2.5)


def test_first_window_is_not_judged():
    shares = run_shares([900, 100, 100, 100])  # the limiter still settling in window 0
    assert shares[0] == pytest.approx(90.0)
    assert ct.verdict(shares, 10.0) == (pytest.approx(0.0), True)
    assert ct.verdict(shares, 10.0, skip_first=0)[1] is False


@pytest.mark.parametrize("call, message", [
    (lambda: ct.windows([], 6), "no unit of work finished"),
    (lambda: ct.windows([0.5], 0), "at least one 1 s window"),
    (lambda: ct.windows([-0.1, 0.5], 2), "before its start"),
    (lambda: ct.baseline_rate([500]), "more than 1 window"),
    (lambda: ct.baseline_rate([500, 0, 0]), "no unit of work after its first second"),
    (lambda: ct.shares([1, 2], 0.0), "must be positive"),
    (lambda: ct.verdict([25.0], 25.0), "nothing to judge"),
    (lambda: ct.verdict([], 25.0), "nothing to judge"),
])
def test_empty_or_short_data_is_a_clear_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def span(key, scenario, start, seconds=6, setup_lead=2.5, end_after=0.27):
    return ct.Span(key, scenario, start - setup_lead, start - 0.5, start,
                   start + seconds + end_after)


def test_staggered_runs_do_not_interfere():
    spans = [span("a", "s0", 100.0), span("b", "s1", 109.0), span("c", "s2", 118.0)]
    assert ct.interference(spans, 6) == {k: (True, []) for k in "abc"}


def test_overlap_with_another_scenario_is_invalid_and_setup_only_a_note():
    # b warms up and runs inside a's windows: both measurements are spoilt.
    res = ct.interference([span("a", "s0", 100.0), span("b", "s1", 104.0)], 6)
    assert res["a"][0] is False and "b used the GPU" in res["a"][1][0]
    assert res["b"][0] is False
    # c only sets up (contexts, allocations) during a's last window: noted, still valid.
    res = ct.interference([span("a", "s0", 100.0), span("c", "s1", 107.0, setup_lead=2.0)], 6)
    assert res["a"] == (True, ["c set up during these windows"])
    assert res["c"] == (True, [])


def test_an_early_setup_long_before_a_run_is_no_note_on_it():
    # Set up at 10-30 s, ran at 100 s: a run at 50 s sees neither.
    early = ct.Span("e", "s1", 10.0, 100.0, 100.0, 106.3, ready=30.0)
    run = span("r", "s0", 50.0)
    assert ct.interference([run, early], 6)["r"] == (True, [])
    # Its setup running into that run is a note; its measured run there is invalid.
    late = ct.Span("e", "s1", 52.0, 100.0, 100.0, 106.3, ready=53.0)
    assert ct.interference([run, late], 6)["r"] == (True, ["e set up during these windows"])
    inside = ct.Span("e", "s1", 10.0, 54.0, 54.0, 60.3, ready=30.0)
    assert ct.interference([run, inside], 6)["r"][0] is False


def test_tenants_of_one_scenario_must_start_together():
    res = ct.interference([span("a", "pair", 100.0), span("b", "pair", 100.01)], 6)
    assert res["a"] == (True, []) and res["b"] == (True, [])
    res = ct.interference([span("a", "pair", 100.0), span("b", "pair", 100.3)], 6)
    assert res["a"][0] is False and "0.300 s apart" in res["a"][1][0]


def test_table_and_summary():
    rows = [
        ct.Row("baseline", "matmul", "none", None, [99.5, 100.2], result="ref",
               note="5000.0 units/s"),
        ct.judge(ct.Row("single", "matmul", "25", 25.0, [30.0, 25.4, 24.1])),
        ct.judge(ct.Row("single", "tiny", "10", 10.0, [10.0, 14.0, 10.0])),
        ct.Row("pair 30+none", "matmul", "none", None, [70.2, 69.9], result="report"),
    ]
    assert [r.result for r in rows] == ["ref", ct.PASS, ct.FAIL, "report"]
    assert rows[1].worst == pytest.approx(-0.9)
    table = ct.format_table(rows)
    lines = table.splitlines()
    assert len(lines) == 5 and lines[0].startswith("scenario")
    assert "30.0 25.4 24.1" in lines[2] and "-0.9" in lines[2] and "PASS" in lines[2]
    assert "+4.0" in lines[3] and "FAIL" in lines[3]
    assert lines[1].endswith("5000.0 units/s")
    line, ok = ct.summary(rows)
    assert not ok and "1 passed, 1 failed" in line
    assert ct.summary(rows[:2])[1] is True


def test_invalid_or_broken_rows_are_not_judged_and_fail_the_run():
    bad = ct.judge(ct.Row("single", "graph", "50", 50.0, [50.0, 46.0], result=ct.INVALID))
    assert bad.result == ct.INVALID and bad.worst == pytest.approx(-4.0)
    broken = ct.judge(ct.Row("single", "graph", "10", 10.0, result=ct.ERROR, note="exit 1"))
    assert broken.result == ct.ERROR and broken.worst is None
    line, ok = ct.summary([ct.judge(ct.Row("single", "graph", "25", 25.0, [25.0, 25.0])), bad])
    assert not ok and "1 invalid" in line
    assert ct.summary([])[1] is False


def test_busy_windows_count_time_not_units() -> None:
    # Bursts of 20 units of 0.2 ms, then 12 ms idle: the GPU is busy a quarter
    # of the time, whatever the units' count per window.
    done, t = [], 0.0
    while t < 4:
        for _ in range(20):
            t += 0.0002
            done.append(t)
        t += 0.012
    busy = ct.busy_windows(done, 4, 0.0002)
    assert all(abs(b - 25.0) < 0.5 for b in busy), busy
    # Faster units (a boosted clock) are still counted by the time they took.
    fast = [x * 0.8 for x in done if x * 0.8 < 4]
    assert all(abs(b - 25.0) < 0.5 for b in ct.busy_windows(fast, 3, 0.0002)[:3])


def test_busy_windows_rejects_bad_unit_time() -> None:
    with pytest.raises(ValueError, match="unit time must be positive"):
        ct.busy_windows([0.5], 1, 0.0)


def test_busy_windows_read_an_uncapped_run_as_the_whole_card() -> None:
    # Units of 0.2 ms +- 10 % back to back: every gap is the program's, so an
    # uncapped run holds the card the whole window (counting each unit at
    # most the mean would read 95 %, as the median gap did on the H200: 98 %).
    done, t = [], 0.0
    for i in range(15000):
        t += 0.0002 * (0.9 if i % 2 else 1.1)
        done.append(t)
    busy = ct.busy_windows(done, 2, 0.0002)
    assert all(abs(b - 100.0) < 0.1 for b in busy), busy
    # A neighbour's turn between two units (4 ms, and two 0.2 ms switches) is
    # not ours: after it a unit counts one unit time.
    done = [0.0002 * i for i in range(1, 2001)] + [0.4044 + 0.0002 * i for i in range(1, 2001)]
    busy = ct.busy_windows(done, 1, 0.0002)
    assert busy[0] == pytest.approx(80.0, abs=0.01)  # 4000 units of 0.2 ms, not the 4.4 ms


def test_busy_windows_count_a_unit_after_a_gap_at_this_runs_own_speed() -> None:
    # Two 12 ms units back to back, then 26 ms for a neighbour: 48 % of the
    # card, where the program's uncapped units took 16 ms (a card at its
    # power limit). Counting the first unit of each pair at 16 ms read 56 %.
    done, t = [], 0.0
    while t < 4:
        done += [t + 0.012, t + 0.024]
        t += 0.050
    assert ct.own_unit(done, 0.016) == pytest.approx(0.012)
    busy = ct.busy_windows(done, 4, 0.016)
    assert all(b == pytest.approx(48.0, abs=0.5) for b in busy), busy
    # Slower than uncapped (a neighbour took the power): still the uncapped time.
    slow = [x * 1.5 for x in done]
    assert ct.own_unit(slow, 0.016) == 0.016


def test_busy_windows_keep_the_uncapped_unit_where_this_run_is_irregular() -> None:
    # A host-bound step of 8-12 ms (the middle half of its back-to-back gaps
    # spreads over 40 % of their median): the lower half of that spread is no
    # unit time, so a step after a gap counts the uncapped 10 ms.
    done, t = [], 0.0
    while t < 4:
        for d in (0.008, 0.012, 0.009, 0.011):
            t += d
            done.append(t)
        t += 0.020
    assert ct.own_unit(done, 0.010) == 0.010
    # Too few back-to-back units to tell: the same.
    assert ct.own_unit([0.0, 0.012, 0.024, 0.1], 0.016) == 0.016


def test_unit_note_gives_a_runs_units_against_the_uncapped_ones() -> None:
    # Steps of 7.1 ms back to back in pairs, 30 ms apart; uncapped 6.5 ms.
    done, t = [], 0.0
    while t < 4:
        done += [t + 0.0071, t + 0.0142]
        t += 0.044
    assert ct.unit_note(done, 0.0065) == "units back to back 1.09 x uncapped"
    # Too few units back to back to say.
    assert ct.unit_note(done[:10], 0.0065) == ""


def test_charged_windows_read_the_pacers_count_between_samples() -> None:
    # Charged 30 % of the time, sampled every 0.1 s (a little late at times)
    # from 0.05 s before the start to 3.5 s after: 30 % in every window,
    # interpolated at the window's edges.
    samples, t = [], 99.95
    while t < 103.5:
        samples.append((t, 0.30 * (t - 99.95) * 1e9))
        t += 0.1 + (0.013 if len(samples) % 3 == 0 else 0.0)
    got = ct.charged_windows(samples, 100.0, 4)
    assert got[:3] == pytest.approx([30.0] * 3, abs=1e-6)
    assert got[3] is None  # 104 is past the last sample: not covered
    assert ct.charged_windows([], 100.0, 2) == [None, None]
    # The note ranges the windows it is given only (the judged ones, from the second on).
    samples = [(100.0, 0), (101.0, 5e8), (102.0, 8e8), (103.0, 11e8)]
    assert ct.charged_note({"charges": samples, "start_monotonic": 100.0}, 3, [1, 2]) == \
        "charged 30.0-30.0"
    assert ct.charged_note({"charges": samples, "start_monotonic": 100.0}, 3, [0, 1]) == \
        "charged 30.0-50.0"
    assert ct.charged_note({"start_monotonic": 100.0}, 3, [1, 2]) == ""


def test_longest_gap_counts_from_the_given_time() -> None:
    done = [0.1, 0.9, 1.0, 1.02, 1.3, 1.31]
    # The 0.8 s gap before 1 s is not counted; from 1.0 on the longest is 0.28 s.
    assert ct.longest_gap(done, 1.0) == pytest.approx(0.28)
    assert ct.longest_gap([1.5], 1.0) == 0.0
