"""The servers the master benchmarks drive, each a child process (cluster.launch): our master
(from this checkout, or a patched copy with --master-src), DLRover 0.6.1's master from its own
venv, and a bare gRPC echo server set up like the master (the ceiling of any Python gRPC
master on this machine).

    python -m benchmarks.master.servers --threads 64    # the echo server alone
"""
from __future__ import annotations

import argparse
import os
import signal
import socket
import threading
import time
from pathlib import Path

from cluster.launch import Launcher, MasterProc, Proc

HOST = "127.0.0.1"
ECHO_METHOD = "/bench.Echo/Echo"
ECHO_PAYLOAD = b"x" * 16
SERVER_THREADS = 64  # the master's default --threads

MASTER_SRC: Path | None = None  # --master-src: run a patched copy of the master package


def serve_echo(threads: int) -> None:
    """A bare gRPC server set up like the master's, answering bytes with the same bytes."""
    from concurrent import futures

    import grpc

    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="grpc"),
        options=[("grpc.so_reuseport", 0)],
    )
    handler = grpc.unary_unary_rpc_method_handler(lambda request, context: request)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("bench.Echo", {"Echo": handler}),)
    )
    port = server.add_insecure_port(f"{HOST}:0")
    server.start()
    print(f"echo listening on {HOST}:{port} (pid {os.getpid()})", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.stop(grace=1).wait()


def start_master(launcher: Launcher, name: str, extra: tuple[str, ...] = ()) -> MasterProc:
    """Our master on a fresh SQLite file NAME.db in the launcher's directory (durable: WAL,
    synchronous=FULL); `python -m` puts cwd first on sys.path, so --master-src's copy wins."""
    db = f"sqlite:///{launcher.workdir / f'{name}.db'}"
    return launcher.master(*extra, db=db, name=name, **({"cwd": MASTER_SRC} if MASTER_SRC else {}))


def start_echo(launcher: Launcher, name: str) -> Proc:
    return launcher.python("-m", "benchmarks.master.servers", "--threads", str(SERVER_THREADS),
                           name=name, ready=r"listening on \S+:(?P<port>\d+)")


def start_dlrover(launcher: Launcher, name: str, python: str) -> Proc:
    """DLRover 0.6.1's master in local mode (in-memory shards), from a separate venv; it prints
    no port, so it is given a free one and is ready once it says so."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port = sock.getsockname()[1]
    return launcher.python("-m", "dlrover.python.master.main", "--platform", "local", "--port",
                           str(port), "--job_name", "bench", "--node_num", "32", name=name,
                           python=python, cwd=launcher.workdir, port=port,
                           ready="Master grpc server started")


def create_dataset(port: int, name: str, num_records: int, shard_size: int,
                   num_epochs: int) -> float:
    """CreateDataset on the master at `port`; the seconds it took."""
    import grpc

    from protos import master_pb2 as pb
    from protos import master_pb2_grpc as pb_grpc

    with grpc.insecure_channel(f"{HOST}:{port}") as channel:
        stub = pb_grpc.MasterStub(channel)
        t = time.perf_counter()
        stub.CreateDataset(pb.DatasetSpec(name=name, num_records=num_records,
                                          shard_size=shard_size, num_epochs=num_epochs,
                                          shuffle=True, seed=7), timeout=60)
        return time.perf_counter() - t


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="the bare gRPC echo server")
    parser.add_argument("--threads", type=int, default=SERVER_THREADS)
    serve_echo(parser.parse_args().threads)
