"""The admission rule alone (native/hook/hook/admission.c): it builds and
links without SQLite (the rule has no SQL; the store feeds it), under ASan
and UBSan, and places and refuses as docs/architecture.md says, on cards
and usage given by hand (tests/hook/admission_unit.c)."""
from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HOOK = REPO / "native" / "hook"


def test_the_rule_places_and_refuses_without_a_database(tmp_path: Path) -> None:
    exe = tmp_path / "admission_unit"
    sources = [REPO / "tests" / "hook" / "admission_unit.c", HOOK / "hook" / "admission.c",
               HOOK / "hook" / "gang.c", *sorted((HOOK / "common").glob("*.c"))]
    # No -lsqlite3: a statement in the rule would not link.
    subprocess.run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-g", "-D_GNU_SOURCE",
                    "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                    f"-I{HOOK / 'hook'}", f"-I{HOOK / 'common'}", f"-I{REPO / 'native' / 'include'}",
                    "-o", str(exe), *map(str, sources)], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == [
        "binpack 4096: card 0",  # the fullest card that fits
        "spread 4096: card 1",  # the emptiest
        "binpack 12288: card 1",
        "binpack 20000: 1 full U1 | no card has room; the likeliest: d: card 1 (U1) has 16384 "
        "MiB free of 16384 MiB, 20000 MiB asked; stop a container on it or ask for less",
        "sick 12288: 1 full U0 | no card has room; the likeliest: d: card 0 (U0) has 8192 MiB "
        "free of 16384 MiB, 12288 MiB asked; stop a container on it or ask for less; out of "
        "service: card 1",
        "capacity 1.5: 24576, free card0: 16384, free card2: 0",
        "fit 4096:0 card0 2, 4096:10 card0 2, 4096:30 card0 0, card2 0",
        "holders: aaaaaaaaaaaa, ffffffffffff",
    ]
