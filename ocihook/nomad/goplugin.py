"""What HashiCorp's go-plugin asks of a plugin process, for one written in Python.

go-plugin's client (Nomad's, for every plugin) starts the plugin with a magic
cookie in its environment, reads one line from its stdout,
``CORE|APP|NETWORK|ADDRESS|PROTOCOL`` (here ``1|2|unix|<socket>|grpc``), dials
that address, and then speaks gRPC: the health service (``plugin`` must be
SERVING), the broker's stream (opened at once; this plugin offers no extra
connections on it), the controller's Shutdown (its graceful stop), newer
clients the stdio stream, and the plugin's own services.

A method of a service is served by the method of the same name on the object
given for it, ``Method(request, context)``, returning the answer or, for a
stream, yielding the answers.
"""
from __future__ import annotations

import os
import signal
import sys
import tempfile
import threading
from concurrent import futures
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import grpc
from google.protobuf import descriptor as _descriptor
from google.protobuf import descriptor_pb2

from ocihook.nomad.proto import go_plugin_pb2, health_pb2

CORE_PROTOCOL_VERSION = 1
# Nomad's plugins/base Handshake: the application protocol and the cookie.
APP_PROTOCOL_VERSION = 2
MAGIC_COOKIE_KEY = "NOMAD_PLUGIN_MAGIC_COOKIE"
MAGIC_COOKIE_VALUE = "e4327c2e01eabfd75a8a67adb114fb34a757d57eee7728d857a8cec6e91a7255"
HEALTH_SERVICE = "plugin"  # the name go-plugin's client asks the health service for


class HandshakeError(ValueError):
    """The process was not started as go-plugin starts a plugin; one line."""


def check_environment(env: Mapping[str, str]) -> None:
    """HandshakeError unless env is what go-plugin's client gives a Nomad plugin:
    the cookie, an application protocol list (when given) holding ours, and no
    AutoMTLS certificate (Nomad does not ask for it, and this plugin cannot
    serve it)."""
    cookie = env.get(MAGIC_COOKIE_KEY)
    if cookie is None:
        raise HandshakeError(f"{MAGIC_COOKIE_KEY} is not set: gpuslice-nomad-device is a Nomad "
                             "device plugin, started by a Nomad client (put it in the client's "
                             "plugin_dir, docs/nomad.md), not by hand")
    if cookie != MAGIC_COOKIE_VALUE:
        raise HandshakeError(f"{MAGIC_COOKIE_KEY} {cookie!r} is not Nomad's plugin cookie: "
                             "whatever started this is not a Nomad client")
    versions = env.get("PLUGIN_PROTOCOL_VERSIONS")
    if versions is not None and str(APP_PROTOCOL_VERSION) not in versions.split(","):
        raise HandshakeError(f"PLUGIN_PROTOCOL_VERSIONS {versions!r} does not offer protocol "
                             f"{APP_PROTOCOL_VERSION}, the only one this plugin speaks (Nomad's "
                             "0.9 and later)")
    if env.get("PLUGIN_CLIENT_CERT"):
        raise HandshakeError("PLUGIN_CLIENT_CERT is set: the client asks for AutoMTLS, which "
                             "gpuslice-nomad-device does not serve; Nomad's client does not ask "
                             "for it")


def handshake_line(socket_path: str) -> str:
    return f"{CORE_PROTOCOL_VERSION}|{APP_PROTOCOL_VERSION}|unix|{socket_path}|grpc\n"


def _message_class(desc: _descriptor.Descriptor) -> Any:
    try:
        from google.protobuf.message_factory import GetMessageClass  # protobuf 4.22+
    except ImportError:
        from google.protobuf import symbol_database

        return symbol_database.Default().GetSymbol(desc.full_name)
    return GetMessageClass(desc)


def service_handler(service: _descriptor.ServiceDescriptor, impl: object
                    ) -> grpc.GenericRpcHandler:
    """The handler of every method of `service`, served by impl's method of its name."""
    handlers: Dict[str, grpc.RpcMethodHandler] = {}
    for m in service.methods:
        # Whether a side streams: protobuf before 4.23 tells it only in the
        # method's descriptor proto.
        shape = descriptor_pb2.MethodDescriptorProto()
        m.CopyToProto(shape)
        fn = getattr(impl, m.name)
        req, resp = _message_class(m.input_type), _message_class(m.output_type)
        kind: Callable[..., grpc.RpcMethodHandler] = {
            (False, False): grpc.unary_unary_rpc_method_handler,
            (False, True): grpc.unary_stream_rpc_method_handler,
            (True, False): grpc.stream_unary_rpc_method_handler,
            (True, True): grpc.stream_stream_rpc_method_handler,
        }[(shape.client_streaming, shape.server_streaming)]
        handlers[m.name] = kind(fn, request_deserializer=req.FromString,
                                response_serializer=resp.SerializeToString)
    return grpc.method_handlers_generic_handler(service.full_name, handlers)


class _Health:
    def Check(self, request: Any, context: grpc.ServicerContext) -> Any:
        if request.service not in ("", HEALTH_SERVICE):
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)


class _Broker:
    """The broker's stream: the client opens it at once and may announce
    connections on it; this plugin dials none, so it reads until the end."""

    def StartStream(self, requests: Iterator[Any], context: grpc.ServicerContext
                    ) -> Iterator[Any]:
        for _ in requests:
            pass
        return iter(())


class _Controller:
    def __init__(self, stop: Callable[[], None]) -> None:
        self._stop = stop

    def Shutdown(self, request: Any, context: grpc.ServicerContext) -> Any:
        # After the answer has gone out: stopping first would cut the call.
        threading.Timer(0.05, self._stop).start()
        return go_plugin_pb2.Empty()


class _Stdio:
    """Newer clients mirror the plugin's output through this stream; this
    plugin logs on stderr, which every client reads anyway, so the stream
    stays open and empty until the plugin stops."""

    def __init__(self, stopped: threading.Event) -> None:
        self._stopped = stopped

    def StreamStdio(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        while not self._stopped.wait(1.0) and context.is_active():
            pass
        return iter(())


def serve(services: Sequence[Tuple[_descriptor.ServiceDescriptor, object]],
          on_stop: Optional[Callable[[], None]] = None, workers: int = 16) -> None:
    """Serve the plugin's services and go-plugin's on a fresh unix socket, print
    the handshake line, and return once the client asked for Shutdown or the
    process got SIGTERM. on_stop runs first (it ends the plugin's streams)."""
    stopped = threading.Event()
    # Newer clients may name the folder for the socket (go-plugin 1.5+).
    folder = tempfile.mkdtemp(prefix="gpuslice-nomad-",
                              dir=os.environ.get("PLUGIN_UNIX_SOCKET_DIR") or None)
    path = os.path.join(folder, "plugin.sock")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers))

    def stop() -> None:
        if stopped.is_set():
            return
        stopped.set()
        if on_stop:
            on_stop()
        server.stop(grace=1.0)

    ours: List[Tuple[_descriptor.ServiceDescriptor, object]] = [
        (health_pb2.DESCRIPTOR.services_by_name["Health"], _Health()),
        (go_plugin_pb2.DESCRIPTOR.services_by_name["GRPCBroker"], _Broker()),
        (go_plugin_pb2.DESCRIPTOR.services_by_name["GRPCController"], _Controller(stop)),
        (go_plugin_pb2.DESCRIPTOR.services_by_name["GRPCStdio"], _Stdio(stopped)),
    ]
    server.add_generic_rpc_handlers([service_handler(s, impl) for s, impl in
                                     [*ours, *services]])
    server.add_insecure_port(f"unix:{path}")
    server.start()
    # go-plugin's server ignores interrupts: the client sends them to its whole
    # process group on ^C and stops its plugins itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=stop).start())
    sys.stdout.write(handshake_line(path))
    sys.stdout.flush()
    try:
        server.wait_for_termination()
    finally:
        stop()
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        os.rmdir(folder)
