"""A gpuslice node on the real GPU for the checks: a configuration in OUT naming
this tree's shim and a hook, and the spec and cards from `gpuslice cdi generate`."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, Optional

from table import check

REPO = Path(__file__).resolve().parents[2]


def hook_binary() -> str:
    """gpuslice-hook for the checks: $GPUSLICE_HOOK (tests/gpu/run sets it to a
    carried one where the host cannot build it), else this tree's, built."""
    if os.environ.get("GPUSLICE_HOOK"):
        return str(Path(os.environ["GPUSLICE_HOOK"]).resolve())
    subprocess.run(["make", "-s", "-C", str(REPO / "native" / "hook")], check=True)
    return str(REPO / "native" / "hook" / "build" / "gpuslice-hook")


def gpuslice(env: Dict[str, str], *args: str) -> "subprocess.CompletedProcess[str]":
    """`gpuslice ARGS` of this tree, on the node env names."""
    return subprocess.run([sys.executable, "-m", "ocihook.cli", *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=90)


def generate(out: Path, shim: Path, hook: str, extra: str = "") -> Optional[Dict[str, str]]:
    """The env that names the node's configuration (spec, database and state
    in OUT; extra: more lines of it), once `cdi generate` has run on it; None
    (checked, printed) if it failed."""
    config = out / "config.yaml"
    config.write_text(f"spec_dir: {out}/cdi\nshim_path: {shim}\nhook_path: {hook}\n"
                      f"database: {out}/state.db\nstate_dir: {out}/state\n{extra}")
    env = dict(os.environ, GPUSLICE_CONFIG=str(config))
    gen = gpuslice(env, "cdi", "generate")
    check("cdi generate", 0, gen.returncode, gen.returncode == 0)
    if gen.returncode:
        print(gen.stderr)
        return None
    return env
