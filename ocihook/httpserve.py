"""The exporter's HTTP server: wsgiref's WSGI server, made so that no client can
hold another.

wsgiref's WSGIServer answers one connection at a time and reads a request
without a timeout, so one local client that connects and never finishes its
request line or headers stalls every scrape for as long as it likes. Here:
- each connection is read in a thread of its own, at most MAX_CLIENTS at once
  (a connection beyond that is closed at once: threads stay bounded);
- every read and write of a connection times out after IO_TIMEOUT_S, and the
  request line and headers must all arrive within REQUEST_DEADLINE_S (a client
  that sends a byte now and then is cut off too, by one watchdog thread);
- the application itself runs on one worker thread, one request after another,
  so the collector's SQLite connection and NVML stay on a single thread.
"""
from __future__ import annotations

import socket
import socketserver
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, Iterable, Tuple
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

MAX_CLIENTS = 64
IO_TIMEOUT_S = 5.0
REQUEST_DEADLINE_S = 10.0

WsgiApp = Callable[[dict, Callable[..., Any]], Iterable[bytes]]


class _Handler(WSGIRequestHandler):
    timeout = IO_TIMEOUT_S  # StreamRequestHandler puts it on the socket
    # The body goes out in one piece: with Nagle its tail waits for the
    # scraper's delayed ACK, which cost ~10 ms a scrape on loopback.
    disable_nagle_algorithm = True
    server: "_Server"

    def setup(self) -> None:
        super().setup()
        self.server.reading(self.connection)

    def parse_request(self) -> bool:
        ok = super().parse_request()
        self.server.read(self.connection)  # the request is in: the rest is ours to answer
        return ok

    def finish(self) -> None:
        self.server.read(self.connection)
        try:
            super().finish()
        except OSError:
            pass  # the client went away or was cut off

    def log_message(self, *args: object) -> None:
        pass  # one line per scrape would fill the journal


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = MAX_CLIENTS

    def __init__(self, address: Tuple[str, int], handler: type) -> None:
        self._clients = threading.BoundedSemaphore(MAX_CLIENTS)
        # Connections still reading their request, with their deadlines: one
        # watchdog thread for all of them cuts those that pass it.
        self._deadlines: Dict[socket.socket, float] = {}
        self._lock = threading.Lock()
        super().__init__(address, handler)
        threading.Thread(target=self._watch, name="request-deadlines", daemon=True).start()

    def reading(self, conn: socket.socket) -> None:
        with self._lock:
            self._deadlines[conn] = time.monotonic() + REQUEST_DEADLINE_S

    def read(self, conn: socket.socket) -> None:
        with self._lock:
            self._deadlines.pop(conn, None)

    def _watch(self) -> None:
        while True:
            time.sleep(0.25)
            now = time.monotonic()
            with self._lock:
                late = [c for c, t in self._deadlines.items() if t <= now]
                for c in late:
                    del self._deadlines[c]
            for c in late:
                try:
                    c.shutdown(socket.SHUT_RDWR)  # wakes its thread's recv(): it ends
                except OSError:
                    pass

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._clients.acquire(blocking=False):
            self.shutdown_request(request)  # full: refused, never queued behind others
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._clients.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._clients.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if isinstance(sys.exc_info()[1], OSError):
            return  # a timeout, a reset, a cut: the client's doing, not worth a line
        super().handle_error(request, client_address)


class _Server6(_Server):
    address_family = socket.AF_INET6


def one_at_a_time(app: WsgiApp) -> WsgiApp:
    """app run on a single worker thread, whichever thread asks."""
    worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="scrape")

    def serial(environ: dict, start_response: Callable[..., Any]) -> Iterable[bytes]:
        # The body is made in full on the worker (prometheus_client answers a list).
        return worker.submit(lambda: list(app(environ, start_response))).result()

    return serial


def make(addr: str, port: int, app: WsgiApp) -> WSGIServer:
    """A bound server for app (not yet serving: call serve_forever())."""
    server = (_Server6 if ":" in addr else _Server)((addr, port), _Handler)
    server.set_app(one_at_a_time(app))
    return server
