"""The PS's configuration: one typed object, fed by flags and ELASTIC_PS_* variables.

Every flag `--some-flag` also reads `ELASTIC_PS_SOME_FLAG` (the flag wins). The master reads
the same prefix, so `ELASTIC_PS_PORT`, `ELASTIC_PS_HOST`, `ELASTIC_PS_THREADS` and
`ELASTIC_PS_LOG_LEVEL` set in a shell reach both: set them per process.
"""
from __future__ import annotations

import argparse
import os
import socket
from dataclasses import asdict, dataclass
from pathlib import Path

ENV_PREFIX = "ELASTIC_PS_"
WILDCARDS = ("", "0.0.0.0", "::", "[::]")


@dataclass(frozen=True)
class PSSettings:
    master: str = ""
    standalone: bool = False
    host: str = "0.0.0.0"
    advertise_host: str = ""
    port: int = 0
    data_port: int = 0
    data_ipc: str = "auto"
    index: int = 0
    num_ps: int = 1
    checkpoint_dir: str = "ps-checkpoints"
    checkpoint_interval: float = 30.0
    keep_checkpoints: int = 3
    max_staleness: int = -1
    threads: int = 4
    grpc_threads: int = 8
    register_interval: float = 2.0
    max_frame_mb: int = 2048
    applied_capacity: int = 100_000
    torch_threads: int = 1
    log_level: str = "INFO"

    def describe(self) -> str:
        return " ".join(f"{k}={v}" for k, v in asdict(self).items())

    @property
    def public_host(self) -> str:
        """The host others reach this PS at (registered with the master)."""
        if self.advertise_host:
            return self.advertise_host
        if self.host not in WILDCARDS:
            return self.host
        try:
            return socket.gethostbyname(socket.gethostname())
        except OSError:
            return "127.0.0.1"


def _env(name: str, default):
    return os.environ.get(ENV_PREFIX + name.upper(), default)


def _bool_env(name: str, default: bool) -> bool:
    value = os.environ.get(ENV_PREFIX + name.upper())
    if value is None:
        return default
    return value.strip().lower() in ("1", "true", "yes", "on")


def parse(argv: list[str] | None = None) -> PSSettings:
    d = PSSettings()
    p = argparse.ArgumentParser(
        prog="elastic-ps",
        description="One elastic-ps parameter server: gRPC control on --port, ZeroMQ data "
        f"plane on --data-port. Every flag also reads {ENV_PREFIX}<FLAG> "
        f"(e.g. {ENV_PREFIX}DATA_PORT).",
    )
    p.add_argument("--master", default=_env("master", d.master),
                   help="the master's host:port, to register with (required unless --standalone)")
    p.add_argument("--standalone", action="store_true", default=_bool_env("standalone", False),
                   help="run without a master (benchmarks, tests)")
    p.add_argument("--host", default=_env("host", d.host), help="address to listen on")
    p.add_argument("--advertise-host", default=_env("advertise_host", d.advertise_host),
                   help="host workers reach this PS at (default: --host, or this machine's "
                   "address when --host is a wildcard)")
    p.add_argument("--port", type=int, default=_env("port", d.port),
                   help="gRPC control port; 0 picks a free one")
    p.add_argument("--data-port", type=int, default=_env("data_port", d.data_port),
                   help="ZeroMQ data port; 0 picks a free one")
    p.add_argument("--data-ipc", default=_env("data_ipc", d.data_ipc),
                   help="also serve the data plane on a Unix socket (ZeroMQ ipc://) for "
                   "workers on this machine: 'auto' (a fresh path in the temp directory), "
                   "'off', or a path. Clients that find it switch to it by themselves")
    p.add_argument("--index", type=int, default=_env("index", d.index),
                   help="this PS's index, 0..num_ps-1")
    p.add_argument("--num-ps", type=int, default=_env("num_ps", d.num_ps),
                   help="how many PS the model is split over")
    p.add_argument("--checkpoint-dir", default=_env("checkpoint_dir", d.checkpoint_dir),
                   help="directory for this PS's checkpoints (shared by PS is fine)")
    p.add_argument("--checkpoint-interval", type=float,
                   default=_env("checkpoint_interval", d.checkpoint_interval),
                   help="seconds between checkpoints when something changed (0: only on "
                   "SIGTERM and the Checkpoint RPC)")
    p.add_argument("--keep-checkpoints", type=int,
                   default=_env("keep_checkpoints", d.keep_checkpoints),
                   help="checkpoint files kept per PS")
    p.add_argument("--max-staleness", type=int, default=_env("max_staleness", d.max_staleness),
                   help="refuse a gradient more than this many versions stale "
                   "(FAILED_PRECONDITION); -1: accept any")
    p.add_argument("--threads", type=int, default=_env("threads", d.threads),
                   help="data plane handler threads (0: one thread serves the socket directly)")
    p.add_argument("--grpc-threads", type=int, default=_env("grpc_threads", d.grpc_threads),
                   help="gRPC handler threads")
    p.add_argument("--register-interval", type=float,
                   default=_env("register_interval", d.register_interval),
                   help="seconds between checks that the master still lists this PS")
    p.add_argument("--max-frame-mb", type=int, default=_env("max_frame_mb", d.max_frame_mb),
                   help="largest data frame accepted, in MiB (a bigger one drops the peer)")
    p.add_argument("--applied-capacity", type=int,
                   default=_env("applied_capacity", d.applied_capacity),
                   help="clients remembered for at-most-once pushes")
    p.add_argument("--torch-threads", type=int, default=_env("torch_threads", d.torch_threads),
                   help="torch intra-op threads (0: torch's default). 1 by default: the PS's "
                   "updates are memory-bound, and OpenMP teams spin-waiting in several handler "
                   "threads starve the handlers and ZeroMQ's I/O thread of cores")
    p.add_argument("--log-level", default=_env("log_level", d.log_level),
                   choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    a = p.parse_args(argv)
    s = PSSettings(
        master=a.master, standalone=a.standalone, host=a.host, advertise_host=a.advertise_host,
        port=a.port, data_port=a.data_port, data_ipc=a.data_ipc, index=a.index, num_ps=a.num_ps,
        checkpoint_dir=a.checkpoint_dir, checkpoint_interval=a.checkpoint_interval,
        keep_checkpoints=a.keep_checkpoints, max_staleness=a.max_staleness, threads=a.threads,
        grpc_threads=a.grpc_threads, register_interval=a.register_interval,
        max_frame_mb=a.max_frame_mb, applied_capacity=a.applied_capacity,
        torch_threads=a.torch_threads, log_level=a.log_level,
    )
    problems = check(s)
    if problems:
        p.error("; ".join(problems))
    return s


def check(s: PSSettings) -> list[str]:
    problems = []
    if not s.master and not s.standalone:
        problems.append(f"--master HOST:PORT is required (or {ENV_PREFIX}MASTER; --standalone "
                        "runs without one)")
    if s.master and ":" not in s.master:
        problems.append(f"--master {s.master!r} must be host:port")
    for flag, port in (("--port", s.port), ("--data-port", s.data_port)):
        if not 0 <= port <= 65535:
            problems.append(f"{flag} {port} is not in 0..65535")
    if s.port and s.port == s.data_port:
        problems.append("--port and --data-port must differ")
    if s.num_ps < 1:
        problems.append(f"--num-ps must be >= 1, got {s.num_ps}")
    elif not 0 <= s.index < s.num_ps:
        problems.append(f"--index {s.index} is outside 0..{s.num_ps - 1} (--num-ps {s.num_ps})")
    if s.checkpoint_interval < 0:
        problems.append("--checkpoint-interval must be >= 0")
    if s.keep_checkpoints < 1:
        problems.append("--keep-checkpoints must be >= 1")
    if s.max_staleness < -1:
        problems.append("--max-staleness must be >= 0, or -1 for no limit")
    if s.threads < 0 or s.grpc_threads < 2:
        problems.append("--threads must be >= 0 and --grpc-threads >= 2")
    if s.register_interval <= 0:
        problems.append("--register-interval must be > 0")
    if s.max_frame_mb < 1:
        problems.append("--max-frame-mb must be >= 1")
    if s.applied_capacity < 1:
        problems.append("--applied-capacity must be >= 1")
    if s.torch_threads < 0:
        problems.append("--torch-threads must be >= 0")
    directory = Path(s.checkpoint_dir)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if not os.access(directory, os.W_OK):
            problems.append(f"--checkpoint-dir {directory} is not writable")
    except OSError as exc:
        problems.append(f"--checkpoint-dir {directory} cannot be created: {exc}")
    return problems
