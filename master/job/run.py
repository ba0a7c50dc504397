"""`elastic-job run job.yaml [--json PATH]`: start the job's masters through the engine and
follow the job until it is finished, then print its summary.

The masters (1 + `master.standbys`, on `master.port` and free ports after it, or all free
with port 0) listen where the engine places them (`reserve`: the local engine on 127.0.0.1;
Ray on a node of their market, at its address as Ray lists it, on ports picked free there),
an address every process of the job reaches. They get the spec (`--job`), the job's folder
(`--job-dir`, logs) and every master's address (`--job-masters`, what the processes they
launch are given); the leader launches the PS set and the workers and drives them
(master/job/driver.py). This command only watches (`GetPlan`): once the job is finished it
reads the summary, stops the masters, prints it and exits 0 if every record of every epoch
was counted once (1 otherwise). Ctrl-C or SIGTERM asks the leader to stop the job as a
preemption would (`StopJob`: workers hand their leases back exactly), waits for it, and
exits 130 / 143; a second one stops the masters at once.

Nothing the job launched outlives this command: once its masters are stopped (or all exited
by themselves: killed, crashed), whatever the job's database still lists as running is
stopped and recorded as ended here (master/job/leftovers.py). Every master exiting before the
job ended is said, with what was stopped (in the `--json` file too: state `masters_lost`),
and the command exits 1. On the local
engine the masters are given this command's identity (`--job-owner`): if it is itself killed
(SIGKILL), they stop the job as Ctrl-C would and exit (master/job/watchdog.py).

With `--tls-cert/--tls-key/--tls-ca` and `--auth-token-file` the masters serve TLS and require
the token, and pass the CA and the token file on to the PS and workers they launch, as a master
started by hand with those flags does; this command calls them with the same CA and token.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import grpc

from engines import process
from engines.local import LocalEngine
from engines.port import EventKind, LaunchFailed
from protos import master_pb2 as pb
from protos import master_pb2_grpc as pb_grpc
from rpckit import auth
from rpckit.channels import LeaderStub

from .leftovers import Stopped, Unreadable, live_rows, record_stopped, stop_leftovers
from .spec import load_spec
from .summary import epochs_exact, format_summary, summarize, write_json

log = logging.getLogger("elastic-job")
POLL_S = 0.5
EXIT_SIGNAL = {signal.SIGINT: 130, signal.SIGTERM: 143}


def master_names(n: int) -> list[str]:
    return ["master" if i == 0 else f"master-standby{i}" for i in range(n)]


def masters_engine(spec, workdir: Path):
    """The masters run on the job's engine too (engine: ray puts them on Ray nodes); it says
    where they listen (`reserve`)."""
    if spec.engine == "ray":
        from .leading import ray_engine
        return ray_engine(spec, workdir)
    return LocalEngine(workdir)


@dataclass(frozen=True)
class RunSecurity:
    """The masters' TLS files and token file (absolute paths; '' for none), checked by the CLI."""

    tls_cert: str = ""
    tls_key: str = ""
    tls_ca: str = ""
    token_file: str = ""

    def master_flags(self) -> list[str]:
        out = []
        for flag, path in (("--tls-cert", self.tls_cert), ("--tls-key", self.tls_key),
                           ("--tls-ca", self.tls_ca), ("--auth-token-file", self.token_file)):
            if path:
                out += [flag, path]
        return out

    def stub_options(self) -> dict:
        token = auth.read_token("", self.token_file)
        return {"tls_ca": self.tls_ca or None, "token": token or None,
                "token_source": f"--auth-token-file {self.token_file}" if token else ""}


class JobRun:
    """One `elastic-job run`: its masters' engine, the leader's stub, the signal it got."""

    def __init__(self, spec_path: str, out=print, security: RunSecurity = RunSecurity(),
                 engine=None):
        self.spec_path = str(Path(spec_path).resolve())
        self.spec = load_spec(spec_path)  # SpecError: the caller exits 2, nothing started
        self.workdir = Path(self.spec_path).parent / f"{self.spec.name}-run"
        self.out = out
        self.engine = engine if engine is not None else masters_engine(
            self.spec, self.workdir / "masters")
        self.security = security
        self.got: int | None = None  # the signal that asked us to stop
        self.started = time.monotonic()
        self.master_started: dict[str, float] = {}
        self.master_seconds = 0.0
        self.names = master_names(1 + self.spec.master.standbys)
        self.leftovers: list[Stopped] | None = None  # once stopped (stop_leftovers)
        try:
            self.places = self.engine.reserve(self.names, self.spec.ps.market,
                                              self.spec.master.port)
        except LaunchFailed:
            self.engine.close()
            raise
        self.addresses = [f"{host}:{port}" for host, port in self.places]
        self.stub = LeaderStub(",".join(self.addresses), pb_grpc.MasterStub,
                               **security.stub_options())

    def start_masters(self) -> None:
        market = self.spec.ps.market
        for n, name in enumerate(self.names):
            handle = self.engine.launch("master", name, market, self.master_argv(n),
                                        process.clean_env())
            self.master_started[handle.id] = time.monotonic()
        self.out(f"elastic-job: job {self.spec.name}: masters at {','.join(self.addresses)}; "
                 f"logs in {self.workdir}")

    def master_argv(self, n: int) -> list[str]:
        """The command of the `n`th master: it listens where the engine placed it."""
        host, port = self.places[n]
        return [sys.executable, "-m", "master", "--host", host, "--port", str(port),
                "--db", self.spec.master.db, "--job", self.spec_path,
                "--job-dir", str(self.workdir), "--job-masters", ",".join(self.addresses),
                *self.security.master_flags(), *self.owner_flags()]

    def owner_flags(self) -> list[str]:
        """Masters on this machine watch this process (master/job/watchdog.py): killed, it can
        no longer stop the job, so they do. Elsewhere (Ray) its pid means nothing."""
        if not isinstance(self.engine, LocalEngine):
            return []
        return ["--job-owner", process.identity(os.getpid())]

    def plan(self, ended: bool = False) -> pb.GetPlanResponse | None:
        try:
            return self.stub.GetPlan(pb.GetPlanRequest(ended=ended), timeout=5)
        except grpc.RpcError:
            return None  # starting, or a standby taking over

    def _account_masters(self) -> bool:
        """Note the masters that ended; False once none runs."""
        for event in self.engine.poll():
            if event.kind in (EventKind.EXITED, EventKind.LOST):
                began = self.master_started.pop(event.handle.id, None)
                if began is not None:
                    self.master_seconds += time.monotonic() - began
                    self.out(f"elastic-job: {event.handle.name} ended ({event.code})")
        return bool(self.engine.running())

    def follow(self) -> pb.GetPlanResponse | None:
        """Until the job is finished or stopped (None: every master is gone)."""
        asked = False
        last_state = ""
        while True:
            if not self._account_masters():
                return None
            if self.got is not None and not asked:
                try:
                    self.stub.StopJob(pb.StopJobRequest(reason="stopped-by-user"), timeout=10)
                    asked = True
                    self.out("elastic-job: stopping the job (workers hand their leases back)")
                except grpc.RpcError as exc:
                    log.warning("StopJob: %s; asking again", exc.code())
            plan = self.plan()
            if plan is not None:
                if plan.state != last_state:
                    self.out(f"elastic-job: job {plan.job} {plan.state}")
                    last_state = plan.state
                if plan.state in ("finished", "stopped"):
                    return plan
            time.sleep(POLL_S)

    def summary(self) -> tuple[dict, pb.GetStatusResponse]:
        status = self.stub.GetStatus(pb.GetStatusRequest(), timeout=10)
        ledger = self.stub.GetLedger(pb.GetLedgerRequest(), timeout=30)
        plan = self.stub.GetPlan(pb.GetPlanRequest(ended=True), timeout=10)
        now = time.monotonic()
        running = sum(now - began for began in self.master_started.values())
        return summarize(status, ledger, plan, self.master_seconds + running,
                         now - self.started), status

    def stop_leftovers(self) -> list[Stopped]:
        """With every master gone: stop what the job launched that still runs, and say so.
        Once; a later call returns what the first stopped."""
        if self.leftovers is not None:
            return self.leftovers
        try:
            rows = live_rows(self.spec.master.db)
        except Unreadable as exc:
            self.out(f"elastic-job: cannot read the job's processes from master.db ({exc}); "
                     f"they may still run: their pids are in {self.workdir}/*.log.pid")
            self.leftovers = []
            return self.leftovers
        if rows:
            self.out(f"elastic-job: no master is left to stop the job's processes; stopping "
                     f"those still running (SIGTERM, then SIGKILL after the stop grace)")
        # set once they are stopped: a second Ctrl-C meanwhile (the `finally` calls this
        # again) adopts and stops what still runs
        stopped = stop_leftovers(self.spec, self.workdir, rows)
        for proc in stopped:
            self.out(f"elastic-job: stopped {proc.describe()}")
        try:
            record_stopped(self.spec.master.db, stopped)
        except Unreadable as exc:
            self.out(f"elastic-job: could not record them in master.db ({exc})")
        self.leftovers = stopped
        return stopped

    def lost_summary(self) -> dict:
        """The `--json` of a job whose masters all exited before it ended."""
        return {"job": self.spec.name, "state": "masters_lost",
                "seconds": round(time.monotonic() - self.started, 1),
                "stopped": [p.to_dict() for p in self.leftovers or []]}

    def close(self) -> None:
        self.engine.stop_all(graceful=True, timeout=30)
        self.stop_leftovers()  # a finished or stopped job has none: a read, nothing more
        self.stub.close()
        self.engine.close()


def stored_job_problem(spec) -> str | None:
    """Why the spec's database cannot run this job (None: it can). A database keeps one job: a
    master on it continues that job whatever spec it is given, so a job that already ended
    (finished or stopped) would only print its old summary, and another job's database would
    run that other job."""
    from sqlalchemy import create_engine, inspect, select
    from sqlalchemy.exc import SQLAlchemyError

    from master.persistence import schema

    try:
        engine = create_engine(spec.master.db)
    except (SQLAlchemyError, ValueError, ImportError) as exc:
        return f"master.db {spec.master.db!r}: {exc.__class__.__name__}: {exc}"
    try:
        with engine.connect() as conn:
            if not inspect(conn).has_table(schema.job.name):
                return None
            row = conn.execute(select(schema.job.c.name, schema.job.c.state)).first()
    except SQLAlchemyError:
        return None  # unreachable or new: the masters say why, as they would without a job
    finally:
        engine.dispose()
    if row is None:
        return None
    fix = ("to train again, point master.db at a fresh database; to see what it did: "
           "elastic-ctl plan --ended against a master on it")
    if row.name != spec.name:
        return (f"master.db holds job {row.name!r}, not {spec.name!r} (a database keeps one "
                f"job); give this job a database of its own")
    if row.state in ("finished", "stopped"):
        return f"job {row.name!r} in master.db already {row.state}; {fix}"
    return None  # running, finishing or stopping: the masters continue it


def run_job(spec_path: str, json_path: str | None = None, out=print,
            security: RunSecurity = RunSecurity()) -> int:
    """The whole command; SpecError propagates (the CLI exits 2 naming the field)."""
    try:
        job = JobRun(spec_path, out, security)
    except LaunchFailed as exc:
        out(f"elastic-job: cannot place the masters ({exc.reason}): {exc}")
        return 1

    def on_signal(sig, _frame):
        if job.got is not None:  # a second one: stop the masters now
            raise KeyboardInterrupt
        job.got = sig
    previous = {s: signal.signal(s, on_signal) for s in EXIT_SIGNAL}
    try:
        job.start_masters()
        plan = job.follow()
        if plan is None:
            out("elastic-job: every master exited before the job ended; see their logs in "
                f"{job.workdir / 'masters'}")
            stopped = job.stop_leftovers()
            out(f"elastic-job: job {job.spec.name} masters_lost: {len(stopped)} processes it "
                "had launched were still running and are stopped; a new elastic-job run on "
                "the same master.db continues the job from its ledger")
            if json_path:
                write_json(json_path, job.lost_summary())
            return 1
        summary, status = job.summary()
        job.close()
        out(format_summary(summary))
        if json_path:
            write_json(json_path, summary)
        if job.got is not None:
            return EXIT_SIGNAL[job.got]
        exact = all(epochs_exact(ds) for ds in status.datasets) and bool(status.datasets)
        return 0 if plan.state == "finished" and exact else 1
    except KeyboardInterrupt:
        return EXIT_SIGNAL.get(job.got, 130)
    finally:
        job.close()
        for s, handler in previous.items():
            signal.signal(s, handler)
