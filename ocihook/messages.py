"""One-line messages on stderr, in the one form every gpuslice command uses."""
from __future__ import annotations

import sys
from typing import NoReturn

EXIT_NO = 1     # the answer is "no": a stale spec, an invalid file
EXIT_ERROR = 2  # the request cannot be carried out: bad input, no driver


def bounded(message: str, limit: int) -> str:
    """message cut to at most `limit` characters where it carries a value too long
    to repeat (a huge configuration, an id of 100 KB): its head and its tail,
    where the rule and the fix are, are kept, and the cut says how much went."""
    if len(message) <= limit:
        return message
    room = max(2, limit - 48)  # what the marker leaves
    head = room * 2 // 3
    tail = room - head
    cut = len(message) - head - tail
    return f"{message[:head]} [... {cut} characters left out ...] {message[-tail:]}"


def error(message: str) -> NoReturn:
    error_line(message)
    sys.exit(EXIT_ERROR)


def error_line(message: str) -> None:
    """An error said without stopping: one of several (`config check`)."""
    print(f"gpuslice: error: {message}", file=sys.stderr)


def warn(message: str) -> None:
    print(f"gpuslice: warning: {message}", file=sys.stderr)


def say(message: str) -> None:
    print(f"gpuslice: {message}", file=sys.stderr)
