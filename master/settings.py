"""The master's configuration: one typed object, fed by flags and ELASTIC_PS_* variables."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pswire.slots import MAX_SLOTS
from rpckit import auth, metrics
from rpckit.settings import LOG_LEVELS, FlagParser, describe


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
    leader_lease_s: float = 5.0
    advertise: str = ""
    ps_replicas: int = 0
    ps_failover_timeout: float = 1.0
    metrics_port: int = -1
    ps_lease_s: float = 2.0
    ps_slots: int = 1024
    log_level: str = "INFO"
    tls_cert: str = ""
    tls_key: str = ""
    tls_ca: str = ""  # verifies the PS it health-checks
    auth_token: str = ""
    auth_token_file: str = ""
    job: str = ""          # a job spec (job.yaml): the leader drives it (master/job/)
    job_dir: str = ""      # where the job's processes log (default: next to the spec)
    job_masters: str = ""  # every master's address, given to the processes it launches
    job_owner: str = ""    # PID:START_TICKS of the elastic-job run that started this master

    def describe(self) -> str:
        from .persistence.store import _safe_url

        return describe(self, redact=auth.SECRET_FIELDS, rewrite={"db": _safe_url(self.db)})


def parse(argv: list[str] | None = None) -> MasterSettings:
    d = MasterSettings()
    p = FlagParser("elastic-master",
                   "The elastic-ps master: Dataset Shard Service and worker/PS registry.")
    p.flag("--host", d.host, "address to listen on")
    p.flag("--port", d.port, "gRPC port; 0 picks a free one and prints it")
    p.flag("--db", d.db, "SQLAlchemy URL of the state database (default: %(default)s)")
    p.flag("--heartbeat-interval", d.heartbeat_interval,
           "seconds between worker heartbeats (told to workers)")
    p.flag("--worker-timeout", d.worker_timeout,
           "seconds without a call after which a worker is declared lost")
    p.flag("--max-shard-failures", d.max_shard_failures,
           "FAILED reports after which a shard is quarantined")
    p.flag("--min-workers", d.min_workers, "hand out no shard until this many workers registered")
    p.flag("--max-wait", d.max_wait,
           "seconds after start to stop waiting for --min-workers (0: forever)")
    p.flag("--threads", d.threads, "gRPC handler threads")
    p.flag("--leader-lease-s", d.leader_lease_s,
           "seconds a leader's lease lasts without renewal; a standby on the same --db takes "
           "over after that")
    p.flag("--advertise", d.advertise,
           "host:port clients reach this master at, named to them by standbys (default: "
           "--host:port, or this machine's hostname:port when --host is a wildcard)")
    p.flag("--ps-replicas", d.ps_replicas,
           "backups per PS index: a PS started with the --index of a live primary copies it "
           "and takes over when it is lost (0: none, a new PS replaces the primary)")
    p.flag("--ps-failover-timeout", d.ps_failover_timeout,
           "seconds a PS primary with an in-sync backup may fail its health check before "
           "the backup is promoted")
    metrics.add_flag(p, d.metrics_port)
    p.flag("--ps-lease-s", d.ps_lease_s,
           "seconds a PS primary may answer pushes after its last contact with the master "
           "(with --ps-replicas); a backup that is not in sync takes over only once the old "
           "primary's lease ran out (plus 0.5 s)")
    p.flag("--ps-slots", d.ps_slots,
           f"hash slots rows and dense tensors are placed through (the PS layout), 1..{MAX_SLOTS}; "
           "fixed for the job: a restart with another value on the same --db is refused")
    p.flag("--log-level", d.log_level, "log level", choices=LOG_LEVELS)
    auth.add_flags(p, server=True, client=True)  # --tls-ca: the PS health checks
    p.flag("--job", d.job,
           "a job spec (job.yaml): the leader launches its PS and workers through its engine "
           "and drives them until every dataset is finished (elastic-job run starts masters "
           "with it); without it the master launches nothing")
    p.flag("--job-dir", d.job_dir,
           "where the job's processes write their logs (default: JOBNAME-run next to the spec)")
    p.flag("--job-masters", d.job_masters,
           "host:port of every master of the job, comma-separated, given to the processes it "
           "launches (default: this master's address)")
    p.flag("--job-owner", d.job_owner,
           "PID:START_TICKS of the process that started this master with --job on this "
           "machine (elastic-job run gives it): once it is gone, the job is stopped as Ctrl-C "
           "would and the master exits when the job has ended")
    return p.settings(MasterSettings, argv, check)  # bad flags: exit 2 with the reasons


def check(s: MasterSettings) -> list[str]:
    problems = auth.flag_problems(s)
    if not 0 <= s.port <= 65535:
        problems.append(f"--port {s.port} is not in 0..65535")
    problems += metrics.port_problems(s.metrics_port, {"--port": s.port})
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
    if not 0.5 <= s.leader_lease_s <= 300:
        problems.append(f"--leader-lease-s must be in 0.5..300, got {s.leader_lease_s}")
    if s.advertise and (":" not in s.advertise or len(s.advertise) > 256):
        problems.append(f"--advertise must be host:port, got {s.advertise!r}")
    if not 0 <= s.ps_replicas <= 8:
        problems.append(f"--ps-replicas must be in 0..8, got {s.ps_replicas}")
    if not s.ps_failover_timeout > 0:
        problems.append("--ps-failover-timeout must be > 0")
    if not 0.2 <= s.ps_lease_s <= 60:
        problems.append(f"--ps-lease-s must be in 0.2..60, got {s.ps_lease_s}")
    if not 1 <= s.ps_slots <= MAX_SLOTS:
        problems.append(f"--ps-slots must be in 1..{MAX_SLOTS}, got {s.ps_slots}")
    if s.job and not Path(s.job).is_file():
        problems.append(f"--job {s.job}: no such file")
    if s.job_owner and not (s.job and re.fullmatch(r"[0-9]{1,10}:[0-9]{1,20}", s.job_owner)):
        problems.append(f"--job-owner must be PID:START_TICKS, with --job; got "
                        f"{s.job_owner[:64]!r}")
    if len(s.job_masters) > 4096:
        problems.append("--job-masters is longer than 4096 characters")
    if s.threads < 4:
        problems.append("--threads must be >= 4")
    return problems
