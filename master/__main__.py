"""`elastic-master` / `python -m master`: start the master and serve until SIGTERM or SIGINT.

Any number of masters may run on one `--db`. Each binds its port at once, then competes for
the leader lease (master/ha/leader.py, master/ha/election.py): the winner loads the state from the
database and serves; the others are standbys (health NOT_SERVING, every Master call refused
with NOT_LEADER naming the leader) until the leader's lease runs out, when one of them takes
over. A leader that loses its lease (it was frozen past it, or could not reach the database
to renew it) exits with status 4 and never writes again: restarted, it comes back as a
standby. On SIGTERM a leader finishes its calls, commits, and frees the lease, so a standby
takes over at its next look (0.1 s) instead of after a whole lease.
"""
from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import uuid

from grpc_health.v1 import health_pb2

from rpckit import auth
from rpckit import server as rpc_server
from rpckit.metrics import Metrics, MetricsPortInUse, RpcLatency
from rpckit.server import PortInUse, announce, run_main

from . import metrics as master_metrics
from .core import MasterCore, Settings
from .ha.election import Deposed, Election
from .ha.gate import LeaderGate
from .ha.leader import LeaderLease
from .persistence.committer import Committer
from .persistence.store import Store, StoreError
from .ps.layout import SlotsMismatch
from .ps.monitor import PSMonitor
from .ps.mover import SlotMover
from .server import SERVICE, MasterServicer, register
from .settings import MasterSettings, parse

log = logging.getLogger("elastic-master")
TICK_S = 0.05  # loss detection lag on top of --worker-timeout
EXIT_DEPOSED = 4  # lost the leader lease: restart as a standby
START_LEADING_S = 60.0  # how long a start that won the lease may take to load the state


def _core_settings(s: MasterSettings) -> Settings:
    return Settings(
        heartbeat_interval=s.heartbeat_interval, worker_timeout=s.worker_timeout,
        max_shard_failures=s.max_shard_failures, min_workers=s.min_workers, max_wait=s.max_wait,
        ps_replicas=s.ps_replicas,
        ps_lease_s=s.ps_lease_s, ps_slots=s.ps_slots,
    )


def _advertised(settings: MasterSettings, port: int) -> str:
    if settings.advertise:
        return settings.advertise
    host = settings.host
    if host in ("0.0.0.0", "::", ""):
        host = socket.gethostname()
    return rpc_server.listen_address(host, port)


class Leading:
    """What a master runs while it leads: the core, its committer, the ticker, the PS
    monitor. Built from the database once the lease is ours (so after the last commit of
    any earlier leader)."""

    def __init__(self, settings: MasterSettings, store: Store, servicer: MasterServicer,
                 election: Election, stop: threading.Event, fail, address: str = ""):
        snapshot = store.load()
        self.core = MasterCore(_core_settings(settings), snapshot=snapshot)
        store.fence = election.fence
        self.committer = Committer(self.core, store, fail)
        servicer.core, servicer.committer = self.core, self.committer
        self.committer.start()
        self.committer.flush()  # the master_started event and any restore-time requeues
        self.stop = stop
        threading.Thread(target=self._tick, name="ticker", daemon=True).start()
        self.monitor = PSMonitor(self.core, self.committer, timeout=settings.worker_timeout,
                                 tls_ca=settings.tls_ca,
                                 failover_timeout=settings.ps_failover_timeout)
        self.monitor.start()
        # a resize's slot moves (master/ps/mover.py): it calls the PS as the monitor does
        self.mover = SlotMover(self.core, self.committer, tls_ca=settings.tls_ca,
                               token=auth.read_token(settings.auth_token,
                                                     settings.auth_token_file))
        self.mover.start()
        # the job this master was started with (--job); without one it launches nothing, as
        # before (and loads none of the job's code)
        self.driver = None
        if settings.job:
            from .job.leading import start_driver
            self.driver = start_driver(settings, store, self.core, self.committer, address)
        servicer.driver = self.driver

    def _tick(self) -> None:
        while not self.stop.wait(TICK_S):
            try:
                self.committer.call(self.core.tick)
            except Exception:  # noqa: BLE001 - the committer reports fatal errors itself
                if self.committer.fatal is None:
                    log.exception("tick failed")
                else:
                    return

    def close(self) -> None:
        if self.driver is not None:
            self.driver.close()
        self.monitor.stop.set()
        self.mover.stop.set()
        self.committer.stop()


def _job_metrics(settings: MasterSettings, metrics: Metrics, leading) -> None:
    """With a job: the scaler's targets and decisions (master/job/metrics.py), read from the
    driver of the term this master leads (`leading()`: the Leading, or None)."""
    if settings.job:
        from .job.metrics import JobCollector
        metrics.registry.register(JobCollector(
            lambda: getattr(leading(), "driver", None)))


def run(settings: MasterSettings) -> int:
    stop = threading.Event()
    exit_code = [0]
    leading: list[Leading] = []
    ready = threading.Event()  # the core is loaded and serving
    servicer = MasterServicer(None, None, None)  # core and committer come with the lease
    election: Election | None = None

    def leader() -> str:
        return election.leader_address if election is not None else ""

    gate = LeaderGate(SERVICE, leading=lambda: ready.is_set() and election.serving,
                      leader=leader)
    # Ports first, the database after: a start that cannot listen leaves no database behind.
    metrics = Metrics() if settings.metrics_port >= 0 else None
    try:
        metrics_port = metrics.serve(settings.host, settings.metrics_port) if metrics else 0
        server, port, health = rpc_server.build_server(
            settings.host, settings.port, settings.threads,
            [(register, servicer)], [SERVICE],
            credentials=auth.server_credentials(settings.tls_cert, settings.tls_key),
            # latency first (refused calls are timed too); then the token: an
            # unauthenticated caller learns nothing, not even the leader
            interceptors=[*([RpcLatency(metrics)] if metrics else []),
                          *auth.server_interceptors(
                              auth.read_token(settings.auth_token, settings.auth_token_file)),
                          gate],
        )
    except (PortInUse, MetricsPortInUse, auth.SecurityConfigError) as exc:
        print(f"elastic-master: {exc}", file=sys.stderr)
        if metrics:
            metrics.close()
        return 1
    try:
        store = Store(settings.db)
        store.upgrade()
        stored = store.ps_slots()
        if stored and stored != settings.ps_slots:  # fixed for the job: refuse before leading
            raise SlotsMismatch(
                f"--ps-slots {settings.ps_slots} but the job on this --db has a PS layout of "
                f"{stored} slots: the slot count is fixed for a job, since rows and tensors "
                f"are placed by slot. Start the master with --ps-slots {stored}, or give a new "
                "job a new --db")
    except Exception as exc:  # noqa: BLE001 - unreachable, a broken schema, gone away
        why = exc if isinstance(exc, (StoreError, SlotsMismatch)) else \
            f"cannot prepare the database: {exc}"
        print(f"elastic-master: {why}", file=sys.stderr)
        server.stop(None)
        if metrics:
            metrics.close()
        return 1
    servicer.store = store
    for name in ("", SERVICE):
        health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    address = _advertised(settings, port)

    def fail(code: int, why: str) -> None:
        if not exit_code[0]:
            exit_code[0] = code
            log.critical("stopping: %s", why)
        ready.clear()
        stop.set()

    def on_fatal(exc: BaseException) -> None:
        if isinstance(exc, Deposed):
            fail(EXIT_DEPOSED, str(exc))
        else:
            fail(3, f"commit failed: {exc}")

    def on_elected(term: int) -> None:
        try:
            leading.append(Leading(settings, store, servicer, election, stop, on_fatal,
                                   address))
        except Exception as exc:  # noqa: BLE001 - cannot lead: let a standby do it
            fail(3, f"cannot load the state as the new leader: {exc}")
            return
        ready.set()
        for name in ("", SERVICE):
            health.set(name, health_pb2.HealthCheckResponse.SERVING)
        announce(f"elastic-master leading (term {term}) at {address}")

    lease = LeaderLease(f"{address}/{os.getpid()}/{uuid.uuid4().hex[:8]}", address,
                        settings.leader_lease_s)
    if metrics:
        master_metrics.install(
            metrics, store,
            serving=lambda: ((servicer.core, servicer.committer) if ready.is_set()
                             else (None, None)),
            leader=lambda: (lease.role.value == "leader" and ready.is_set(), lease.term))
        _job_metrics(settings, metrics,
                     lambda: leading[-1] if ready.is_set() and leading else None)
    election = Election(store.engine, lease,
                        on_elected, lambda why: fail(EXIT_DEPOSED, f"{why}; restart as standby"))
    server.start()
    try:
        election.step()  # a free lease, or our own seat: lead before telling anyone we listen
    except Exception as exc:  # noqa: BLE001 - the election thread tries again
        log.warning("leader lease: %s", exc)
    if lease.role.value == "leader":
        ready.wait(START_LEADING_S)
    log.info("settings: %s", settings.describe())
    if settings.port == 0:
        log.warning("--port 0: listening on port %d for this run only; restarted, the master "
                    "gets another port and its workers and PS cannot find it: give a fixed "
                    "--port to a job that must survive a restart (docs/operations.md)", port)
    role = "leader" if ready.is_set() else f"standby (leader: {leader() or 'none yet'})"
    shown = f", metrics on http://{settings.host}:{metrics_port}/metrics" if metrics else ""
    announce(f"elastic-master listening on {settings.host}:{port} (pid {os.getpid()}) as "
             f"{role}{shown}")
    threading.Thread(target=election.run, args=(stop,), name="election", daemon=True).start()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    log.info("stopping")
    health.enter_graceful_shutdown()
    server.stop(grace=2).wait()
    ready.clear()
    for part in leading:
        part.close()
    if not exit_code[0] and all(p.committer.fatal is None for p in leading):
        try:
            election.release()
        except Exception as exc:  # noqa: BLE001 - a standby takes over after the lease instead
            log.warning("could not free the leader lease: %s", exc)
    store.close()
    if metrics:
        metrics.close()
    return exit_code[0]


def main(argv: list[str] | None = None) -> None:
    run_main(parse, run, argv)


if __name__ == "__main__":
    main()
