"""`gpuslice exporter`: what it serves, read at scrape time from the real
accountant (admissions by this tree's gpuslice-hook), regions as the shim
writes them, and the fake NVML; checked by prometheus_client's parser and by
`promtool check metrics`, and scraped by a real Prometheus server while a
fake-driver CUDA program holds memory in a real Podman container."""
from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from exporter_node import MIB, Exporter, Node, samples, value
from fakehost import DRIVER_VERSION, LIBDIR, fake_gpu, make_driver_root
from podman_harness import podman_fixture

GIB = 1 << 30
A, B, C = "a" * 64, "b" * 64, "c" * 64


@pytest.fixture
def node(tmp_path: Path, driver_root: Path, fakedriver: Path) -> Node:
    gpus = [fake_gpu(0, memory_mib=16384, memory_used_mib=3000, utilization_pct=45),
            fake_gpu(1, memory_mib=16384)]
    return Node(tmp_path, driver_root, gpus)


@pytest.fixture
def driver_root_with_cuda(tmp_path: Path, fakedriver: Path) -> Path:
    """A driver root whose libcuda is the fake driver's (not an empty stand-in):
    the CDI spec mounts it into the container, where a CUDA program runs on it."""
    root = make_driver_root(tmp_path / "driver", fakedriver)
    shutil.copy(fakedriver / "libcuda.so.1",
                root / LIBDIR.lstrip("/") / f"libcuda.so.{DRIVER_VERSION}")
    return root


def scene(node: Node) -> None:
    """Three containers on two cards, and what the accountant's history holds."""
    u0 = node.gpus[0]["uuid"]
    node.admit(A, "0-4g-30", 0, memory_mib=4096, cores=30, priority="high")
    node.admit(B, "4g", 0, memory_mib=4096)
    node.admit(C, "1", 1, exclusive=True)
    node.region(A, [(u0, 4 * GIB, 1536 * MIB, 30, 2_500_000_000, 500_000_000)],
                [(17, {0: {"alloc": 1024 * MIB, "context": 512 * MIB}})])
    node.region(B, [(u0, 4 * GIB, 768 * MIB)], [(5, {0: {"alloc": 768 * MIB}})])
    # One released by an operator, one reclaimed after its process died.
    node.admit("d" * 64, "4g", 0, memory_mib=4096)
    assert node.hook("release", "--id", "d" * 64).returncode == 0
    dead = subprocess.Popen(["true"])
    dead.wait()
    res = node.hook("admit", "--id", "e" * 64, "--device", "4g", "--card", u0,
                    "--memory-mib", "4096", "--pid", str(dead.pid))
    assert res.returncode == 0, res.stderr
    assert node.hook("gc").returncode == 0


def test_scrape_reads_cards_containers_processes_and_counters(node: Node) -> None:
    scene(node)
    u0, u1 = node.gpus[0]["uuid"], node.gpus[1]["uuid"]
    exp = Exporter(node)
    try:
        m = samples(exp.scrape())
    finally:
        exp.stop()
    card0 = {"index": "0", "uuid": u0, "model": "NVIDIA H200"}
    assert value(m, "gpuslice_build_info") == 1
    assert value(m, "gpuslice_source_up", source="accountant") == 1
    assert value(m, "gpuslice_source_up", source="nvml") == 1
    assert value(m, "gpuslice_card_memory_total_bytes", **card0) == 16384 * MIB
    assert value(m, "gpuslice_card_memory_reserved_bytes", **card0) == 8192 * MIB
    assert value(m, "gpuslice_card_memory_used_bytes", **card0) == 3000 * MIB
    assert value(m, "gpuslice_card_utilization_ratio", **card0) == 0.45
    assert value(m, "gpuslice_card_compute_reserved_ratio", **card0) == 0.3
    assert value(m, "gpuslice_card_healthy", **card0) == 1
    assert value(m, "gpuslice_card_health_info", reason="", **card0) == 1
    assert value(m, "gpuslice_card_xid_errors_total", **card0) == 0
    assert value(m, "gpuslice_card_memory_reserved_bytes", uuid=u1) == 16384 * MIB

    a = {"container_id": A, "card_uuid": u0, "profile": "4g-30", "name": ""}
    assert value(m, "gpuslice_container_info", device="0-4g-30", priority="high", **a) == 1
    assert value(m, "gpuslice_container_memory_limit_bytes", **a) == 4 * GIB
    assert value(m, "gpuslice_container_memory_used_bytes", **a) == 1536 * MIB
    assert value(m, "gpuslice_container_compute_cap_ratio", **a) == 0.3
    assert value(m, "gpuslice_container_card_seconds_total", **a) == 2.5
    assert value(m, "gpuslice_container_throttled_seconds_total", **a) == 0.5
    assert value(m, "gpuslice_container_processes", **a) == 1
    assert value(m, "gpuslice_process_memory_used_bytes", container_id=A, pid="17") == 1536 * MIB
    # Uncapped: the shim does not measure its card time, so no such series.
    assert value(m, "gpuslice_container_memory_used_bytes", container_id=B) == 768 * MIB
    for name in ("gpuslice_container_card_seconds_total", "gpuslice_container_compute_cap_ratio"):
        assert [s for s in m.get(name, []) if s[0]["container_id"] == B] == []
    # A whole card: its limit is the card; no region yet: nothing used.
    assert value(m, "gpuslice_container_memory_limit_bytes", container_id=C) == 16384 * MIB
    assert value(m, "gpuslice_container_memory_used_bytes", container_id=C, profile="whole") == 0

    assert value(m, "gpuslice_admissions_total", result="admitted") == 5
    assert value(m, "gpuslice_releases_total", kind="operator-release") == 1
    assert value(m, "gpuslice_releases_total", kind="release") == 0
    assert value(m, "gpuslice_reclaims_total") == 1


def test_health_xids_and_refusals(node: Node) -> None:
    """A card the health watcher took out for a critical XID (through the
    accountant, as the watcher does), and the hook's refusals, by class: one
    on that card (unhealthy), two on the card C holds whole (held)."""
    from ocihook import accountant

    scene(node)
    u0, u1 = node.gpus[0]["uuid"], node.gpus[1]["uuid"]
    acct = accountant.Accountant(str(node.db))
    try:
        acct.mark_unhealthy(u0, "xid", "XID 79 (fallen off the bus)", xid=79)
    finally:
        acct.close()
    for card, mib in ((u0, 1024), (u1, 1024), (u1, 1024)):
        res = node.hook("admit", "--id", "r" * 64, "--device", "1g", "--card", card,
                        "--memory-mib", str(mib))
        assert res.returncode == 1, res.stderr
    exp = Exporter(node)
    try:
        m = samples(exp.scrape())
        again = samples(exp.scrape())  # counted once, not again at each scrape
    finally:
        exp.stop()
    for found in (m, again):
        assert value(found, "gpuslice_card_healthy", uuid=u0) == 0
        assert value(found, "gpuslice_card_health_info", uuid=u0,
                     reason="XID 79 (fallen off the bus)") == 1
        since = value(found, "gpuslice_card_unhealthy_since_seconds", uuid=u0)
        assert abs(since - time.time()) < 600
        assert value(found, "gpuslice_card_xid_errors_total", uuid=u0) == 1
        assert value(found, "gpuslice_card_xid_errors_total", uuid=u1) == 0
        assert value(found, "gpuslice_admissions_total", result="refused", reason="held") == 2
        assert value(found, "gpuslice_admissions_total", result="refused",
                     reason="unhealthy") == 1
        assert value(found, "gpuslice_admissions_total", result="admitted") == 5


def test_new_events_and_containers_show_at_the_next_scrape(node: Node) -> None:
    """The exporter holds no lock that keeps the hook from writing: admissions
    made between two scrapes succeed and show in the second."""
    exp = Exporter(node)
    try:
        first = samples(exp.scrape())
        node.admit(A, "0-4g-30", 0, memory_mib=4096, cores=30)
        second = samples(exp.scrape())
        assert node.hook("release", "--id", A).returncode == 0
        third = samples(exp.scrape())
    finally:
        exp.stop()
    assert value(first, "gpuslice_admissions_total", result="admitted") == 0
    assert "gpuslice_container_memory_limit_bytes" not in first
    assert value(second, "gpuslice_admissions_total", result="admitted") == 1
    assert value(second, "gpuslice_container_memory_limit_bytes", container_id=A) == 4 * GIB
    assert "gpuslice_container_memory_limit_bytes" not in third
    assert value(third, "gpuslice_releases_total", kind="operator-release") == 1


def test_no_database_yet_serves_nvml_and_makes_no_file(node: Node, tmp_path: Path) -> None:
    config = node.host.tmp / "config-nodb.yaml"
    missing = tmp_path / "nowhere" / "state.db"
    config.write_text(node.host.config.read_text().replace(f"database: {node.db}",
                                                            f"database: {missing}"))
    node.host.config = config
    exp = Exporter(node)
    try:
        m = samples(exp.scrape())
    finally:
        exp.stop()
    assert value(m, "gpuslice_source_up", source="accountant") == 0
    assert value(m, "gpuslice_source_up", source="nvml") == 1
    assert not missing.parent.exists()
    assert f"accountant: {missing}: no accountant database yet" in exp.log.read_text()


@pytest.mark.parametrize("listen, rule", [
    ("10463", "no port"),
    ("127.0.0.1:http", "port 'http' is not a number from 0 to 65535 (0: any free port, "
                       "named in the log)"),
    ("127.0.0.1:70000", "port '70000' is not a number from 0 to 65535 (0: any free port, "
                        "named in the log)"),
    ("::1:10463", "an IPv6 address goes in brackets"),
    ("[1.2.3.4]:10463", "'1.2.3.4' is not an IPv6 address"),
])
def test_bad_listen_is_one_line_exit_2(node: Node, listen: str, rule: str) -> None:
    res = subprocess.run(["gpuslice", "exporter", "--listen", listen], env=node.env(),
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 2
    assert res.stderr == (f"gpuslice: error: --listen {listen!r}: {rule}; give ADDR:PORT, "
                          "e.g. 127.0.0.1:10463 or [::1]:10463\n")


def test_port_taken_is_one_line_exit_2(node: Node) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        res = subprocess.run(["gpuslice", "exporter", "--listen", f"127.0.0.1:{port}"],
                             env=node.env(), capture_output=True, text=True, timeout=30)
    assert res.returncode == 2
    assert res.stderr.splitlines()[-1] == (f"gpuslice: error: --listen 127.0.0.1:{port}: cannot "
                                          "serve there: Address already in use; pick a free "
                                          "port or another address")


def test_promtool_checks_the_exposition(node: Node, tmp_path: Path) -> None:
    scene(node)
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: Debian's prometheus package (install.sh --with-tests)"
    exp = Exporter(node)
    try:
        text = exp.scrape()
    finally:
        exp.stop()
    res = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0 and not res.stdout.strip() and not res.stderr.strip(), \
        res.stdout + res.stderr


# ------------------------------------------------ Prometheus and a real container

REPO = Path(__file__).resolve().parent.parent


def doc_scrape_config() -> str:
    """The scrape configuration docs/metrics.md gives."""
    text = (REPO / "docs" / "metrics.md").read_text()
    return text.split("```yaml\n", 1)[1].split("```", 1)[0]


def test_the_documented_scrape_config_is_valid(tmp_path: Path) -> None:
    from ocihook.exporter import DEFAULT_LISTEN

    config = tmp_path / "prometheus.yml"
    config.write_text(doc_scrape_config())
    assert f"'{DEFAULT_LISTEN}'" in config.read_text()
    res = subprocess.run(["promtool", "check", "config", str(config)], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


def test_every_metric_is_documented_and_every_documented_one_served(node: Node) -> None:
    import re

    scene(node)
    node.region(C, [(node.gpus[1]["uuid"], 0, 0, 0, 0, 0)], [])
    db = sqlite3.connect(node.db)
    with db:  # an unhealthy card, for its since-series
        db.execute("UPDATE cards SET healthy=0, health_reason='test', health_since=1 "
                   "WHERE idx=1")
    db.close()
    exp = Exporter(node)
    try:
        from prometheus_client.parser import text_string_to_metric_families

        served = {f.name + ("_total" if f.type == "counter" else "")
                  for f in text_string_to_metric_families(exp.scrape())}
    finally:
        exp.stop()
    doc = (REPO / "docs" / "metrics.md").read_text()
    documented = set(re.findall(r"^\| `(gpuslice_[a-z_]+)` \|", doc, re.M))
    assert served == documented, (sorted(served - documented), sorted(documented - served))

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    """Debian's prometheus server, on a loopback port, scraping one target every second."""

    def __init__(self, workdir: Path, target: str) -> None:
        binary = shutil.which("prometheus")
        assert binary, "prometheus missing: Debian's prometheus package (install.sh --with-tests)"
        workdir.mkdir()
        config = workdir / "prometheus.yml"
        # docs/metrics.md's, scraping every second, at the test's exporter.
        doc = doc_scrape_config()
        assert "scrape_interval: 15s" in doc and "'127.0.0.1:10463'" in doc
        config.write_text(doc.replace("scrape_interval: 15s", "scrape_interval: 1s")
                          .replace("'127.0.0.1:10463'", f"'{target}'"))
        self.port = free_port()
        self.log = workdir / "prometheus.log"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [binary, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}"], stdout=log, stderr=log)
        self.wait(lambda: self.get("/-/ready") is not None, "ready")

    def get(self, path: str):  # type: ignore[no-untyped-def]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as r:
                return r.read().decode()
        except OSError:
            assert self.proc.poll() is None, self.log.read_text()
            return None

    def query(self, promql: str) -> list:
        body = self.get("/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        assert body is not None, self.log.read_text()
        doc = json.loads(body)
        assert doc["status"] == "success", doc
        return doc["data"]["result"]

    def wait(self, done, what: str, timeout: float = 90) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, f"prometheus: not {what}: {self.log.read_text()}"
            time.sleep(0.25)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)


def glibc_rootfs(rootfs: Path, program: Path) -> None:
    """Add `program` and the C library it and the shim load to a busybox root
    (the driver's libraries come from the CDI spec, as in production)."""
    for lib in ("/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6"):
        dest = rootfs / lib.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(os.path.realpath(lib), dest)
    shutil.copy(program, rootfs / program.name)


podman = podman_fixture()


def test_prometheus_scrapes_a_real_containers_memory(podman, tmp_path: Path, fakedriver: Path,
                                                     driver_root_with_cuda: Path) -> None:
    repo = Path(__file__).resolve().parent.parent
    subprocess.run(["make", "-s", "-C", str(repo / "native" / "shim")], check=True)
    subprocess.run(["make", "-s", "-C", str(repo / "tests" / "shim"), "VARIANT=plain"],
                   check=True)
    node = Node(tmp_path / "node", driver_root_with_cuda, [fake_gpu(0, memory_mib=16384)],
                spec_dir=podman.cdi_dir, shim=repo / "native" / "shim" / "build" / "libgpuslice.so")
    assert node.host.run("cdi", "generate").returncode == 0
    glibc_rootfs(podman.rootfs, repo / "tests" / "shim" / "build-plain" / "cuprog")
    exp = Exporter(node)
    prom = Prometheus(tmp_path / "prometheus", f"127.0.0.1:{exp.port}")
    cid = None
    try:
        started = podman.run(
            ["/cuprog", "direct", "init", "pctx", "0", "alloc", "512M", "waitfile", "/never"],
            devices=["gpuslice.io/gpu=0-4g-30"], env={"GPUSLICE_CONTEXT_RESERVE": "0"},
            extra_args=["--detach", "--volume",
                        f"{node.host.gpus_json}:/run/gpuslice-fake/gpus.json:ro"])
        assert started.returncode == 0, started.stderr
        cid = started.stdout.strip()
        used = f'gpuslice_container_memory_used_bytes{{container_id="{cid}"}}'
        prom.wait(lambda: [float(r["value"][1]) for r in prom.query(used)] == [512 * MIB],
                  f"showing 512 MiB used by {cid}: {exp.scrape()}")
        [limit] = prom.query(f'gpuslice_container_memory_limit_bytes{{container_id="{cid}"}}')
        assert float(limit["value"][1]) == 4 * GIB
        assert limit["metric"]["profile"] == "4g-30"
        assert limit["metric"]["card_uuid"] == node.gpus[0]["uuid"]
        [pid] = prom.query(f'gpuslice_process_memory_used_bytes{{container_id="{cid}"}}')
        assert float(pid["value"][1]) == 512 * MIB and pid["metric"]["pid"] == "1"
        stop = podman.podman(["stop", "--time", "0", cid], timeout=120)
        assert stop.returncode == 0, stop.stderr
        cid = None
        prom.wait(lambda: prom.query(used) == [], "dropping the stopped container's series")
        assert prom.query('gpuslice_container_memory_limit_bytes') == []
        assert [float(r["value"][1]) for r in prom.query("gpuslice_releases_total"
                                                         '{kind="release"}')] == [1]
    finally:
        if cid:
            podman.podman(["rm", "--force", "--time", "0", cid], timeout=120)
        prom.stop()
        exp.stop()


def test_status_json_lists_each_containers_processes(node: Node) -> None:
    """The per-process view of `gpuslice status --json`, from the same regions."""
    scene(node)
    res = subprocess.run(["gpuslice", "status", "--json"], env=node.env(), capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    containers = {k["id"]: k for c in json.loads(res.stdout)["cards"] for k in c["containers"]}
    assert containers[A]["processes"] == [
        {"pid": 17, "used_bytes": 1536 * MIB,
         "by_kind": {"context": 512 * MIB, "alloc": 1024 * MIB, "vmm": 0, "pool": 0, "array": 0}}]
    assert [p["pid"] for p in containers[B]["processes"]] == [5]
    assert containers[C]["processes"] == [] and containers[C]["region"] == "absent"
    assert containers[A]["name"] == ""
