"""Log lines that a tenant can cause at will, kept to a budget: per key (a
card), the first BURST lines of a window are written as they come; the rest
are counted and written as one line when the window closes (or the process
stops). The health watcher uses it for applications' XIDs, which a container
can raise as often as it likes; the journal gets at most BURST + 1 lines a
card a minute for them, and the count is never lost.
"""
from __future__ import annotations

import time
from typing import Callable, Dict, List, Tuple

BURST = 10
WINDOW_S = 60.0


class Summarised:
    def __init__(self, log: Callable[[str], None], summary: Callable[[str, int, str], str],
                 burst: int = BURST, window_s: float = WINDOW_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """summary(key, n, tally) is the line for n held-back lines of key; tally
        counts them by their `what`, as "13 ×3, 31 ×1"."""
        self.log = log
        self.summary = summary
        self.burst = burst
        self.window_s = window_s
        self.clock = clock
        self._windows: Dict[str, Tuple[float, int, Dict[str, int]]] = {}

    def say(self, key: str, line: str, what: str) -> None:
        """Write line, or count it under key as one of `what`."""
        self.flush()
        now = self.clock()
        start, said, held = self._windows.get(key, (now, 0, {}))
        if said < self.burst:
            self.log(line)
            said += 1
        else:
            held[what] = held.get(what, 0) + 1
        self._windows[key] = (start, said, held)

    def flush(self, everything: bool = False) -> None:
        """Close the windows that are over (all of them when everything): one
        line each for what they held back."""
        now = self.clock()
        done: List[str] = [k for k, (start, _, _) in self._windows.items()
                           if everything or now - start >= self.window_s]
        for key in done:
            _, _, held = self._windows.pop(key)
            if held:
                tally = ", ".join(f"{w} \u00d7{n}" for w, n in sorted(held.items()))
                self.log(self.summary(key, sum(held.values()), tally))
