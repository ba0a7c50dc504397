"""Prometheus metrics shared by the master and the PS: the endpoint and RPC latency.

`Metrics` owns one `CollectorRegistry` per server (not prometheus-client's global one, so
several servers in one test process never collide) and serves it on
`http://HOST:PORT/metrics` (`--metrics-port`). `RpcLatency` is a gRPC server interceptor
that times every unary call per method and status code into
`elasticps_rpc_seconds{service, method, code}`; it is installed only when metrics are on.

Everything else a server exports is read from the counters it already keeps, by custom
collectors at scrape time (master/metrics.py, ps/metrics.py), so nothing is counted twice on
the hot paths.
"""
from __future__ import annotations

import logging
import threading
import time
import grpc
from prometheus_client import CollectorRegistry, Histogram, start_http_server

log = logging.getLogger(__name__)

PREFIX = "elasticps_"
# RPCs on 127.0.0.1 take 0.1-1 ms; the defaults (from 5 ms up) would put them all in one
# bucket. Commits and checkpoints reuse them up to 10 s.
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                   0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def add_flag(parser, default: int) -> None:
    """`--metrics-port` on a server's FlagParser (the same flag on master and PS)."""
    parser.flag("--metrics-port", default,
                "serve Prometheus metrics on http://--host:PORT/metrics (0: a free port, "
                "printed; -1: off; see docs/operations.md)")


def port_problems(metrics_port: int, others: dict[str, int]) -> list[str]:
    """What is wrong with `--metrics-port` next to the server's other ports (flag -> port)."""
    if not -1 <= metrics_port <= 65535:
        return [f"--metrics-port {metrics_port} is not in -1..65535 (-1: off)"]
    if metrics_port > 0 and metrics_port in others.values():
        return [f"--metrics-port must differ from {' and '.join(others)}"]
    return []


class MetricsPortInUse(Exception):
    """The metrics port could not be bound."""


class Metrics:
    """One server's metrics: a registry and, once `serve`d, its HTTP endpoint."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._httpd = None

    def histogram(self, name: str, doc: str, labels: tuple[str, ...] = (),
                  buckets: tuple[float, ...] = LATENCY_BUCKETS) -> Histogram:
        return Histogram(PREFIX + name, doc, labels, buckets=buckets, registry=self.registry)

    def serve(self, host: str, port: int) -> int:
        """Serve /metrics on host:port (0: a free port) in a daemon thread; the bound port."""
        try:
            httpd, _thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise MetricsPortInUse(f"cannot serve metrics on {host}:{port}: {exc}") from exc
        self._httpd = httpd
        return httpd.server_port

    def close(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None


class RpcLatency(grpc.ServerInterceptor):
    """Times every unary-unary call (refused ones too: put it first among the interceptors).
    Streaming calls (reflection) pass through untimed."""

    def __init__(self, metrics: Metrics):
        self.seconds = metrics.histogram(
            "rpc_seconds", "gRPC call latency on the server, per method and status code",
            ("service", "method", "code"))
        self._children: dict[tuple[str, str, str], object] = {}
        self._lock = threading.Lock()

    def _child(self, service: str, method: str, code: str):
        key = (service, method, code)
        child = self._children.get(key)
        if child is None:  # labels() takes a lock and builds a tuple: cache the child
            with self._lock:
                child = self._children[key] = self.seconds.labels(*key)
        return child

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        service, _, method = handler_call_details.method.lstrip("/").rpartition("/")
        behavior = handler.unary_unary
        observe = self._child

        def timed(request, context):
            started = time.perf_counter()
            code = "OK"
            try:
                return behavior(request, context)
            except BaseException:
                code = _code_name(context, "UNKNOWN")
                raise
            finally:
                if code == "OK":
                    code = _code_name(context, "OK")
                observe(service, method, code).observe(time.perf_counter() - started)

        return grpc.unary_unary_rpc_method_handler(
            timed, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)


def _code_name(context, default: str) -> str:
    try:
        code = context.code()
    except Exception:  # noqa: BLE001 - older grpcio: no code() on the server context
        return default
    if code is None:
        return default
    return code.name if isinstance(code, grpc.StatusCode) else str(code)

