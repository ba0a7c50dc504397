"""The PS's configuration: one typed object, fed by flags and ELASTIC_PS_* variables.

Every flag `--some-flag` also reads `ELASTIC_PS_SOME_FLAG` (the flag wins). The master reads
the same prefix, so `ELASTIC_PS_PORT`, `ELASTIC_PS_HOST`, `ELASTIC_PS_THREADS` and
`ELASTIC_PS_LOG_LEVEL` set in a shell reach both: set them per process.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

from rpckit import auth, metrics
from rpckit.settings import ENV_PREFIX, LOG_LEVELS, FlagParser, describe

from .store.limits import Limits

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
    num_ps: int = 0  # 0: the master's PS layout says (1 with --standalone)
    checkpoint_dir: str = "ps-checkpoints"
    checkpoint_interval: float = 30.0
    delta_interval: float = 0.0
    keep_checkpoints: int = 3
    max_staleness: int = -1
    threads: int = -1  # dataplane.AUTO
    grpc_threads: int = 8
    register_interval: float = 2.0
    max_frame_mb: int = 2048
    applied_capacity: int = 100_000
    max_request_names: int = Limits.max_names
    max_request_frames: int = Limits.max_frames
    max_new_rows: int = Limits.max_new_rows
    torch_threads: int = 1
    replica_ack_timeout: float = 2.0
    metrics_port: int = -1
    log_level: str = "INFO"
    tls_cert: str = ""
    tls_key: str = ""
    tls_ca: str = ""  # verifies the master
    auth_token: str = ""
    auth_token_file: str = ""

    @property
    def limits(self) -> Limits:
        return Limits(self.max_request_names, self.max_request_frames, self.max_new_rows)

    def describe(self) -> str:
        return describe(self, redact=auth.SECRET_FIELDS)

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


def parse(argv: list[str] | None = None) -> PSSettings:
    d = PSSettings()
    p = FlagParser("elastic-ps", "One elastic-ps parameter server: gRPC control on --port, "
                   "ZeroMQ data plane on --data-port.")
    p.flag("--master", d.master,
           "the master's host:port (or a comma-separated list: leader and standbys), to "
           "register with (required unless --standalone)")
    p.flag("--standalone", d.standalone, "run without a master (benchmarks, tests)")
    p.flag("--host", d.host, "address to listen on")
    p.flag("--advertise-host", d.advertise_host,
           "host workers reach this PS at (default: --host, or this machine's address when "
           "--host is a wildcard)")
    p.flag("--port", d.port, "gRPC control port; 0 picks a free one")
    p.flag("--data-port", d.data_port, "ZeroMQ data port; 0 picks a free one")
    p.flag("--data-ipc", d.data_ipc,
           "also serve the data plane on a same-host socket for workers on this machine (a "
           "plain Unix stream socket, unix://PATH, not ZeroMQ; none under TLS, whose data "
           "plane is only CURVE over TCP): 'auto' (a fresh path in the temp directory), "
           "'off', or a path. Clients that find it switch to it by themselves")
    p.flag("--index", d.index, "this PS's index, 0..num_ps-1 (or an index `elastic-ctl "
           "resize-ps` adds)")
    p.flag("--num-ps", d.num_ps,
           "how many PS the model is split over; 0 or left out: the master's PS layout says "
           "(the first PS of a job makes the layout: left out, 1). When given it must match "
           "the layout (or, for an index a resize adds, the target): else exit 1 naming "
           "`elastic-ctl resize-ps`")
    p.flag("--checkpoint-dir", d.checkpoint_dir,
           "directory for this PS's checkpoints (shared by PS is fine)")
    p.flag("--checkpoint-interval", d.checkpoint_interval,
           "seconds between checkpoints when something changed (0: only on SIGTERM and the "
           "Checkpoint RPC)")
    p.flag("--delta-interval", d.delta_interval,
           "seconds between delta checkpoints (only the rows changed or evicted since the "
           "last file; restore is the newest full one plus its deltas) when something "
           "changed (0: none)")
    p.flag("--keep-checkpoints", d.keep_checkpoints, "checkpoint files kept per PS")
    p.flag("--max-staleness", d.max_staleness,
           "refuse a gradient more than this many versions stale (FAILED_PRECONDITION, "
           "reason STALE_GRADIENT); -1: accept any")
    p.flag("--threads", d.threads,
           "data plane handler threads (0: one thread serves the socket directly; -1: so "
           "does one, and 4 handlers behind a proxy while this PS is a primary with "
           "backups)")
    p.flag("--grpc-threads", d.grpc_threads, "gRPC handler threads")
    p.flag("--register-interval", d.register_interval,
           "seconds between checks that the master still lists this PS")
    p.flag("--max-frame-mb", d.max_frame_mb,
           "largest data frame accepted, in MiB (a bigger one drops the peer)")
    p.flag("--applied-capacity", d.applied_capacity,
           "clients remembered for at-most-once pushes")
    p.flag("--max-request-names", d.max_request_names,
           "tensors one Pull may name (and one Push or InitParameters carry); more is refused "
           "(RESOURCE_EXHAUSTED, reason TOO_LARGE)")
    p.flag("--max-request-frames", d.max_request_frames,
           "frames one data-plane message may have, header included; a longer one is refused "
           "before its frames are kept")
    p.flag("--max-new-rows", d.max_new_rows,
           "embedding rows one PullRows or PushRows may create; more is refused (TOO_LARGE) "
           "before any is made (each new row costs memory and time under the table's lock)")
    p.flag("--torch-threads", d.torch_threads,
           "torch intra-op threads (0: torch's default). 1 by default: the PS's updates are "
           "memory-bound, and OpenMP teams spin-waiting in several handler threads starve the "
           "handlers and ZeroMQ's I/O thread of cores")
    p.flag("--replica-ack-timeout", d.replica_ack_timeout,
           "seconds a primary waits for an in-sync backup to acknowledge a mutation before it "
           "drops that backup (which then copies the primary again)")
    metrics.add_flag(p, d.metrics_port)
    p.flag("--log-level", d.log_level, "log level", choices=LOG_LEVELS)
    auth.add_flags(p, server=True, client=True)  # --tls-ca: towards the master
    return p.settings(PSSettings, argv, check)


def check(s: PSSettings) -> list[str]:
    problems = auth.flag_problems(s)
    if not s.master and not s.standalone:
        problems.append(f"--master HOST:PORT is required (or {ENV_PREFIX}MASTER; --standalone "
                        "runs without one)")
    if s.master and ":" not in s.master:
        problems.append(f"--master {s.master!r} must be host:port")
    for flag, port in (("--port", s.port), ("--data-port", s.data_port)):
        if not 0 <= port <= 65535:
            problems.append(f"{flag} {port} is not in 0..65535")
    problems += metrics.port_problems(s.metrics_port,
                                      {"--port": s.port, "--data-port": s.data_port})
    if s.port and s.port == s.data_port:
        problems.append("--port and --data-port must differ")
    if s.num_ps < 0:
        problems.append(f"--num-ps must be >= 1 (or 0: the master's layout), got {s.num_ps}")
    elif s.index < 0:
        problems.append(f"--index must be >= 0, got {s.index}")
    elif s.num_ps and s.index >= s.num_ps:
        problems.append(f"--index {s.index} is outside 0..{s.num_ps - 1} (--num-ps {s.num_ps})")
    elif s.standalone and s.index >= max(1, s.num_ps):
        problems.append(f"--index {s.index} needs --num-ps above it with --standalone")
    if s.checkpoint_interval < 0:
        problems.append("--checkpoint-interval must be >= 0")
    if s.delta_interval < 0:
        problems.append("--delta-interval must be >= 0")
    if s.keep_checkpoints < 1:
        problems.append("--keep-checkpoints must be >= 1")
    if s.max_staleness < -1:
        problems.append("--max-staleness must be >= 0, or -1 for no limit")
    if s.threads < -1 or s.grpc_threads < 2:
        problems.append("--threads must be >= -1 (-1: automatic) and --grpc-threads >= 2")
    if s.register_interval <= 0:
        problems.append("--register-interval must be > 0")
    if s.max_frame_mb < 1:
        problems.append("--max-frame-mb must be >= 1")
    if s.applied_capacity < 1:
        problems.append("--applied-capacity must be >= 1")
    if not s.replica_ack_timeout > 0:
        problems.append("--replica-ack-timeout must be > 0")
    problems += s.limits.check()
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
