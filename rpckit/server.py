"""One way to build a gRPC server and run a server binary, shared by the master and the PS.

`build_server` binds the port (refusing to share it with another process), adds the
servicers, gRPC health (every named service SERVING) and server reflection; `run_main` sets
up logging from the settings and exits with what `run` returns; `announce` prints a start line.
"""
from __future__ import annotations

import logging
import sys
from concurrent import futures
from typing import Callable, Iterable, Sequence

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class PortInUse(Exception):
    """The address could not be bound (in use, or not allowed)."""


def listen_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def build_server(
    host: str,
    port: int,
    threads: int,
    services: Sequence[tuple[Callable[[object, grpc.Server], None], object]],
    service_names: Iterable[str],
    thread_name_prefix: str = "grpc",
    interceptors: Sequence[grpc.ServerInterceptor] = (),
    credentials: grpc.ServerCredentials | None = None,
) -> tuple[grpc.Server, int, health.HealthServicer]:
    """A started-to-be server on host:port with `services` ((add_fn, servicer) pairs), health
    and reflection. Returns (server, bound port, health servicer); raises PortInUse."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix=thread_name_prefix),
        interceptors=list(interceptors),
        # 0: a second server on the same port fails instead of silently sharing it
        options=[("grpc.so_reuseport", 0)],
    )
    for add, servicer in services:
        add(servicer, server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = list(service_names)
    reflection.enable_server_reflection(
        [*names, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
         reflection.SERVICE_NAME], server)
    address = listen_address(host, port)
    try:
        if credentials is None:
            bound = server.add_insecure_port(address)
        else:
            bound = server.add_secure_port(address, credentials)
    except RuntimeError as exc:
        raise PortInUse(f"cannot listen on {address}: {exc}") from exc
    if bound == 0:
        raise PortInUse(f"cannot listen on {address}: the port is in use or not allowed")
    for name in ("", *names):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return server, bound, health_servicer


def announce(line: str) -> None:
    """Print a start line on stdout, newline included, in one write.

    print() writes the text and its newline in two calls; with unbuffered output
    (PYTHONUNBUFFERED, as launchers and containers set it) and stderr on the same file, a log
    line from another thread can land between them and run the two lines together."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def run_main(parse: Callable[[list[str] | None], object], run: Callable[[object], int],
             argv: list[str] | None = None) -> None:
    """Parse the settings (argparse exits 2 on bad flags), log at their level, run, exit."""
    settings = parse(argv)
    logging.basicConfig(level=getattr(settings, "log_level", "INFO"), format=LOG_FORMAT)
    sys.exit(run(settings))
