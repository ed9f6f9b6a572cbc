"""The health watcher (`gpuslice health watch`): keeps sick cards out of new
containers without running anything on them.

It holds NVML open, registers every card for NVML's critical-XID and
double-bit-ECC events, waits on them, and between waits asks each card one
cheap question (its memory info) so that a card that fell off the bus
(NVML_ERROR_GPU_IS_LOST) is noticed even without an event. A sick card is
marked in the accountant (healthy 0, the reason, since when): gpuslice-hook
then refuses it new slices and whole cards with that reason; what runs there
is left alone. Every mark stays until `gpuslice card enable N`: nothing the
watcher can see proves a card well again (docs/architecture.md, Health).

Which XIDs count: every XID NVML reports as critical except the ones
NVIDIA's XID catalogue (docs.nvidia.com/deploy/xid-errors) attributes to the
application, which NVIDIA's k8s-device-plugin skips by default for the same
reason: 13 (graphics engine exception), 31 (GPU memory page fault), 43 (GPU
stopped processing), 45 (preemptive cleanup), 68 (video processor
exception), 109 (context switch timeout). Single-bit ECC errors are
corrected by the card and are not registered; a high rate of them reaches
us as XID 92.
"""
from __future__ import annotations

import time
from ctypes import c_void_p
from dataclasses import dataclass
from typing import Callable, Dict, FrozenSet, Iterable, List, Optional

from cdi import driverfiles, nvml
from ocihook import accountant, logsummary

APPLICATION_XIDS: FrozenSet[int] = frozenset({13, 31, 43, 45, 68, 109})

# Words for the XIDs an operator most often meets (NVIDIA's XID catalogue).
XID_WORDS: Dict[int, str] = {
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    999: "an XID NVML does not know",
}

WATCHED_EVENTS = nvml.EVENT_XID_CRITICAL | nvml.EVENT_DOUBLE_BIT_ECC
WAIT_MS = 500         # one wait; SIGTERM is answered within it
POLL_S = 1.0          # the lost-card question, when no event came
RETRY_S = 2.0         # after an error of NVML or the database

Log = Callable[[str], None]


@dataclass(frozen=True)
class Sickness:
    """What makes a card unfit: accountant.CAUSES' cause, the words, the detail."""
    cause: str
    words: str
    detail: Dict[str, object]


def judge(event_type: int, event_data: int, ignored: FrozenSet[int]) -> Optional[Sickness]:
    """What one NVML event says of its card: a Sickness, or None (an
    application's XID, an XID the operator ignores, an event we do not act on)."""
    if event_type & nvml.EVENT_XID_CRITICAL:
        xid = int(event_data)
        if xid in APPLICATION_XIDS or xid in ignored:
            return None
        words = XID_WORDS.get(xid)
        return Sickness("xid", f"XID {xid}" + (f" ({words})" if words else ""), {"xid": xid})
    if event_type & nvml.EVENT_DOUBLE_BIT_ECC:
        return Sickness("ecc", "double-bit ECC error", {})
    return None


LOST = Sickness("lost", "GPU is lost (NVML_ERROR_GPU_IS_LOST)", {})


@dataclass
class _Card:
    index: int
    uuid: str            # "" when NVML could not say (lost before we asked)
    handle: c_void_p


class _Rebuild(Exception):
    """A card was lost: register the others again, in a new event set."""


class Watcher:
    """One watcher on one database. run() returns when stop() says so."""

    def __init__(self, database: str, log: Log, driver_root: str = "/",
                 ignored_xids: Iterable[int] = ()) -> None:
        self.database = database
        self.log = log
        self.driver_root = driver_root
        self.ignored = frozenset(ignored_xids)
        self._last_error = ""
        # Applications' XIDs are the tenants' to raise: a budget of lines a card.
        self._app_xids = logsummary.Summarised(
            log, lambda where, n, tally: f"health: {where}: {n} more application XIDs in "
                                         f"{logsummary.WINDOW_S:g} s (XID {tally}); the card "
                                         "stays in service")

    def run(self, stop: Callable[[], bool]) -> None:
        """Watch until stop(); an error of NVML or the database is one line in the
        log (the same one only once in a row), then a retry."""
        while not stop():
            try:
                self._session(stop)
                self._last_error = ""
            except _Rebuild:
                continue
            except (nvml.DiscoveryError, nvml.NvmlError, accountant.AccountantError,
                    OSError) as e:
                self._error(str(e))
            except Exception as e:  # sqlite3 and the unforeseen: log, retry, never die
                self._error(f"{type(e).__name__}: {e}")
            _sleep(RETRY_S, stop)

    def _error(self, line: str) -> None:
        if line != self._last_error:
            self.log(f"health: {line}; retrying every {RETRY_S:g} s")
        self._last_error = line

    # ---------------------------------------------------------------- session

    def _session(self, stop: Callable[[], bool]) -> None:
        # NVML of the driver root, as `gpuslice cdi generate` loads it; looked
        # for at each start, since a driver may come after the watcher.
        path = None if self.driver_root == "/" else driverfiles.nvml_library(self.driver_root)
        lib = nvml.open_nvml(path)
        acct = None
        es = None
        try:
            acct = accountant.Accountant(self.database)
            cards = self._cards(lib, acct)
            es = lib.event_set_create()
            watched = self._register(lib, acct, es, cards)
            self.log("health: watching " + (", ".join(f"card {c.index} {c.uuid}"
                                                      for c in watched) or "no card")
                     + " for critical XIDs and double-bit ECC errors; a lost card is looked "
                     f"for every {POLL_S:g} s")
            self._last_error = ""
            last_poll = time.monotonic()
            while not stop():
                try:
                    data = lib.event_wait(es, WAIT_MS)
                except nvml.NvmlError as e:
                    # A card of the set is lost: find it, then start again
                    # without it (if none is found, the error is the answer).
                    if e.code != nvml.NVML_ERROR_GPU_IS_LOST or not self._poll(lib, acct,
                                                                                watched):
                        raise
                    raise _Rebuild() from None
                if data is not None:
                    self._event(acct, watched, data)
                self._app_xids.flush()
                if time.monotonic() - last_poll >= POLL_S:
                    last_poll = time.monotonic()
                    if self._poll(lib, acct, watched):
                        raise _Rebuild()
        finally:
            self._app_xids.flush(everything=True)
            if es is not None:
                try:
                    lib.event_set_free(es)
                except nvml.NvmlError:
                    pass
            if acct is not None:
                acct.close()
            try:
                lib.shutdown()
            except nvml.NvmlError:
                pass

    def _cards(self, lib: nvml.Nvml, acct: accountant.Accountant) -> List[_Card]:
        """Every card NVML lists; a card lost already is marked (found in the
        accountant by its index, its UUID being out of reach) and left out."""
        cards = []
        for i in range(lib.device_count()):
            h = lib.handle(i)
            try:
                cards.append(_Card(i, lib.uuid(h), h))
            except nvml.NvmlError as e:
                if e.code != nvml.NVML_ERROR_GPU_IS_LOST:
                    raise
                known = [c for c in acct.cards() if c.index == i]
                self._mark(acct, _Card(i, known[0].uuid if known else "", h), LOST)
        return cards

    def _register(self, lib: nvml.Nvml, acct: accountant.Accountant, es: c_void_p,
                  cards: List[_Card]) -> List[_Card]:
        watched = []
        for c in cards:
            try:
                mask = lib.supported_event_types(c.handle) & WATCHED_EVENTS
                if mask:
                    lib.register_events(c.handle, mask, es)
            except nvml.NvmlError as e:
                if e.code == nvml.NVML_ERROR_GPU_IS_LOST:
                    self._mark(acct, c, LOST)
                    continue
                if e.code != nvml.NVML_ERROR_NOT_SUPPORTED:
                    raise
                mask = 0
            if not mask & nvml.EVENT_XID_CRITICAL:
                # A card too old to report XIDs is not thereby sick: it is
                # watched for being lost only, and the log says so.
                self.log(f"health: card {c.index} {c.uuid}: NVML offers no XID events "
                         "for it; only a lost card is noticed there")
            watched.append(c)
        return watched

    def _event(self, acct: accountant.Accountant, watched: List[_Card],
               data: nvml.NvmlEventData) -> None:
        sick = judge(data.eventType, data.eventData, self.ignored)
        card = next((c for c in watched if c.handle.value == data.device), None)
        where = f"card {card.index} {card.uuid}" if card else f"device {data.device:#x}"
        if sick is None:
            if data.eventType & nvml.EVENT_XID_CRITICAL:
                self._app_xids.say(where, f"health: {where}: XID {data.eventData}, an "
                                   "application's error; the card stays in service",
                                   str(data.eventData))
            return
        if card is None:
            self.log(f"health: {sick.words} on an NVML device not watched; ignored")
            return
        self._mark(acct, card, sick)

    def _poll(self, lib: nvml.Nvml, acct: accountant.Accountant,
              watched: List[_Card]) -> bool:
        """Ask each watched card one cheap question; mark and drop the lost.
        True if one was lost."""
        lost = False
        for c in list(watched):
            try:
                lib.memory(c.handle)
            except nvml.NvmlError as e:
                if e.code != nvml.NVML_ERROR_GPU_IS_LOST:
                    raise
                self._mark(acct, c, LOST)
                watched.remove(c)
                lost = True
        return lost

    def _mark(self, acct: accountant.Accountant, card: _Card, sick: Sickness) -> None:
        reason = f"{sick.words} at {accountant.utc_stamp(time.time())}"
        was = acct.mark_unhealthy(card.uuid, sick.cause, reason, **sick.detail) \
            if card.uuid else None
        if was is None:
            self.log(f"health: card {card.index} {card.uuid or '(UUID out of reach)'}: "
                     f"{reason}; the accountant does not know it (run `gpuslice cdi "
                     "generate`), nothing marked")
        elif was.healthy:
            self.log(f"health: card {card.index} {card.uuid} out of service: {reason}; "
                     f"`gpuslice card enable {card.index}` returns it")
        else:
            self.log(f"health: card {card.index} {card.uuid}: {reason}; out of service "
                     f"already ({was.health_reason})")


def _sleep(seconds: float, stop: Callable[[], bool]) -> None:
    end = time.monotonic() + seconds
    while not stop() and time.monotonic() < end:
        time.sleep(min(0.1, max(0.0, end - time.monotonic())))
