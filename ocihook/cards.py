"""`gpuslice card disable|enable`: an operator takes a card out of service or
returns it. Out of service, a card takes no new slice or whole-card
container (gpuslice-hook refuses with the reason); the containers running
there are left alone and listed. Both are functions, for the CLI and tests.
"""
from __future__ import annotations

import time
from typing import List

from ocihook import accountant

REASON_MAX_CHARS = 200


class CardError(ValueError):
    """A card or a reason the accountant cannot take; the message is one line."""


def find(acct: accountant.Accountant, ref: str) -> accountant.Card:
    """The card an operator named by its index or UUID."""
    cards = acct.cards()
    for c in cards:
        if ref == c.uuid or (ref.isdigit() and int(ref) == c.index):
            return c
    known = ", ".join(str(c.index) for c in cards) or "none yet: run `gpuslice cdi generate`"
    raise CardError(f"card {ref!r}: the accountant knows no such card (by index or UUID; "
                    f"its cards: {known})")


def _check_reason(reason: str) -> str:
    text = reason.strip()
    if not text or len(text) > REASON_MAX_CHARS or any(ord(ch) < 32 or ord(ch) == 127
                                                       for ch in text):
        raise CardError(f"--reason {reason!r}: must be one line of 1 to {REASON_MAX_CHARS} "
                        "characters without control characters")
    return text


def _running(acct: accountant.Accountant, card: accountant.Card) -> List[str]:
    lines = []
    for r in acct.reservations(card.uuid):
        named = f", name {r.name}" if r.name else ""
        lines.append(f"  left running: {r.container_id[:12]} ({r.device}{named})")
    return lines or ["  no container holds it"]


def disable(acct: accountant.Accountant, ref: str, reason: str) -> str:
    """Take the card out of service with the operator's reason; what to print."""
    card = find(acct, ref)
    text = _check_reason(reason)
    if not card.healthy:
        return "\n".join([f"card {card.index} ({card.uuid}) is out of service already: "
                          f"{card.health_reason or 'no reason recorded'}; nothing changed",
                          *_running(acct, card)])
    why = f"{text} (gpuslice card disable at {accountant.utc_stamp(time.time())})"
    acct.mark_unhealthy(card.uuid, "operator", why)
    return "\n".join([f"card {card.index} ({card.uuid}) out of service: {why}; new "
                      f"containers are refused there, `gpuslice card enable {card.index}` "
                      "returns it", *_running(acct, card)])


def enable(acct: accountant.Accountant, ref: str) -> str:
    """Return the card to service, whatever took it out; what to print."""
    card = find(acct, ref)
    if card.healthy:
        return f"card {card.index} ({card.uuid}) is in service already; nothing changed"
    acct.mark_healthy(card.uuid, "operator")
    return "\n".join([f"card {card.index} ({card.uuid}) back in service (it was out: "
                      f"{card.health_reason or 'no reason recorded'})", *_running(acct, card)])
