"""`gpuslice exporter`: the node's cards, containers and processes as Prometheus
metrics, read at scrape time (docs/metrics.md lists every metric).

A custom prometheus_client collector takes one snapshot (ocihook/snapshot.py)
per scrape: the accountant opened read-only (WAL: the hook's writes never
wait for a scrape), every container's region, NVML. The registry holds that
collector alone (no process or platform collectors: this is a node's
exporter, not an application's). Connections are read concurrently, with
timeouts and a bound on their count, but scrapes are collected one at a
time on one thread (ocihook/httpserve.py), so the collector's SQLite
connection and NVML are only ever used by that thread. A scrape that fails
for a reason of no source (a module missing, a bug) still answers: every
source 0, and one line in the log naming the cause.
"""
from __future__ import annotations

import ipaddress
import sys
import time
from typing import Dict, Iterator, List, Optional, Tuple

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from ocihook import accountant, engine_names, snapshot
from ocihook.nvml_sample import Sampler
from ocihook.tenant_text import shown
from ocihook.version import version

DEFAULT_PORT = 10463
DEFAULT_LISTEN = f"127.0.0.1:{DEFAULT_PORT}"
CARD_LABELS = ["index", "uuid", "model"]
CONTAINER_LABELS = ["container_id", "name", "card_uuid", "profile"]
SCRAPE = "scrape"  # the problems' key of a scrape that failed as a whole


class ListenError(ValueError):
    """A --listen value that is not ADDR:PORT; the message says what and how to fix it."""


def parse_listen(text: str) -> Tuple[str, int]:
    """ADDR:PORT (IPv4, [IPv6] or a host name; an empty ADDR is every address) into
    (addr, port)."""
    fix = f"give ADDR:PORT, e.g. {DEFAULT_LISTEN} or [::1]:{DEFAULT_PORT}"
    addr, sep, port = text.rpartition(":")
    if not sep:
        raise ListenError(f"--listen {text!r}: no port; {fix}")
    if addr.startswith("[") and addr.endswith("]"):
        addr = addr[1:-1]
        try:
            ipaddress.IPv6Address(addr)
        except ValueError:
            raise ListenError(f"--listen {text!r}: {addr!r} is not an IPv6 address; {fix}") \
                from None
    elif ":" in addr:
        raise ListenError(f"--listen {text!r}: an IPv6 address goes in brackets; {fix}")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ListenError(f"--listen {text!r}: port {port!r} is not a number from 0 to 65535 "
                          f"(0: any free port, named in the log); {fix}")
    return addr, int(port)


class NodeCollector(Collector):
    """Reads the node at every collect(); keeps NVML started and the event totals."""

    def __init__(self, state_dir: str, database: str, sampler: Optional[Sampler],
                 names: Optional[engine_names.Lookup] = None) -> None:
        self.state_dir = state_dir
        self.database = database
        self.sampler = sampler
        self.names = names
        self.events = snapshot.EventCounters()
        self.acct: Optional[accountant.Accountant] = None
        self.version = version()
        self.last_problems: Dict[str, str] = {}  # of the latest scrape, for the log

    def _accountant(self) -> Tuple[Optional[accountant.Accountant], Optional[str]]:
        # Opened on first need and kept; a database made after the exporter started
        # (no `cdi generate` yet at boot) is found at a later scrape.
        if self.acct is None:
            self.acct, why = snapshot.open_accountant(self.database)
            return self.acct, why
        return self.acct, None

    def snapshot(self) -> snapshot.Snapshot:
        acct, why = self._accountant()
        try:
            snap = snapshot.take(self.state_dir, acct, self.sampler, self.events, self.names)
        except Exception as e:  # noqa: BLE001 - a scrape answers whatever broke
            # Served as every source down, with the cause in the log, rather
            # than prometheus_client's bare HTTP 500.
            snap = snapshot.Snapshot(time.monotonic(), events=self.events)
            snap.problems[SCRAPE] = f"the scrape failed: {type(e).__name__}: {e}"
        if why:
            snap.problems["accountant"] = why
        self.last_problems = dict(snap.problems)
        return snap

    def collect(self) -> Iterator[Metric]:
        return iter(metrics(self.snapshot(), self.version))


def _gauge(name: str, doc: str, labels: List[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)


def metrics(snap: snapshot.Snapshot, version: str) -> List[Metric]:
    """The metric families of one snapshot, in docs/metrics.md's order."""
    build = _gauge("gpuslice_build_info", "gpuslice's version; always 1", ["version"])
    build.add_metric([version], 1)
    up = _gauge("gpuslice_source_up", "1 if the source (accountant, nvml) was read at this "
                "scrape, 0 if not (the exporter's log and `gpuslice status` say why)", ["source"])
    for source in ("accountant", "nvml"):
        up.add_metric([source], 0 if source in snap.problems or SCRAPE in snap.problems else 1)

    total = _gauge("gpuslice_card_memory_total_bytes", "the card's memory", CARD_LABELS)
    reserved = _gauge("gpuslice_card_memory_reserved_bytes",
                      "memory the accountant has reserved on the card for containers",
                      CARD_LABELS)
    used = _gauge("gpuslice_card_memory_used_bytes", "memory in use on the card, as NVML "
                  "says (every process, in a container or not)", CARD_LABELS)
    busy = _gauge("gpuslice_card_utilization_ratio", "share of NVML's last sample period in "
                  "which a kernel ran on the card (0-1)", CARD_LABELS)
    cores = _gauge("gpuslice_card_compute_reserved_ratio", "sum of the compute caps of the "
                   "card's slices, as a share of the card (0-1; more than 1 when overcommitted)",
                   CARD_LABELS)
    healthy = _gauge("gpuslice_card_healthy", "1 if the card is in service, 0 if the "
                     "accountant holds it out of service", CARD_LABELS)
    mode = _gauge("gpuslice_card_mode_info", "how the card is shared: mode time (a compute "
                  "cap is card time) or mps (a compute cap is an MPS SM share); 1",
                  CARD_LABELS + ["mode"])
    health = _gauge("gpuslice_card_health_info", "why the card is out of service (reason, "
                    "empty while healthy); always 1", CARD_LABELS + ["reason"])
    since = _gauge("gpuslice_card_unhealthy_since_seconds", "when the card went out of "
                   "service, Unix time", CARD_LABELS)
    xid = CounterMetricFamily("gpuslice_card_xid_errors", "critical XID errors that took the "
                              "card out of service (the health watcher's unhealthy events of "
                              "cause xid)", labels=CARD_LABELS)

    info = _gauge("gpuslice_container_info", "a container's slice on a card: its device, "
                  "priority and runtime; always 1",
                  CONTAINER_LABELS + ["device", "priority", "runtime"])
    limit = _gauge("gpuslice_container_memory_limit_bytes", "the container's memory slice "
                   "on the card (the card's memory for a whole card)", CONTAINER_LABELS)
    cused = _gauge("gpuslice_container_memory_used_bytes", "memory the container's processes "
                   "hold on the card, as its region says (absent when the region cannot be "
                   "believed)", CONTAINER_LABELS)
    cap = _gauge("gpuslice_container_compute_cap_ratio", "the container's compute cap as a "
                 "share of the card (0-1); absent when it has none", CONTAINER_LABELS)
    card_time = CounterMetricFamily("gpuslice_container_card_seconds", "card time the compute "
                                    "limiter charged to the container (rate() is its share of "
                                    "the card); capped containers only", labels=CONTAINER_LABELS)
    throttled = CounterMetricFamily("gpuslice_container_throttled_seconds", "time the "
                                    "container's processes slept to keep to the cap; capped "
                                    "containers only", labels=CONTAINER_LABELS)
    procs = _gauge("gpuslice_container_processes", "CUDA processes of the container alive in "
                   "its region", CONTAINER_LABELS)
    gang = _gauge("gpuslice_container_gang_info", "a slice of a gang (one device, a slice on "
                  "each of several cards): its place in the gang (the CUDA ordinal the "
                  "container sees the card as) and the gang's size; 1",
                  CONTAINER_LABELS + ["slot", "slices"])
    pmem = _gauge("gpuslice_process_memory_used_bytes", "memory one process holds on the card "
                  "(pid in the container's pid namespace)", ["container_id", "card_uuid", "pid"])

    for c in snap.cards:
        card = [str(c.card.index), c.card.uuid, c.card.name]
        total.add_metric(card, c.total_bytes)
        reserved.add_metric(card, c.reserved_mib * snapshot.MIB)
        if c.nvml is not None:
            used.add_metric(card, c.nvml.used_bytes)
            if c.nvml.utilization is not None:
                busy.add_metric(card, c.nvml.utilization)
        cores.add_metric(card, c.cores / 100)
        healthy.add_metric(card, 1 if c.card.healthy else 0)
        health.add_metric(card + [shown(c.card.health_reason)], 1)
        mode.add_metric(card + [c.card.mode], 1)
        if not c.card.healthy and c.card.health_since is not None:
            since.add_metric(card, c.card.health_since)
        xid.add_metric(card, snap.events.count("unhealthy", c.card.uuid, cause="xid"))
        for k in c.containers:
            r = k.reservation
            # Tenant text (the name is an annotation) by text.h's rule: a label
            # is shown in terminals and dashboards.
            labels = [r.container_id, shown(k.name), c.card.uuid, shown(k.profile)]
            info.add_metric(labels + [shown(r.device), r.priority, shown(r.runtime)], 1)
            limit.add_metric(labels, k.limit_bytes)
            if k.used_bytes is not None:
                cused.add_metric(labels, k.used_bytes)
            if k.core_limit:
                cap.add_metric(labels, k.core_limit / 100)
            if k.card_seconds is not None:
                card_time.add_metric(labels, k.card_seconds)
            if k.throttled_seconds is not None:
                throttled.add_metric(labels, k.throttled_seconds)
            procs.add_metric(labels, len(k.claim.processes))
            if k.gang:
                gang.add_metric(labels + [str(r.slot), str(len(k.gang))], 1)
            for p in k.claim.processes:
                pmem.add_metric([r.container_id, c.card.uuid, str(p.pid)], p.used_bytes)

    admissions = CounterMetricFamily("gpuslice_admissions", "admission decisions of the "
                                     "hook, by result and the refusal's reason",
                                     labels=["result", "reason"])
    admissions.add_metric(["admitted", ""], snap.events.count("admit"))
    for reason, n in sorted(snap.events.by_reason("refuse").items()):
        admissions.add_metric(["refused", shown(reason)], n)
    releases = CounterMetricFamily("gpuslice_releases", "reservations given back, by why "
                                   "(release: poststop; operator-release: `gpuslice release`; "
                                   "undo: a create that failed after admission)",
                                   labels=["kind"])
    for kind in snapshot.RELEASE_KINDS:
        releases.add_metric([kind], snap.events.count(kind))
    reclaims = CounterMetricFamily("gpuslice_reclaims", "reservations of dead containers "
                                   "reclaimed (gc, or at an admission)")
    reclaims.add_metric([], snap.events.count("reclaim"))
    return [build, up, total, reserved, used, busy, cores, healthy, health, mode, since, xid,
            info, limit, cused, cap, card_time, throttled, procs, gang, pmem,
            admissions, releases, reclaims]


def registry(collector: NodeCollector) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    return reg


def serve(state_dir: str, database: str, driver_root: str, listen: Tuple[str, int],
          names: Optional[engine_names.Lookup] = None) -> None:
    """Serve /metrics until killed. Problems of a source are logged once per change."""
    from prometheus_client import make_wsgi_app

    from ocihook import httpserve

    collector = NodeCollector(state_dir, database, Sampler(driver_root), names)
    app = make_wsgi_app(registry(collector))
    told: Dict[str, str] = {}

    def logged(environ, start_response):  # type: ignore[no-untyped-def]
        out = app(environ, start_response)
        # What went wrong in this scrape, once per new wording.
        for source, why in list(collector.last_problems.items()):
            if told.get(source) != why:
                print(f"gpuslice exporter: {source}: {why}", file=sys.stderr, flush=True)
                told[source] = why
        for source in [s for s in told if s not in collector.last_problems]:
            print(f"gpuslice exporter: {source}: read again", file=sys.stderr, flush=True)
            del told[source]
        return out

    addr, port = listen
    httpd = httpserve.make(addr, port, logged)
    print(f"gpuslice exporter: serving http://{'[' + addr + ']' if ':' in addr else addr}:"
          f"{httpd.server_port}/metrics", file=sys.stderr, flush=True)
    httpd.serve_forever()
