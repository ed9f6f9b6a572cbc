"""One-line messages on stderr, in the one form every gpuslice command uses."""
from __future__ import annotations

import sys
from typing import NoReturn

EXIT_NO = 1     # the answer is "no": a stale spec, an invalid file
EXIT_ERROR = 2  # the request cannot be carried out: bad input, no driver


def error(message: str) -> NoReturn:
    print(f"gpuslice: error: {message}", file=sys.stderr)
    sys.exit(EXIT_ERROR)


def warn(message: str) -> None:
    print(f"gpuslice: warning: {message}", file=sys.stderr)


def say(message: str) -> None:
    print(f"gpuslice: {message}", file=sys.stderr)
