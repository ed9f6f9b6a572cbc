"""A node for the exporter's and top's tests: fake cards from `gpuslice cdi
generate`, reservations admitted by this tree's real gpuslice-hook (`admit`,
into a real SQLite file), regions written as the shim writes them, and the
real `gpuslice exporter` started on a free loopback port."""
from __future__ import annotations

import os
import re
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Dict, List, Optional, Sequence

MIB = 1 << 20
GIB = 1 << 30


class Node:
    def __init__(self, tmp: Path, driver_root: Path, gpus: List[Dict],
                 extra_config: str = "", spec_dir: Optional[Path] = None,
                 shim: Optional[Path] = None) -> None:
        """shim: the libgpuslice.so the spec mounts (default: an empty stand-in)."""
        from fakehost import Host  # here: tests/gpu reads exposition with this module alone

        (tmp / "host").mkdir(parents=True, exist_ok=True)
        self.host = Host(tmp / "host", driver_root, gpus, extra_config=extra_config,
                         spec_dir=spec_dir)
        self.host.use_real_hook()
        if shim is not None:
            config = self.host.config
            config.write_text(config.read_text().replace(f"shim_path: {self.host.shim}",
                                                         f"shim_path: {shim}"))
        res = self.host.run("cdi", "generate")
        assert res.returncode == 0, res.stderr
        self.db = self.host.tmp / "state.db"
        self.state_dir = self.host.tmp / "state"
        self.gpus = gpus

    def env(self) -> Dict[str, str]:
        env = dict(os.environ, GPUSLICE_FAKE_GPUS=str(self.host.gpus_json),
                   GPUSLICE_CONFIG=str(self.host.config))
        env.pop("LD_LIBRARY_PATH", None)  # NVML comes from the driver root
        return env

    def hook(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.host.hook), *args, "--database", str(self.db),
                               "--state-dir", str(self.state_dir)],
                              capture_output=True, text=True, timeout=60)

    def admit(self, cid: str, device: str, card: int, memory_mib: int = 0, cores: int = 0,
              exclusive: bool = False, priority: str = "normal") -> None:
        args = ["admit", "--id", cid, "--device", device, "--card", self.gpus[card]["uuid"],
                "--pid", str(os.getpid()), "--priority", priority]
        args += ["--exclusive"] if exclusive else ["--memory-mib", str(memory_mib),
                                                   "--cores", str(cores)]
        res = self.hook(*args)
        assert res.returncode == 0, res.stderr

    def region(self, cid: str, devices: Sequence[tuple], procs: Sequence[tuple]) -> Path:
        from test_region_reader import write_region

        folder = self.state_dir / "containers" / cid
        folder.mkdir(parents=True, exist_ok=True)
        write_region(folder / "region", devices=devices, procs=procs)
        return folder / "region"


class Exporter:
    """`gpuslice exporter --listen 127.0.0.1:0`; the port is the one its log names."""

    def __init__(self, node: Node, *extra: str) -> None:
        self.log = node.host.tmp / f"exporter-{time.monotonic_ns()}.log"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(["gpuslice", "exporter", "--listen", "127.0.0.1:0",
                                          *extra], env=node.env(), stdout=log, stderr=log)
        deadline = time.monotonic() + 30
        while True:
            m = re.search(r"serving http://127\.0\.0\.1:(\d+)/metrics", self.log.read_text())
            if m:
                self.port = int(m.group(1))
                break
            assert self.proc.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, self.log.read_text()
            time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def scrape(self) -> str:
        with urllib.request.urlopen(self.url, timeout=30) as r:
            assert r.status == 200
            return r.read().decode()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def samples(text: str) -> Dict[str, List[tuple]]:
    """name -> [(labels dict, value)] of an exposition, parsed by prometheus_client."""
    from prometheus_client.parser import text_string_to_metric_families

    out: Dict[str, List[tuple]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def value(found: Dict[str, List[tuple]], metric: str, **labels: str) -> float:
    """The one sample of `metric` whose labels include `labels`."""
    hits = [v for lab, v in found.get(metric, [])
            if all(lab.get(k) == x for k, x in labels.items())]
    assert len(hits) == 1, (metric, labels, found.get(metric))
    return hits[0]
