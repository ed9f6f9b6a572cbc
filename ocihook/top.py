"""`gpuslice top`: the node in a terminal, refreshed every second; `q` quits.

Per card: what NVML says is used and busy, what is reserved, its health; per
container on it: memory used against its slice, card time against its cap
(the share of the card it got since the last frame), the share of time it
slept for the cap, its priority; per process: what it holds. Lines fit in 80
columns. The live view is drawn with curses from the standard library: it
needs no package beyond Python, and it works in any terminal terminfo knows,
over ssh too. `--once` prints one frame as plain text, for scripts (its
rates are over one second, sampled twice).
"""
from __future__ import annotations

import time
from typing import Dict, List, Optional, Tuple

from cdi.limits import MODE_MPS
from ocihook import engine_names, snapshot
from ocihook.tenant_text import shown
from ocihook.nvml_sample import Sampler

MIB = snapshot.MIB
INTERVAL = 1.0
WIDTH = 80
HEADER = (f"  {'CONTAINER':<12} {'NAME':<10} {'PROFILE':<8} {'MEM MiB':>13} "
          f"{'CARD/CAP':>9} {'SLEPT':>6} {'PRIO':<6}")

Key = Tuple[str, str]  # (container id, card uuid)


def _times(snap: snapshot.Snapshot) -> Dict[Key, Tuple[Optional[float], Optional[float]]]:
    return {(k.reservation.container_id, c.card.uuid): (k.card_seconds, k.throttled_seconds)
            for c in snap.cards for k in c.containers}


def _share(now: Optional[float], before: Optional[float], dt: float) -> Optional[float]:
    if now is None or before is None or dt <= 0 or now < before:
        return None
    return (now - before) / dt


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{round(x * 100)}%"


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n - 1] + "~"


def frame(snap: snapshot.Snapshot, prev: Optional[snapshot.Snapshot],
          clock: Optional[str] = None) -> List[str]:
    """The lines of one frame; rates are from `prev` to `snap` ("-" without prev)."""
    before = _times(prev) if prev else {}
    dt = snap.taken - prev.taken if prev else 0.0
    n = sum(len(c.containers) for c in snap.cards)
    head = (f"gpuslice top  {clock or time.strftime('%H:%M:%S')}  {len(snap.cards)} "
            f"card{'s' if len(snap.cards) != 1 else ''}, {n} container{'s' if n != 1 else ''}")
    lines = [head + " " * max(1, WIDTH - len(head) - 8) + "q: quit"]
    for source, why in sorted(snap.problems.items()):
        lines.append(f"{source}: {why}")
    for c in snap.cards:
        busy = f"  busy {_pct(c.nvml.utilization)}" if c.nvml else ""
        lines.append(f"card {c.card.index}  {c.card.name}  {c.card.uuid}{busy}")
        used = (f"{c.nvml.used_bytes // MIB} MiB used of {c.total_bytes // MIB}" if c.nvml
                else f"{c.claimed_bytes // MIB} MiB used (regions) of {c.total_bytes // MIB}")
        state = "healthy" if c.card.healthy else "UNHEALTHY"
        # Time is the default, said by nothing; an MPS card's caps are SM shares.
        share = " (mps: SM shares)" if c.card.mode == MODE_MPS else ""
        lines.append(f"  memory {used}, {c.reserved_mib} reserved; compute {c.cores}% "
                     f"reserved{share}; {state}")
        if not c.card.healthy:
            since = (time.strftime(" since %Y-%m-%d %H:%M", time.localtime(c.card.health_since))
                     if c.card.health_since else "")
            lines.append(f"  out of service{since}: "
                         f"{shown(c.card.health_reason) or 'no reason recorded'}")
        if not c.containers:
            continue
        lines.append(HEADER)
        for k in c.containers:
            r = k.reservation
            was = before.get((r.container_id, c.card.uuid), (None, None))
            card = _share(k.card_seconds, was[0], dt)
            slept = _share(k.throttled_seconds, was[1], dt)
            used_mib = "?" if k.used_bytes is None else str(k.used_bytes // MIB)
            mem = f"{used_mib}/{k.limit_bytes // MIB}"
            cap = f"{_pct(card)}/{k.core_limit}%" if k.core_limit else "no cap"
            # The name is the tenant's (an annotation): shown by text.h's rule.
            lines.append(f"  {r.container_id[:12]:<12} {_cut(shown(k.name) or '-', 10):<10} "
                         f"{_cut(shown(k.profile), 8):<8} {mem:>13} {cap:>9} "
                         f"{_pct(slept) if k.core_limit else '-':>6} {r.priority:<6}")
            if k.claim.problem:
                lines.append(f"    region {k.claim.state.upper()}: {k.claim.problem}")
            for p in k.claim.processes:  # its memory under the container's
                lines.append(f"    pid {p.pid:<8}{p.used_bytes // MIB:>32}")
    if not snap.cards and "accountant" not in snap.problems:
        lines.append("no cards known yet: run `gpuslice cdi generate`")
    return [line.rstrip() for line in lines]


class Source:
    """Where frames come from: the accountant (read-only), the regions, NVML."""

    def __init__(self, state_dir: str, database: str, driver_root: str,
                 names: Optional[engine_names.Lookup] = None) -> None:
        self.state_dir = state_dir
        self.database = database
        self.names = names
        self.sampler = Sampler(driver_root)
        self.acct, self.why = snapshot.open_accountant(database)

    def take(self) -> snapshot.Snapshot:
        if self.acct is None:
            self.acct, self.why = snapshot.open_accountant(self.database)
        snap = snapshot.take(self.state_dir, self.acct, self.sampler, names=self.names)
        if self.why:
            snap.problems["accountant"] = self.why
        return snap


def once(source: Source, interval: float = INTERVAL) -> str:
    first = source.take()
    time.sleep(interval)
    return "\n".join(frame(source.take(), first))


def live(source: Source) -> None:
    import curses

    def run(screen: "curses.window") -> None:
        try:
            curses.curs_set(0)
        except curses.error:
            pass  # a terminal that cannot hide the cursor
        screen.timeout(int(INTERVAL * 1000))
        prev: Optional[snapshot.Snapshot] = None
        while True:
            snap = source.take()
            height, width = screen.getmaxyx()
            screen.erase()
            for y, line in enumerate(frame(snap, prev)[:height]):
                screen.addnstr(y, 0, line, max(0, width - 1))
            screen.refresh()
            prev = snap
            key = screen.getch()  # a key, or -1 after INTERVAL
            if key in (ord("q"), ord("Q")):
                return

    curses.wrapper(run)
