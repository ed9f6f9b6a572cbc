"""Text every `gpuslice` command's help shares: the examples that end it.
Its own module so that command groups in other packages (ocihook/slurm)
use it without importing the command line they belong to."""
from __future__ import annotations


def examples(*lines: str) -> str:
    """A command's epilog: example command lines, kept as written (click
    rewraps a paragraph unless a \\b line opens it). The man pages
    (packaging/man/mkman.py) read them back from here."""
    return "Examples:\n\n\b\n" + "\n".join(f"  {line}" for line in lines)
