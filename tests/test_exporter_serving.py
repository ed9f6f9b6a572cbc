"""`gpuslice exporter` as a server that local clients cannot stall (issue 27,
G1): clients that connect and never speak, or stop inside a request line or
the headers, hold no scrape; their connections are cut after the timeout; a
scrape that fails as a whole still answers, with every source down and the
cause in the log."""
from __future__ import annotations

import os
import socket
import time
import urllib.request
from pathlib import Path
from typing import List

import pytest

from exporter_node import Exporter, Node, samples, value
from fakehost import fake_gpu

# Generous functional bounds, not performance figures: a stalled exporter
# never answers; a working one answers in milliseconds.
ANSWER_WITHIN_S = 8
GIB = 1 << 30
MIB = 1 << 20


@pytest.fixture
def node(tmp_path: Path, driver_root: Path, fakedriver: Path) -> Node:
    return Node(tmp_path, driver_root, [fake_gpu(0, memory_mib=16384)])


def stallers(port: int) -> List[socket.socket]:
    """A client that says nothing, one that stops in the request line, one that
    stops in the headers."""
    out = []
    for sent in (b"", b"GET /metr", b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: "):
        s = socket.create_connection(("127.0.0.1", port), timeout=ANSWER_WITHIN_S)
        if sent:
            s.sendall(sent)
        out.append(s)
    time.sleep(0.3)  # let the exporter accept them before the scrape
    return out


def test_idle_and_unfinished_requests_hold_no_scrape(node: Node) -> None:
    node.admit("a" * 64, "4g", 0, memory_mib=4096)
    exp = Exporter(node)
    held = stallers(exp.port)
    try:
        for _ in range(3):
            with urllib.request.urlopen(exp.url, timeout=ANSWER_WITHIN_S) as r:
                assert r.status == 200
                m = samples(r.read().decode())
            assert value(m, "gpuslice_container_memory_limit_bytes",
                         container_id="a" * 64) == 4 * GIB
        # The server ends each stalled connection itself (its read timeout):
        # the client reads end-of-file, not its own timeout.
        for s in held:
            s.settimeout(30)
            assert s.recv(4096) == b""
    finally:
        for s in held:
            s.close()
        exp.stop()


def test_a_client_trickling_its_headers_is_cut_off(node: Node) -> None:
    """A byte now and then resets no deadline: the headers must all come
    within the request deadline."""
    from ocihook import httpserve

    exp = Exporter(node)
    s = socket.create_connection(("127.0.0.1", exp.port), timeout=5)
    try:
        s.sendall(b"GET /metrics HTTP/1.1\r\n")
        start = time.monotonic()
        closed = False
        while time.monotonic() - start < httpserve.REQUEST_DEADLINE_S + 20:
            try:
                s.sendall(b"X")
            except OSError:
                closed = True
                break
            s.settimeout(1)
            try:
                if s.recv(4096) == b"":
                    closed = True
                    break
            except socket.timeout:
                pass
        assert closed, "the trickling client was never cut off"
        assert time.monotonic() - start < httpserve.REQUEST_DEADLINE_S + 10
    finally:
        s.close()
        exp.stop()


def test_connections_are_bounded(node: Node) -> None:
    """Many idle connections cost a bounded number of threads; once they are
    cut, scrapes are answered again."""
    from ocihook import httpserve

    exp = Exporter(node)
    held = []
    try:
        for _ in range(httpserve.MAX_CLIENTS + 20):
            held.append(socket.create_connection(("127.0.0.1", exp.port), timeout=5))
        time.sleep(0.5)
        threads = int([line.split()[1] for line in
                       Path(f"/proc/{exp.proc.pid}/status").read_text().splitlines()
                       if line.startswith("Threads:")][0])
        assert threads <= httpserve.MAX_CLIENTS + 8, threads
        for s in held:
            s.close()
        held = []
        deadline = time.monotonic() + httpserve.REQUEST_DEADLINE_S + 10
        while True:
            try:
                with urllib.request.urlopen(exp.url, timeout=ANSWER_WITHIN_S) as r:
                    assert r.status == 200
                    break
            except OSError:
                assert time.monotonic() < deadline, "no scrape answered after the flood"
                time.sleep(0.2)
    finally:
        for s in held:
            s.close()
        exp.stop()


def test_a_failed_scrape_serves_sources_down_and_logs_its_cause(node: Node,
                                                                tmp_path: Path) -> None:
    """Without cffi (as on a host whose wheels lack it) a region cannot be
    read: the scrape answers 200 with every source 0, and the log names the
    cause in one line."""
    cid = "a" * 64
    node.admit(cid, "4g", 0, memory_mib=4096)
    node.region(cid, [(node.gpus[0]["uuid"], 4 * GIB, 512 * MIB)],
                [(7, {0: {"alloc": 512 * MIB}})])
    blocker = tmp_path / "nocffi"
    blocker.mkdir()
    (blocker / "cffi.py").write_text("raise ImportError('No module named cffi (blocked by the "
                                     "test)')\n")
    path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = f"{blocker}:{path}" if path else str(blocker)
    try:
        exp = Exporter(node)
    finally:
        if path:
            os.environ["PYTHONPATH"] = path
        else:
            del os.environ["PYTHONPATH"]
    try:
        for _ in range(2):
            with urllib.request.urlopen(exp.url, timeout=ANSWER_WITHIN_S) as r:
                assert r.status == 200
                m = samples(r.read().decode())
            assert value(m, "gpuslice_source_up", source="accountant") == 0
            assert value(m, "gpuslice_source_up", source="nvml") == 0
            assert value(m, "gpuslice_build_info") == 1
    finally:
        exp.stop()
    lines = [line for line in exp.log.read_text().splitlines() if "scrape" in line]
    assert len(lines) == 1, exp.log.read_text()
    assert "the scrape failed: ImportError: No module named cffi" in lines[0], lines
