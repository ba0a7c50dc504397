"""`elastic-master` / `python -m master`: start the master and serve until SIGTERM or SIGINT.

Any number of masters may run on one `--db`. Each binds its port at once, then competes for
the leader lease (master/ha/leader.py, master/ha/election.py): the winner loads the state from the
database and serves; the others are standbys (health NOT_SERVING, every Master call refused
with NOT_LEADER naming the leader) until the leader's lease runs out, when one of them takes
over. A leader that loses its lease (it was frozen past it, or could not reach the database
to renew it) exits with status 4 and never writes again: restarted, it comes back as a
standby. On SIGTERM a leader finishes its calls, commits, and frees the lease, so a standby
takes over at its next look (0.1 s) instead of after a whole lease.

`run` builds the parts from the settings in order: `listen` (the ports: a start that cannot
listen leaves no database behind), `open_store` (the database, upgraded and checked), then a
`Master` that campaigns, serves and closes; `Leading` is what it runs for each term it wins.
"""
from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import uuid
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health_pb2
from grpc_health.v1.health import HealthServicer

from rpckit import auth
from rpckit import server as rpc_server
from rpckit.metrics import Metrics, MetricsPortInUse, RpcLatency
from rpckit.server import PortInUse, announce, run_main

from . import metrics as master_metrics
from .core import MasterCore, Settings
from .ha.election import Deposed, Election
from .ha.gate import LeaderGate
from .ha.leader import LeaderLease, Leadership
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


class StartRefused(Exception):
    """A start that cannot go on: elastic-master prints the message and exits 1."""


@dataclass
class Listening:
    """The bound ports: gRPC (not started yet) and, with --metrics-port, the metrics page."""
    server: grpc.Server
    port: int
    health: HealthServicer
    metrics: Metrics | None
    metrics_port: int

    def set_health(self, status) -> None:
        for name in ("", SERVICE):
            self.health.set(name, status)

    def close(self) -> None:
        self.server.stop(None)
        if self.metrics:
            self.metrics.close()


def _interceptors(settings: MasterSettings, metrics: Metrics | None, gate) -> list:
    # latency first (refused calls are timed too); then the token: an unauthenticated caller
    # learns nothing, not even the leader
    return [*([RpcLatency(metrics)] if metrics else []),
            *auth.server_interceptors(auth.read_token(settings.auth_token,
                                                      settings.auth_token_file)),
            gate]


def listen(settings: MasterSettings, servicer: MasterServicer, gate) -> Listening:
    """Bind the metrics and gRPC ports, every service NOT_SERVING until the state is loaded.
    Ports come before the database: a start that cannot listen leaves no database behind."""
    metrics = Metrics() if settings.metrics_port >= 0 else None
    try:
        metrics_port = metrics.serve(settings.host, settings.metrics_port) if metrics else 0
        server, port, health = rpc_server.build_server(
            settings.host, settings.port, settings.threads, [(register, servicer)], [SERVICE],
            credentials=auth.server_credentials(settings.tls_cert, settings.tls_key),
            interceptors=_interceptors(settings, metrics, gate))
    except (PortInUse, MetricsPortInUse, auth.SecurityConfigError) as exc:
        if metrics:
            metrics.close()
        raise StartRefused(str(exc)) from None
    listening = Listening(server, port, health, metrics, metrics_port)
    listening.set_health(health_pb2.HealthCheckResponse.NOT_SERVING)
    return listening


def _check_slots(settings: MasterSettings, store: Store) -> None:
    stored = store.ps_slots()
    if stored and stored != settings.ps_slots:  # fixed for the job: refuse before leading
        raise SlotsMismatch(
            f"--ps-slots {settings.ps_slots} but the job on this --db has a PS layout of "
            f"{stored} slots: the slot count is fixed for a job, since rows and tensors "
            f"are placed by slot. Start the master with --ps-slots {stored}, or give a new "
            "job a new --db")


def open_store(settings: MasterSettings) -> Store:
    """The database, upgraded to the current schema and checked against --ps-slots."""
    try:
        store = Store(settings.db)
        store.upgrade()
        _check_slots(settings, store)
    except Exception as exc:  # noqa: BLE001 - unreachable, a broken schema, gone away
        why = exc if isinstance(exc, (StoreError, SlotsMismatch)) else \
            f"cannot prepare the database: {exc}"
        raise StartRefused(str(why)) from None
    return store


class Master:
    """One master process: it listens at once, campaigns for the leader lease, leads (a
    Leading per term won) or stands by, and stops on a signal or when it must (`fail`)."""

    def __init__(self, settings: MasterSettings):
        self.settings = settings
        self.stop = threading.Event()
        self.ready = threading.Event()  # the core is loaded and serving
        self.exit_code = 0
        self.leading: list[Leading] = []
        self.servicer = MasterServicer(None, None, None)  # core and committer come with the lease
        self.election: Election | None = None
        self.gate = LeaderGate(SERVICE, leading=self.serving, leader=self.leader)
        # set by `prepare`, once the ports are bound and the database is open
        self.listening: Listening | None = None
        self.store: Store | None = None
        self.address = ""
        self.lease: LeaderLease | None = None

    def serving(self) -> bool:
        return self.ready.is_set() and self.election.serving

    def leader(self) -> str:
        return self.election.leader_address if self.election is not None else ""

    def fail(self, code: int, why: str) -> None:
        if not self.exit_code:
            self.exit_code = code
            log.critical("stopping: %s", why)
        self.ready.clear()
        self.stop.set()

    def _on_fatal(self, exc: BaseException) -> None:
        if isinstance(exc, Deposed):
            self.fail(EXIT_DEPOSED, str(exc))
        else:
            self.fail(3, f"commit failed: {exc}")

    def _on_elected(self, term: int) -> None:
        try:
            self.leading.append(Leading(self.settings, self.store, self.servicer,
                                        self.election, self.stop, self._on_fatal,
                                        self.address))
        except Exception as exc:  # noqa: BLE001 - cannot lead: let a standby do it
            self.fail(3, f"cannot load the state as the new leader: {exc}")
            return
        self.ready.set()
        self.listening.set_health(health_pb2.HealthCheckResponse.SERVING)
        announce(f"elastic-master leading (term {term}) at {self.address}")

    def prepare(self, listening: Listening, store: Store) -> None:
        """The lease this process campaigns with, its election and its metrics."""
        self.listening, self.store = listening, store
        self.servicer.store = store
        self.address = _advertised(self.settings, listening.port)
        self.lease = LeaderLease(f"{self.address}/{os.getpid()}/{uuid.uuid4().hex[:8]}",
                                 self.address, self.settings.leader_lease_s)
        if listening.metrics:
            self._install_metrics(listening.metrics)
        self.election = Election(
            store.engine, self.lease, self._on_elected,
            lambda why: self.fail(EXIT_DEPOSED, f"{why}; restart as standby"))

    def _install_metrics(self, metrics: Metrics) -> None:
        ready, servicer, lease = self.ready, self.servicer, self.lease
        master_metrics.install(
            metrics, self.store,
            serving=lambda: ((servicer.core, servicer.committer) if ready.is_set()
                             else (None, None)),
            leader=lambda: (lease.role is Leadership.LEADER and ready.is_set(), lease.term))
        _job_metrics(self.settings, metrics,
                     lambda: self.leading[-1] if ready.is_set() and self.leading else None)

    def start(self) -> None:
        """Serve, and lead at once when the lease is free or our own seat: a leader is
        loaded before the start line says it listens."""
        self.listening.server.start()
        try:
            self.election.step()
        except Exception as exc:  # noqa: BLE001 - the election thread tries again
            log.warning("leader lease: %s", exc)
        if self.lease.role is Leadership.LEADER:
            self.ready.wait(START_LEADING_S)

    def serve(self) -> None:
        """Campaign (or renew) in the background until SIGTERM, SIGINT or `fail`."""
        threading.Thread(target=self.election.run, args=(self.stop,), name="election",
                         daemon=True).start()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stop.set())
        if self.settings.job_owner:  # elastic-job run killed: the job stops, then we exit
            from .job.watchdog import OwnerWatch
            OwnerWatch(self.settings.job_owner, self.store, self._driver, self.stop).start()
        self.stop.wait()

    def _driver(self):
        """The job driver of the term this master leads (None: a standby, or no job)."""
        return getattr(self.leading[-1], "driver", None) if self.ready.is_set() \
            and self.leading else None

    def started_line(self) -> str:
        s, net = self.settings, self.listening
        role = "leader" if self.ready.is_set() else \
            f"standby (leader: {self.leader() or 'none yet'})"
        shown = f", metrics on http://{s.host}:{net.metrics_port}/metrics" if net.metrics else ""
        return (f"elastic-master listening on {s.host}:{net.port} (pid {os.getpid()}) as "
                f"{role}{shown}")

    def close(self) -> int:
        """Stop serving, close every term's parts, free the lease after a clean stop (a
        standby then takes over at once), and return the exit status."""
        log.info("stopping")
        self.listening.health.enter_graceful_shutdown()
        self.listening.server.stop(grace=2).wait()
        self.ready.clear()
        for part in self.leading:
            part.close()
        if not self.exit_code and all(p.committer.fatal is None for p in self.leading):
            try:
                self.election.release()
            except Exception as exc:  # noqa: BLE001 - a standby takes over after the lease
                log.warning("could not free the leader lease: %s", exc)
        self.store.close()
        if self.listening.metrics:
            self.listening.metrics.close()
        return self.exit_code


def _log_settings(settings: MasterSettings, port: int) -> None:
    log.info("settings: %s", settings.describe())
    if settings.port == 0:
        log.warning("--port 0: listening on port %d for this run only; restarted, the master "
                    "gets another port and its workers and PS cannot find it: give a fixed "
                    "--port to a job that must survive a restart (docs/operations.md)", port)


def run(settings: MasterSettings) -> int:
    master = Master(settings)
    try:
        listening = listen(settings, master.servicer, master.gate)
    except StartRefused as exc:
        print(f"elastic-master: {exc}", file=sys.stderr)
        return 1
    try:
        store = open_store(settings)
    except StartRefused as exc:
        print(f"elastic-master: {exc}", file=sys.stderr)
        listening.close()
        return 1
    master.prepare(listening, store)
    master.start()
    _log_settings(settings, listening.port)
    announce(master.started_line())
    master.serve()
    return master.close()


def main(argv: list[str] | None = None) -> None:
    run_main(parse, run, argv)


if __name__ == "__main__":
    main()
