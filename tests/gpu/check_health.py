"""The health watcher against the real NVML of a GPU host.

Records the host's cards in a database of its own (`gpuslice cdi generate`),
runs `gpuslice health watch` for a few seconds as a process, and checks that
it registered every card nvidia-smi lists for critical-XID events, logged no
error, stopped cleanly, and left every card in service. Nothing is run on
the cards and nothing of theirs is changed. Prints a table; exits 1 if any
check failed.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_cdi import run, smi_cards  # noqa: E402
from node import hook_binary  # noqa: E402
from table import check, measured, report  # noqa: E402

WATCH_S = 4


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    shim = out / "libgpuslice.so"
    shim.write_bytes(b"")
    config = out / "config.yaml"
    # status asks the hook what fits (gpuslice-hook room): the node names one.
    config.write_text(f"spec_dir: {out}/cdi\nshim_path: {shim}\nhook_path: {hook_binary()}\n"
                      f"database: {out}/state.db\nstate_dir: {out}/state\n")
    env = dict(os.environ, GPUSLICE_CONFIG=str(config))
    res = run("cdi", "generate", env=env)
    check("cdi generate records the cards", 0, res.returncode, res.returncode == 0)
    if res.returncode:
        print(res.stderr)
        return report()

    from cdi import nvml

    lib = nvml.open_nvml()
    try:
        for i in range(lib.device_count()):
            mask = lib.supported_event_types(lib.handle(i))
            measured(f"card {i}: NVML's supported event types", hex(mask))
            check(f"card {i}: offers critical-XID events", True,
                  bool(mask & nvml.EVENT_XID_CRITICAL), mask & nvml.EVENT_XID_CRITICAL)
    finally:
        lib.shutdown()

    proc = subprocess.Popen([sys.executable, "-m", "ocihook.cli", "health", "watch"], env=env,
                            cwd=REPO, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    time.sleep(WATCH_S)
    stopped_at = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    measured("SIGTERM to exit, ms", round((time.monotonic() - stopped_at) * 1000))
    lines = err.splitlines()
    (out / "watch.log").write_text(err)
    check("watcher exits 0 on SIGTERM", 0, proc.returncode, proc.returncode == 0)
    check("its last line says it stopped", "gpuslice: health: stopped",
          lines[-1] if lines else "", lines[-1:] == ["gpuslice: health: stopped"])
    watching = [ln for ln in lines if "health: watching" in ln]
    check("it registered once, at start", 1, len(watching), len(watching) == 1)
    for c in smi_cards():
        named = f"card {c['index']} {c['uuid']}"
        check(f"card {c['index']} is watched", named, "watched" if watching and
              named in watching[0] else "not named", watching and named in watching[0])
    others = [ln for ln in lines if ln not in watching and ln != "gpuslice: health: stopped"]
    check("no other line (no error, no card without XID events)", 0, len(others), not others)
    for ln in others:
        print(ln)

    status = run("status", "--json", env=env)
    cards = json.loads(status.stdout)["cards"] if status.returncode == 0 else []
    check("status --json answers", 0, status.returncode, status.returncode == 0 and cards)
    if status.returncode:
        print(status.stderr)
    for c in cards:
        check(f"card {c['index']} reported healthy", "True, ''",
              f"{c['healthy']}, {c['health_reason']!r}",
              c["healthy"] and c["health_reason"] == "" and c["health_since"] is None)
    return report()


if __name__ == "__main__":
    sys.exit(main())
