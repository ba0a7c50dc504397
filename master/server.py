"""gRPC wiring: a thin servicer that translates messages and status codes for `MasterCore`.

Every call that reads or changes the core goes through the committer, so its answer shows
only durable state. Undecodable request bytes are INVALID_ARGUMENT (`register`, via
rpckit.decode); a GetEvents or GetLeases page stops at EVENTS_PAGE_BYTES, a GetLedger lists at most
LEDGER_EPOCHS epochs and LEDGER_LABELS labels, GetStatus is bounded by master/views.py: no
answer nears the 4 MiB client limit.
"""
from __future__ import annotations

import logging
from contextlib import closing
from typing import Callable

import grpc
from grpc_health.v1 import health

from protos import master_pb2 as pb
from protos import master_pb2_grpc as pb_grpc

from .calls import Report
from .convert import GRANT, ps_to_pb, spec_from_pb, spec_to_pb, to_lease, to_reports, to_results
from .core import MasterCore
from .persistence.committer import Committer
from rpckit import decode
from rpckit import server as rpc_server
from rpckit.errors import Reason, ServiceError, abort, invalid, precondition
from rpckit.server import PortInUse  # noqa: F401 - re-exported for __main__
from .datasets.drop import drop_dataset
from .datasets.ledger import ledger
from .job.plan import plan_view
from .limits import MAX_EVENTS_PAGE, MAX_ID, MAX_INT32, check_int, check_name, check_reason
from .persistence.store import Store
from .ps import restores as ps_restores
from .views import status_view

log = logging.getLogger(__name__)

EVENTS_PAGE_BYTES = 1 << 20
LEDGER_EPOCHS = 2_000
LEDGER_LABELS = 1_000
LEASE_FIELDS = tuple(f.name for f in pb.LeaseRecord.DESCRIPTOR.fields)
DESCRIPTOR = pb.DESCRIPTOR.services_by_name["Master"]
SERVICE = DESCRIPTOR.full_name


def register(servicer: "MasterServicer", server: grpc.Server) -> None:
    """Add the Master service to `server`, undecodable requests answered INVALID_ARGUMENT."""
    decode.add_servicer(server, servicer, DESCRIPTOR)


def _page(rows, to_pb: Callable, items):
    """Append each row's message to `items` (a reply's repeated field) while the page stays
    within EVENTS_PAGE_BYTES; a page holds at least one. Returns the last one appended, or
    None."""
    budget, last = EVENTS_PAGE_BYTES, None
    for row in rows:
        message = to_pb(row)
        budget -= message.ByteSize() + 8
        if budget < 0 and len(items):
            break
        items.append(message)
        last = message
    return last


def _guard(method: Callable) -> Callable:
    """Turn ServiceError into its gRPC status; anything else is a bug, logged as such."""

    def wrapper(self, request, context):
        try:
            return method(self, request, context)
        except ServiceError as exc:
            abort(context, exc)
        except Exception:
            log.exception("internal error in %s", method.__name__)
            context.abort(grpc.StatusCode.INTERNAL, f"internal error in {method.__name__}")

    wrapper.__name__ = method.__name__
    return wrapper


class MasterServicer(pb_grpc.MasterServicer):
    def __init__(self, core: MasterCore, committer: Committer, store: Store):
        self.core = core
        self.committer = committer
        self.store = store
        self.driver = None  # the job's driver while this master leads one (master/job/)

    @_guard
    def RegisterWorker(self, request, context):
        worker = self.committer.call(
            lambda: self.core.register_worker(request.name, dict(request.labels))
        )
        s = self.core.settings
        return pb.RegisterWorkerResponse(
            worker_id=worker.worker_id, heartbeat_interval_s=s.heartbeat_interval,
            worker_timeout_s=s.worker_timeout,
        )

    def _with_ended(self, reports: list[Report], fn: Callable):
        """`fn` run on the core after teaching it the leases these reports name that ended
        long ago: looked up here, outside the lock, in one query (see MasterCore.unresolved)."""
        ended = self.core.unresolved(reports) if reports else ()
        if not ended:
            return fn
        rows = self.store.lookup_leases(ended)
        return lambda: (self.core.remember_ended(rows), fn())[1]

    @_guard
    def Heartbeat(self, request, context):
        reports = to_reports(request.progress)
        results, held = self.committer.call(self._with_ended(
            reports, lambda: self.core.heartbeat(request.worker_id, reports)))
        return pb.HeartbeatResponse(
            ok=True, results=to_results(results), leases=[to_lease(x) for x in held]
        )

    @_guard
    def LeaveWorker(self, request, context):
        reports = to_reports(request.reports)
        results = self.committer.call(self._with_ended(
            reports, lambda: self.core.leave_worker(request.worker_id, request.reason, reports)))
        return pb.LeaveWorkerResponse(results=to_results(results))

    @_guard
    def CreateDataset(self, request, context):
        spec = self.committer.call(lambda: self.core.create_dataset(spec_from_pb(request)))
        return spec_to_pb(spec)

    @_guard
    def GetShard(self, request, context):
        reports = to_reports(request.reports)
        grant = self.committer.call(self._with_ended(
            reports, lambda: self.core.get_shard(
                request.worker_id, request.dataset, request.max_shards, reports)))
        return pb.GetShardResponse(
            status=GRANT[grant.status], leases=[to_lease(x) for x in grant.leases],
            results=to_results(grant.results), retry_after_ms=grant.retry_after_ms,
        )

    @_guard
    def ReportShard(self, request, context):
        reports = to_reports(request.reports)
        results = self.committer.call(self._with_ended(
            reports, lambda: self.core.report(request.worker_id, reports)))
        return pb.ReportShardResponse(results=to_results(results))

    @_guard
    def GetStatus(self, request, context):
        # through `call`: answered once everything it shows is durable
        return self.committer.call(lambda: status_view(self.core))

    @_guard
    def GetEvents(self, request, context):
        check_int("GetEvents since", request.since, 0, MAX_ID)
        check_int("GetEvents limit (0 means 1000)", request.limit, 0, MAX_INT32)
        limit = min(request.limit or 1000, MAX_EVENTS_PAGE)
        reply = pb.GetEventsResponse(next=request.since)
        with closing(self.store.iter_events(request.since, limit)) as rows:
            last = _page(rows, lambda row: pb.Event(**row), reply.events)
        if last is not None:
            reply.next = last.seq
        return reply

    @_guard
    def GetLeases(self, request, context):
        check_name("dataset", request.dataset)
        check_int("GetLeases after (a lease id)", request.after, 0, MAX_ID)
        check_int("GetLeases limit (0 means 1000)", request.limit, 0, MAX_INT32)
        self.committer.read(lambda: self.core._dataset(request.dataset))  # NOT_FOUND
        limit = min(request.limit or 1000, MAX_EVENTS_PAGE)
        reply = pb.GetLeasesResponse(next=request.after)
        with closing(self.store.iter_leases(request.dataset, request.after, limit)) as rows:
            last = _page(rows, lambda row: pb.LeaseRecord(**{f: row[f] for f in LEASE_FIELDS}),
                         reply.leases)
        if last is not None:
            reply.next = last.lease_id
        return reply

    @_guard
    def RegisterPS(self, request, context):
        restored = request.restored if request.HasField("restored") else None
        if restored is not None:
            ps_restores.check(restored, self.core.journal.now_ms())  # before anything changes

        def join():
            held = restored is not None and ps_restores.held_state(self.core.ps_set,
                                                                   request.index)
            joined = self.core.join_ps(request.address, request.data_address, request.index,
                                       request.num_ps, request.data_public_key,
                                       request.instance)
            # the index's slots with the layout's version, read in the same commit: the PS takes
            # them before it serves (ps/slots/moves.py)
            primary = ps_to_pb(joined.primary, False, self.core.replicas, self.core.layout)
            # a restored primary lost the updates since its checkpoint; a backup copies its
            # primary's state instead and lost nothing. Same commit as the registration.
            if (restored is not None and joined.role.value == "primary"
                    and (held or not restored.empty)):
                ps_restores.record(self.core.journal, request.index, request.restored)
            return joined, primary, self.core.layout.version

        joined, primary, version = self.committer.call(join)
        return pb.RegisterPSResponse(incarnation=joined.incarnation, role=joined.role.value,
                                     generation=joined.generation, primary=primary,
                                     replicas=self.core.settings.ps_replicas,
                                     layout_version=version,
                                     ps_slots=self.core.layout.ps_slots)

    @_guard
    def ListPS(self, request, context):
        def listing():
            core = self.core
            rows, num_ps, complete = core.list_ps()
            layout = core.layout
            return pb.ListPSResponse(
                ps=[ps_to_pb(r, r["idx"] in core.ps_lost, core.replicas, layout) for r in rows],
                num_ps=num_ps, complete=complete, replicas=core.settings.ps_replicas,
                layout_version=layout.version, ps_slots=layout.ps_slots,
                target_num_ps=layout.target,
                joining=[ps_to_pb(r, r["idx"] in core.ps_lost, core.replicas, layout)
                         for r in core.ps_set.joining()])

        return self.committer.read(listing)

    @_guard
    def ResizePS(self, request, context):
        done = self.committer.call(lambda: self.core.resize_ps(request.num_ps))
        return pb.ResizePSResponse(
            layout_version=done.version, num_ps=done.num_ps, target_num_ps=done.target,
            moves_planned=done.moves_planned, moves_pending=done.moves_pending,
            ps_slots=self.core.layout.ps_slots, changed=done.changed)

    @_guard
    def ReportReplicas(self, request, context):
        generation = self.committer.call(
            lambda: self.core.report_replicas(request.index, request.generation,
                                              request.instance, list(request.in_sync)))
        return pb.ReportReplicasResponse(
            generation=generation, lease_ms=int(self.core.settings.ps_lease_s * 1000))

    @_guard
    def Requeue(self, request, context):
        check_name("dataset", request.dataset)
        if not request.quarantined:
            raise invalid("nothing to requeue: set quarantined=true (--quarantined)")
        n = self.committer.call(lambda: self.core.requeue_quarantined(request.dataset))
        return pb.RequeueResponse(requeued=n)

    @_guard
    def DropDataset(self, request, context):
        check_name("dataset", request.dataset)
        dropped = self.committer.call(
            lambda: drop_dataset(self.core, request.dataset, request.force))
        return pb.DropDatasetResponse(leases_ended=dropped.leases_ended,
                                      epochs=dropped.epochs, finished=dropped.finished)

    @_guard
    def GetLedger(self, request, context):
        if request.dataset:
            check_name("dataset", request.dataset)
            self.committer.read(lambda: self.core._dataset(request.dataset))  # NOT_FOUND
        totals = self.store.lease_totals(request.dataset)
        workers = self.store.workers_all()
        updates_lost, per_ps = ps_restores.updates_lost(
            self.store.events_of_kind(ps_restores.KIND), self.store.leases_between)
        found = self.committer.call(
            lambda: ledger(totals, self.core.datasets, workers, self.core.journal.now_ms()))
        epochs, labels = found.pop("epochs"), found.pop("worker_seconds")
        # bounded answer: the newest epochs and the busiest labels; totals cover everything
        shown = epochs[-LEDGER_EPOCHS:]
        labels = sorted(labels, key=lambda x: -x["worker_seconds"])[:LEDGER_LABELS]
        return pb.GetLedgerResponse(
            epochs=[pb.EpochLedger(**e) for e in shown],
            worker_seconds=[pb.LabelSeconds(**x) for x in sorted(labels, key=lambda x: x["label"])],
            epochs_not_shown=len(epochs) - len(shown), updates_lost=updates_lost,
            ps_updates_lost=[pb.PSUpdatesLost(**x) for x in per_ps], **found,
        )

    # ---- the job a master drives (master/job/) ------------------------------------------------

    def _driver(self):
        if self.driver is None:
            raise precondition(Reason.NO_JOB, "this master drives no job: start it with "
                               "--job job.yaml (elastic-job run does)")
        return self.driver

    @_guard
    def GetPlan(self, request, context):
        if request.decisions < 0:
            raise invalid("decisions must be >= 0")
        driver = self._driver()
        return plan_view(driver, self.store, request, self.core.journal.now_ms())

    @_guard
    def StopJob(self, request, context):
        reason = check_reason(request.reason)
        driver = self._driver()
        return pb.StopJobResponse(state=str(driver.request_stop(reason)))


def build_server(
    core: MasterCore, committer: Committer, store: Store, host: str, port: int, threads: int,
    credentials: grpc.ServerCredentials | None = None,
    interceptors: tuple[grpc.ServerInterceptor, ...] | list = (),
) -> tuple[grpc.Server, int, health.HealthServicer]:
    """The master's gRPC server (not started): the Master service, health and reflection;
    over TLS with `credentials`, `interceptors` (rpckit.auth) checking the token."""
    return rpc_server.build_server(
        host, port, threads,
        [(register, MasterServicer(core, committer, store))],
        [SERVICE], interceptors=interceptors, credentials=credentials,
    )
