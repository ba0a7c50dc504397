"""The worker's connection to the master: registration, heartbeats, retries, re-registration.

`MasterClient` promises:

* Every call is retried with bounded exponential backoff (0.1 s doubling to 2 s, logged at
  WARNING) while the master is unreachable (UNAVAILABLE, DEADLINE_EXCEEDED: each attempt has its
  own deadline), and gives up with `MasterUnavailable` after `RetryPolicy.total_s` (120 s by
  default; `ELASTIC_PS_RETRY_TIMEOUT_S`). A master restarted on its database keeps the worker's
  id, so calls simply succeed again. A master host that does not exist in DNS (a misspelled
  address) fails the call at once instead (rpckit.resolve), and so do a refused token
  (`rpckit.auth.CredentialsRefused`, naming where the token came from) and a TLS mismatch
  (`rpckit.tls_check.TLSMismatch`, naming --tls-ca / ELASTIC_PS_TLS_CA).
* When the master no longer knows the worker (declared lost after missing heartbeats, or it has
  forgotten it), the client registers again under a new id and drops every lease of its attached
  lease tables: the master has already given them back, and the rest of them is done elsewhere.
  Nothing of them is reported later (were it, the master would answer it as a duplicate and count
  nothing).
* Reports travel on calls the worker makes anyway: every GetShard, Heartbeat and LeaveWorker
  carries the pending reports of all attached lease tables (DONE for trained leases, PROGRESS
  offsets), and the master's answers go back to the tables. One report-carrying call is in flight
  at a time, so a lease is never reported by two calls at once.
* A background thread heartbeats at the interval the master asked for, carrying PROGRESS for
  every held lease, so the master keeps trained offsets durably and a lease taken back for its
  timeout is noticed (its report is answered as a duplicate).

Thread-safe.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import replace
from typing import Callable

import grpc

from protos import master_pb2 as pb
from protos import master_pb2_grpc as pb_grpc

from rpckit import auth
from rpckit.channels import LeaderStub
from rpckit.errors import Reason, reason_of
from rpckit.resolve import unresolvable
from rpckit.tls_check import TLSMismatch
from rpckit.retry import NEVER_RETRIED, RETRYABLE, Backoff, RetryPolicy

from .. import metrics, notice
from ..errors import Cancelled, DatasetSpecMismatch, ElasticError, MasterError, MasterUnavailable
from .leases import LeaseTable, Outcome, Report, Result

log = logging.getLogger(__name__)

_OUTCOME = {Outcome.DONE: pb.ShardReport.DONE, Outcome.PROGRESS: pb.ShardReport.PROGRESS,
            Outcome.FAILED: pb.ShardReport.FAILED, Outcome.RELEASED: pb.ShardReport.RELEASED}
_WARN_EVERY_S = 5.0
_MAX_REREGISTER = 3


def default_master() -> str:
    return os.environ.get("ELASTIC_PS_MASTER", "localhost:50051")


# A worker the master launched gets ELASTIC_PS_LABELS (e.g. "market=spot", the market it runs
# on, which `elastic-ctl cost` prices); ELASTIC_PS_WORKER_LABELS is a person's. Both count,
# the person's last.
LABEL_VARIABLES = ("ELASTIC_PS_LABELS", "ELASTIC_PS_WORKER_LABELS")


def labels_from_env() -> dict[str, str]:
    """`ELASTIC_PS_LABELS="market=spot,zone=a"` -> {"market": "spot", "zone": "a"} (and
    ELASTIC_PS_WORKER_LABELS after it)."""
    labels = {}
    for variable in LABEL_VARIABLES:
        for item in os.environ.get(variable, "").split(","):
            if "=" in item:
                key, value = item.split("=", 1)
                labels[key.strip()] = value.strip()
    return labels


def default_name() -> str:
    """$ELASTIC_PS_WORKER_NAME (the master names the workers it launches), else host-pid."""
    return os.environ.get("ELASTIC_PS_WORKER_NAME", "").strip() or \
        f"{socket.gethostname()}-{os.getpid()}"


def gave_up(address: str, method: str, elapsed: float, last: str, budget_s: float) -> str:
    """Why a call to the master failed for good: what was tried, and where the budget came
    from (the variable is named only when it was set)."""
    if budget_s <= 0:  # one attempt, no budget: a heartbeat (the next beat is the retry)
        return f"the master at {address} did not answer {method} ({last})"
    env = os.environ.get("ELASTIC_PS_RETRY_TIMEOUT_S", "")
    try:
        from_env = bool(env) and float(env) == budget_s
    except ValueError:
        from_env = False
    source = ("from ELASTIC_PS_RETRY_TIMEOUT_S" if from_env else "the default"
              if budget_s == RetryPolicy().total_s else "from retry_timeout_s=")
    return (f"the master at {address} did not answer {method} for {elapsed:.0f} s ({last}); "
            f"is it running? (the retry budget is {budget_s:g} s, {source})")


def default_policy() -> RetryPolicy:
    total = os.environ.get("ELASTIC_PS_RETRY_TIMEOUT_S")
    return RetryPolicy(total_s=float(total)) if total else RetryPolicy()


class MasterClient:
    """A registered worker's calls to the master. See the module docstring for the promises."""

    def __init__(
        self,
        master: str | None = None,
        name: str | None = None,
        labels: dict[str, str] | None = None,
        *,
        policy: RetryPolicy | None = None,
        heartbeat: bool = True,
        tls_ca: str | None = None,
        auth_token: str | None = None,
        stub=None,
    ):
        """tls_ca: PEM CA file of a TLS master; auth_token: the job's token (None: from
        ELASTIC_PS_TLS_CA, ELASTIC_PS_AUTH_TOKEN / ELASTIC_PS_AUTH_TOKEN_FILE).
        stub: an object with the Master service's methods (`Method(request, timeout=...)`,
        raising grpc.RpcError, `retry_cap()` and `close()`, as rpckit.channels.LeaderStub)
        used instead of a connection: an in-process
        master in tests."""
        notice.ensure_visible()  # recoveries are logged at INFO: shown unless logging is set up
        metrics.maybe_serve()  # ELASTIC_PS_METRICS_PORT
        self.address = master or default_master()  # host:port[,host:port...]: see rpckit.channels
        self.name = name or default_name()
        # the environment's labels (the market a launching master put it on) and the caller's
        # over them
        self.labels = {**labels_from_env(), **(labels or {})}
        self.policy = policy or default_policy()
        self.tls_ca, token, self.token_source = auth.client_security(tls_ca, auth_token)
        if stub is None:  # follows the leader of the list; a wrong token or TLS raises at once
            stub = LeaderStub(self.address, pb_grpc.MasterStub, tls_ca=self.tls_ca,
                              token=token, token_source=self.token_source)
        self._stub = stub
        self._lock = threading.RLock()  # registration state
        self._report_lock = threading.RLock()  # one report-carrying call at a time
        self._tables: list[LeaseTable] = []
        self._listeners: list[Callable[[str], None]] = []
        self._heartbeat_enabled = heartbeat
        self._heartbeat_thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._closed = False
        self.worker_id: str | None = None
        self.heartbeat_interval_s = 1.0
        self.worker_timeout_s = 3.0
        self.registrations = 0
        self._warned_at = 0.0

    # ---- report sources and listeners ------------------------------------------------------

    def attach(self, table: LeaseTable) -> None:
        """Carry `table`'s reports on this worker's calls; drop its leases if we are lost."""
        with self._report_lock:
            if table not in self._tables:
                self._tables.append(table)

    def detach(self, table: LeaseTable) -> None:
        with self._report_lock:
            if table in self._tables:
                self._tables.remove(table)

    def on_reregister(self, callback: Callable[[str], None]) -> None:
        """`callback(why)` runs after the worker registered again because it was lost."""
        self._listeners.append(callback)

    # ---- registration -------------------------------------------------------------------------

    def register(self) -> str:
        """Register (again) as a new worker; returns the worker id."""
        with self._lock:
            if self._closed:
                raise ElasticError("this MasterClient is closed")
            response, _ = self._call(
                "RegisterWorker",
                lambda _: pb.RegisterWorkerRequest(name=self.name, labels=self.labels),
                needs_worker=False,
            )
            self.worker_id = response.worker_id
            self.heartbeat_interval_s = response.heartbeat_interval_s or 1.0
            self.worker_timeout_s = response.worker_timeout_s or 3.0
            self.registrations += 1
            log.info("registered with the master at %s as worker %s (%s), heartbeat every %.2g s",
                     self.address, self.worker_id, self.name, self.heartbeat_interval_s)
            self._start_heartbeats()
            return self.worker_id

    def ensure_registered(self) -> str:
        with self._lock:
            worker_id = self.worker_id
            return worker_id if worker_id is not None else self.register()

    def _reregister(self, stale_id: str | None, why: str) -> None:
        with self._report_lock, self._lock:
            if self.worker_id != stale_id:
                return  # another thread did it already
            log.warning("the master no longer knows worker %s (%s): registering again; its leases "
                        "went back to the master and are done elsewhere", stale_id, why)
            self.worker_id = None
            for table in self._tables:
                table.drop_all("this worker was declared lost")
            if self._closed:
                raise ElasticError("this MasterClient is closed")
            self.register()
        for callback in list(self._listeners):
            callback(why)

    # ---- the retry loop -------------------------------------------------------------------------

    def _call(
        self,
        method: str,
        build: Callable[[str | None], object],
        *,
        needs_worker: bool = True,
        reregister: bool = True,
        policy: RetryPolicy | None = None,
        cancel: threading.Event | None = None,
    ) -> tuple[object, bool]:
        """Call `method` with the request `build(worker_id)`; returns (response, whether any
        attempt failed in a way that may have reached the master)."""
        policy = policy or self.policy
        backoff = Backoff(policy)
        reregistered = 0
        uncertain = False
        last = ""
        while True:
            worker_id = self.ensure_registered() if needs_worker else None
            request = build(worker_id)
            try:
                response = getattr(self._stub, method)(request, timeout=policy.call_timeout_s)
            except grpc.RpcError as exc:
                code, details, reason = exc.code(), exc.details() or "", reason_of(exc)
                if code in NEVER_RETRIED:  # the same token gets the same answer
                    raise auth.credentials_refused(f"the master at {self.address}", code.name,
                                                   self.token_source, reason) from None
                if code in RETRYABLE:
                    uncertain = True
                    last = f"{code.name}: {details}"
                    misspelled = unresolvable(self.address, details)
                    if misspelled:  # never going to answer: say so now, not in 120 s
                        log.error("giving up on %s: %s", method, misspelled)
                        raise MasterUnavailable(
                            f"cannot reach the master: {misspelled} (master=, --master or "
                            "ELASTIC_PS_MASTER)") from None
                    delay = backoff.next_delay()
                    if delay is not None:  # a standby answered: a leader is a lease away
                        delay = min(delay, self._stub.retry_cap())
                    if delay is None:
                        message = gave_up(self.address, method, backoff.elapsed, last,
                                          policy.total_s)
                        if policy.total_s > 0:  # a single-attempt call (heartbeat) is no news
                            log.info("giving up: %s", message)
                        raise MasterUnavailable(message) from None
                    self._warn(f"master at {self.address} unreachable for {method} ({last}); "
                               f"retrying in {delay:.1f} s")
                    self._sleep(delay, cancel, method)
                    continue
                if (reason == Reason.WORKER_GONE and needs_worker and reregister
                        and reregistered < _MAX_REREGISTER):
                    reregistered += 1
                    self._reregister(worker_id, details)
                    continue
                raise MasterError(code.name, details, reason) from None
            if backoff.attempts:
                log.info("the master at %s answered %s again after %.1f s", self.address, method,
                         backoff.elapsed)
            return response, uncertain

    def _sleep(self, delay: float, cancel: threading.Event | None, method: str) -> None:
        if (cancel or self._stop).wait(delay) or self._stop.is_set():
            raise Cancelled(f"{method} abandoned: the worker is shutting down") from None

    def _warn(self, message: str) -> None:
        now = time.monotonic()
        if now - self._warned_at >= _WARN_EVERY_S:
            self._warned_at = now
            log.warning(message)

    def _exchange(self, method: str, build, *, every: bool = False, extra: tuple = (),
                  **kw) -> tuple[object, bool]:
        """A call that carries the attached tables' pending reports (then `extra` reports) and
        hands the answers back to the tables."""
        with self._report_lock:
            sent: list[tuple[LeaseTable, list[Report]]] = []

            def build_with_reports(worker_id):
                sent.clear()  # gathered again on every attempt: a retry may follow a drop
                for table in self._tables:
                    sent.append((table, table.reports(every)))
                reports = [_to_pb(r) for _, rs in sent for r in rs]
                return build(worker_id, reports + [_to_pb(r) for r in extra])

            response, uncertain = self._call(method, build_with_reports, **kw)
            results = [Result(r.lease_id, r.accepted, r.duplicate, r.reason)
                       for r in response.results]
            offset = 0
            for table, reports in sent:
                table.apply(reports, results[offset:offset + len(reports)])
                offset += len(reports)
            return response, uncertain

    # ---- calls ------------------------------------------------------------------------------------

    def create_dataset(self, spec: pb.DatasetSpec) -> pb.DatasetSpec:
        """Create the dataset, or check that it exists with the same spec (idempotent)."""
        try:
            response, _ = self._call("CreateDataset", lambda _: spec, needs_worker=False)
        except MasterError as exc:
            if exc.reason == Reason.DATASET_EXISTS:
                raise DatasetSpecMismatch(exc.code, exc.message, exc.reason) from None
            raise
        return response

    def get_shard(self, dataset: str, max_shards: int,
                  cancel: threading.Event | None = None) -> tuple[pb.GetShardResponse, bool]:
        """Lease up to `max_shards` shards, carrying pending reports. Returns (response,
        uncertain): uncertain means an earlier attempt may have been applied and its answer
        lost, so leases may have been granted that the response does not list
        (see `worker_leases`)."""
        return self._exchange(
            "GetShard",
            lambda wid, reports: pb.GetShardRequest(worker_id=wid, dataset=dataset,
                                                    max_shards=max_shards, reports=reports),
            cancel=cancel,
        )

    def report(self) -> None:
        """Send the pending reports now (ReportShard), if there are any."""
        with self._report_lock:
            if self.worker_id is None or not any(t.reports() for t in self._tables):
                return
            self._exchange("ReportShard", lambda wid, reports: pb.ReportShardRequest(
                worker_id=wid, reports=reports))

    def heartbeat(self, policy: RetryPolicy | None = None) -> list[pb.Lease]:
        """One heartbeat now, carrying PROGRESS for every held lease; returns every lease the
        master holds for this worker."""
        with self._report_lock:
            if self.worker_id is None:
                return []
            response, _ = self._exchange("Heartbeat", lambda wid, reports: pb.HeartbeatRequest(
                worker_id=wid, progress=reports), every=True, policy=policy)
            return list(response.leases)

    def leave(self, reason: str, reports: tuple[Report, ...] = (), *,
              policy: RetryPolicy | None = None,
              lock_timeout_s: float | None = None) -> list[Result]:
        """LeaveWorker(reason) with the trained progress of every lease of the attached tables,
        plus `reports` (leases.Report) of leases kept elsewhere: the master counts what was
        trained and gives the rest of each lease back at once. Returns the answers, in that
        order. Afterwards the worker is unregistered (a later call registers it again)."""
        locked = self._report_lock.acquire(timeout=-1 if lock_timeout_s is None else lock_timeout_s)
        try:
            if self.worker_id is None:
                return []
            try:
                response, _ = self._exchange(
                    "LeaveWorker",
                    lambda wid, reports: pb.LeaveWorkerRequest(worker_id=wid, reason=reason,
                                                               reports=reports),
                    reregister=False, policy=policy, extra=tuple(reports),
                )
                results = [Result(r.lease_id, r.accepted, r.duplicate, r.reason)
                           for r in response.results]
            except MasterError as exc:
                if exc.reason != Reason.WORKER_GONE:
                    raise
                results = []  # already gone: lost or left before
            log.info("worker %s left the master (%s)", self.worker_id, reason)
            with self._lock:
                self.worker_id = None
            for table in self._tables:
                table.drop_all(f"left ({reason})")
            return results
        finally:
            if locked:
                self._report_lock.release()

    def status(self) -> pb.GetStatusResponse:
        response, _ = self._call("GetStatus", lambda _: pb.GetStatusRequest(), needs_worker=False)
        return response

    def worker_leases(self, dataset: str) -> list[pb.Lease]:
        """The leases the master holds for this worker in `dataset` (a Heartbeat answers
        them, cheaply, where GetStatus would describe every worker)."""
        return [lease for lease in self.heartbeat() if lease.dataset == dataset]

    # ---- heartbeats ---------------------------------------------------------------------------

    def _start_heartbeats(self) -> None:
        if not self._heartbeat_enabled or self._heartbeat_thread is not None:
            return
        self._heartbeat_thread = threading.Thread(
            target=self._heartbeat_loop, name="elastic-heartbeat", daemon=True)
        self._heartbeat_thread.start()

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(self.heartbeat_interval_s):
            # one attempt per beat: the next beat is the retry, and the report lock is not held
            # through a long outage
            policy = replace(self.policy, total_s=0.0,
                             call_timeout_s=max(2.0, self.heartbeat_interval_s))
            try:
                self.heartbeat(policy)
            except MasterUnavailable as exc:
                self._warn(f"heartbeat failed: {exc}; trying again every "
                           f"{self.heartbeat_interval_s:g} s")
            except (auth.CredentialsRefused, TLSMismatch) as exc:  # never retried
                log.error("heartbeats stopped: %s", exc.message)
                return
            except Exception:  # noqa: BLE001 - the thread must outlive any one bad beat
                log.exception("heartbeat failed")

    # ---- closing ------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop heartbeats and close the channel (does not leave: call `leave` first)."""
        with self._lock:
            self._closed = True
        self._stop.set()
        thread = self._heartbeat_thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self.policy.call_timeout_s)
        self._stub.close()

    @property
    def closed(self) -> bool:
        return self._closed


def _to_pb(report: Report) -> pb.ShardReport:
    return pb.ShardReport(lease_id=report.lease_id, outcome=_OUTCOME[report.outcome],
                          records_done=report.records_done, message=report.message)
