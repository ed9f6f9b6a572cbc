#!/usr/bin/env python3
"""gpuslice at work on a machine with no GPU: one simulated 16 GiB card (the
test suite's fake driver), real Podman and runc, the real hook, shim and
accountant. Two containers share the card; inside the first, CUDA sees its
8 GiB slice as the card and an allocation past it fails; a third container
that does not fit is refused with the hook's reason; `gpuslice status`
shows the books. install.sh --with-tests runs it where no driver is found;
tests/test_demo.py runs it in CI.

Run as root from a checkout: python3 tests/demo.py
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from fakehost import make_driver_root, podman_host  # noqa: E402
from podman_harness import Podman  # noqa: E402

GIB = 1 << 30
MIB = 1 << 20
LIBC_DIR = "/usr/lib/x86_64-linux-gnu"
KIND = "gpuslice.io/gpu"


def say(text: str = "") -> None:
    print(text, flush=True)


def shown(res: subprocess.CompletedProcess) -> None:
    for line in (res.stdout + res.stderr).rstrip("\n").splitlines():
        say("    " + line)


def build() -> Path:
    """The fake driver, the CUDA test program and the shim; the fake driver's
    build folder."""
    for folder, args in ((REPO / "tests" / "fakedriver", []),
                         (REPO / "tests" / "shim", ["VARIANT=plain"]),
                         (REPO / "native" / "shim", [])):
        subprocess.run(["make", "-s", "-C", str(folder), *args], check=True)
    return REPO / "tests" / "fakedriver" / "build"


def cuda_mounts(fake: Path, gpus_json: Path, go: Path) -> List[str]:
    """What the busybox root lacks to run the CUDA test program: the C
    library, the fake libcuda and the program, read-only."""
    return ["-v", f"{LIBC_DIR}:/lib/x86_64-linux-gnu:ro", "-v", "/lib64:/lib64:ro",
            "-v", f"{fake}:/fake:ro", "-v", f"{REPO / 'tests' / 'shim' / 'build-plain'}:/prog:ro",
            "-v", f"{gpus_json}:/gpus.json:ro", "-v", f"{go}:/go",
            "--env", "LD_LIBRARY_PATH=/fake", "--env", "GPUSLICE_FAKE_GPUS=/gpus.json"]


def wait_lines(path: Path, count: int) -> List[List[str]]:
    for _ in range(1200):
        lines = [ln.split() for ln in path.read_text().splitlines()] if path.exists() else []
        if len(lines) >= count:
            return lines
        time.sleep(0.05)
    raise RuntimeError(f"the container said only {path.read_text() if path.exists() else ''!r}")


def demo(work: Path) -> int:
    fake = build()
    driver_root = make_driver_root(work / "driver", fake)
    podman = Podman(work / "podman")
    try:
        host = podman_host(work, driver_root, podman,
                           "  - {name: 8g, memory: 8GiB}\n  - {name: 6g, memory: 6GiB}\n")
        shim = REPO / "native" / "shim" / "build" / "libgpuslice.so"
        host.config.write_text(host.config.read_text().replace(f"shim_path: {host.shim}",
                                                               f"shim_path: {shim}"))
        say("gpuslice demo: one simulated NVIDIA H200 of 16 GiB (the test suite's fake "
            "driver), real Podman and runc,")
        say("the real hook, shim and accountant.")
        say()
        say("$ gpuslice cdi generate && gpuslice cdi list")
        res = host.run("cdi", "generate")  # again, now with the real shim's path
        if res.returncode != 0:
            shown(res)
            return 1
        shown(host.run("cdi", "list"))
        go = work / "go"
        go.mkdir()
        say()
        say(f"$ podman run -d --name inference --device {KIND}=0-8g IMAGE cuda-program")
        res = podman.run(["sh", "-c", "/prog/cuprog direct init pctx 0 info alloc 5G info "
                          "alloc 4G waitfile /go/inference > /go/inference.out"],
                         devices=[f"{KIND}=0-8g"],
                         extra_args=["--detach", "--name", "inference",
                                     *cuda_mounts(fake, host.gpus_json, go)])
        if res.returncode != 0:
            shown(res)
            return 1
        info, alloc5, after, alloc4 = wait_lines(go / "inference.out", 6)[2:6]  # after init, pctx
        say(f"    inside, CUDA says the card has {int(info[3]) // MIB} MiB "
            f"({int(info[2]) // MIB} MiB free: the context holds the rest)")
        say(f"    allocating 5 GiB: {'done' if alloc5[1] == '0' else 'error ' + alloc5[1]}; "
            f"{int(after[2]) // MIB} MiB free after it")
        say("    allocating 4 GiB more: " + ("CUDA_ERROR_OUT_OF_MEMORY (past the slice)"
                                           if alloc4[1] == "2" else "error " + alloc4[1]))
        say()
        say(f"$ podman run -d --name trainer --device {KIND}=0-6g IMAGE sleep 600")
        res = podman.run(["sleep", "600"], devices=[f"{KIND}=0-6g"],
                         extra_args=["--detach", "--name", "trainer"])
        say("    started" if res.returncode == 0 else "    failed: " + res.stderr.strip())
        say()
        say(f"$ podman run --device {KIND}=0-4g IMAGE true      # 8 + 6 + 4 GiB > 16 GiB")
        res = podman.run(["true"], devices=[f"{KIND}=0-4g"])
        reason = [ln[ln.index("gpuslice-hook:"):] for ln in res.stderr.splitlines()
                  if "gpuslice-hook:" in ln]
        say(f"    refused (exit status {res.returncode}): "
            + (reason[0] if reason else res.stderr.strip()))
        say()
        say("$ gpuslice status")
        shown(host.run("status"))
        (go / "inference").touch()
        ok = alloc5[1] == "0" and alloc4[1] == "2" and res.returncode != 0 and bool(reason)
        say()
        say("gpuslice works here." if ok else "gpuslice demo: something above went wrong.")
        return 0 if ok else 1
    finally:
        podman.cleanup()


def main() -> int:
    if os.geteuid() != 0:
        print("tests/demo.py: run as root (Podman and runc run containers here)",
              file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="gpuslice-demo-", dir="/tmp"))
    try:
        return demo(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
