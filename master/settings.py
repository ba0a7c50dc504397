"""The master's configuration: one typed object, fed by flags and ELASTIC_PS_* variables."""
from __future__ import annotations

import argparse
import os
from dataclasses import asdict, dataclass

ENV_PREFIX = "ELASTIC_PS_"


@dataclass(frozen=True)
class MasterSettings:
    host: str = "0.0.0.0"
    port: int = 50051
    db: str = "sqlite:///master.db"
    heartbeat_interval: float = 1.0
    worker_timeout: float = 3.0
    max_shard_failures: int = 3
    min_workers: int = 0
    max_wait: float = 0.0
    threads: int = 64
    log_level: str = "INFO"

    def describe(self) -> str:
        from .store import _safe_url

        values = asdict(self)
        values["db"] = _safe_url(self.db)
        return " ".join(f"{k}={v}" for k, v in values.items())


def _env(name: str, default):
    return os.environ.get(ENV_PREFIX + name.upper(), default)


def parse(argv: list[str] | None = None) -> MasterSettings:
    d = MasterSettings()
    p = argparse.ArgumentParser(
        prog="elastic-master",
        description="The elastic-ps master: Dataset Shard Service and worker/PS registry. "
        f"Every flag also reads {ENV_PREFIX}<FLAG> (e.g. {ENV_PREFIX}PORT).",
    )
    p.add_argument("--host", default=_env("host", d.host), help="address to listen on")
    p.add_argument("--port", type=int, default=_env("port", d.port),
                   help="gRPC port; 0 picks a free one and prints it")
    p.add_argument("--db", default=_env("db", d.db),
                   help="SQLAlchemy URL of the state database (default: %(default)s)")
    p.add_argument("--heartbeat-interval", type=float,
                   default=_env("heartbeat_interval", d.heartbeat_interval),
                   help="seconds between worker heartbeats (told to workers)")
    p.add_argument("--worker-timeout", type=float, default=_env("worker_timeout", d.worker_timeout),
                   help="seconds without a call after which a worker is declared lost")
    p.add_argument("--max-shard-failures", type=int,
                   default=_env("max_shard_failures", d.max_shard_failures),
                   help="FAILED reports after which a shard is quarantined")
    p.add_argument("--min-workers", type=int, default=_env("min_workers", d.min_workers),
                   help="hand out no shard until this many workers registered")
    p.add_argument("--max-wait", type=float, default=_env("max_wait", d.max_wait),
                   help="seconds after start to stop waiting for --min-workers (0: forever)")
    p.add_argument("--threads", type=int, default=_env("threads", d.threads),
                   help="gRPC handler threads")
    p.add_argument("--log-level", default=_env("log_level", d.log_level),
                   choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    a = p.parse_args(argv)  # bad flags: argparse prints why and exits 2
    s = MasterSettings(
        host=a.host, port=a.port, db=a.db, heartbeat_interval=a.heartbeat_interval,
        worker_timeout=a.worker_timeout, max_shard_failures=a.max_shard_failures,
        min_workers=a.min_workers, max_wait=a.max_wait, threads=a.threads,
        log_level=a.log_level,
    )
    problems = []
    if not 0 <= s.port <= 65535:
        problems.append(f"--port {s.port} is not in 0..65535")
    if not s.heartbeat_interval > 0:
        problems.append("--heartbeat-interval must be > 0")
    if not s.worker_timeout > s.heartbeat_interval:
        problems.append(
            f"--worker-timeout ({s.worker_timeout}) must be larger than --heartbeat-interval "
            f"({s.heartbeat_interval}), or live workers would be declared lost"
        )
    if s.max_shard_failures < 1:
        problems.append("--max-shard-failures must be >= 1")
    if s.min_workers < 0 or s.max_wait < 0:
        problems.append("--min-workers and --max-wait must be >= 0")
    if s.threads < 4:
        problems.append("--threads must be >= 4")
    if problems:
        p.error("; ".join(problems))
    return s
