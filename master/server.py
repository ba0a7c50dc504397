"""gRPC wiring: a thin servicer that translates messages and status codes for `MasterCore`."""
from __future__ import annotations

import logging
from typing import Callable

import grpc
from grpc_health.v1 import health

from protos import master_pb2 as pb
from protos import master_pb2_grpc as pb_grpc

from .committer import Committer
from .convert import GRANT, ps_to_pb, spec_from_pb, spec_to_pb, to_lease, to_reports, to_results
from .core import MasterCore
from rpckit import server as rpc_server
from rpckit.errors import ServiceError, abort, invalid
from rpckit.server import PortInUse  # noqa: F401 - re-exported for __main__
from . import ps_restores
from .ledger import epoch_ledgers, worker_seconds
from .store import Store
from .views import status_view

log = logging.getLogger(__name__)

MAX_EVENTS = 10_000
SERVICE = pb.DESCRIPTOR.services_by_name["Master"].full_name


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

    @_guard
    def Heartbeat(self, request, context):
        reports = to_reports(request.progress)
        results, held = self.committer.call(
            lambda: self.core.heartbeat(request.worker_id, reports)
        )
        return pb.HeartbeatResponse(
            ok=True, results=to_results(results), leases=[to_lease(x) for x in held]
        )

    @_guard
    def LeaveWorker(self, request, context):
        reports = to_reports(request.reports)
        results = self.committer.call(
            lambda: self.core.leave_worker(request.worker_id, request.reason, reports)
        )
        return pb.LeaveWorkerResponse(results=to_results(results))

    @_guard
    def CreateDataset(self, request, context):
        spec = self.committer.call(lambda: self.core.create_dataset(spec_from_pb(request)))
        return spec_to_pb(spec)

    @_guard
    def GetShard(self, request, context):
        reports = to_reports(request.reports)
        grant = self.committer.call(
            lambda: self.core.get_shard(
                request.worker_id, request.dataset, request.max_shards, reports
            )
        )
        return pb.GetShardResponse(
            status=GRANT[grant.status], leases=[to_lease(x) for x in grant.leases],
            results=to_results(grant.results), retry_after_ms=grant.retry_after_ms,
        )

    @_guard
    def ReportShard(self, request, context):
        reports = to_reports(request.reports)
        results = self.committer.call(lambda: self.core.report(request.worker_id, reports))
        return pb.ReportShardResponse(results=to_results(results))

    @_guard
    def GetStatus(self, request, context):
        return self.committer.read(lambda: status_view(self.core))

    @_guard
    def GetEvents(self, request, context):
        if request.since < 0 or request.limit < 0:
            raise invalid("since and limit must be >= 0")
        limit = min(request.limit or 1000, MAX_EVENTS)
        rows = self.store.events(request.since, limit)
        events = [pb.Event(**row) for row in rows]
        return pb.GetEventsResponse(events=events, next=rows[-1]["seq"] if rows else request.since)

    @_guard
    def RegisterPS(self, request, context):
        def join():
            joined = self.core.join_ps(request.address, request.data_address, request.index,
                                       request.num_ps, request.data_public_key,
                                       request.instance)
            primary = ps_to_pb(joined.primary, False, self.core.replicas)
            # a restored primary lost the updates since its checkpoint; a backup copies its
            # primary's state instead and lost nothing. Same commit as the registration.
            if request.HasField("restored") and joined.role.value == "primary":
                ps_restores.record(self.core.journal, request.index, request.restored)
            return joined, primary

        joined, primary = self.committer.call(join)
        return pb.RegisterPSResponse(incarnation=joined.incarnation, role=joined.role.value,
                                     generation=joined.generation, primary=primary,
                                     replicas=self.core.settings.ps_replicas)

    @_guard
    def ListPS(self, request, context):
        def listing():
            rows, num_ps, complete = self.core.list_ps()
            return [ps_to_pb(r, r["idx"] in self.core.ps_lost, self.core.replicas)
                    for r in rows], num_ps, complete

        ps, num_ps, complete = self.committer.read(listing)
        return pb.ListPSResponse(ps=ps, num_ps=num_ps, complete=complete,
                                 replicas=self.core.settings.ps_replicas)

    @_guard
    def ReportReplicas(self, request, context):
        generation = self.committer.call(
            lambda: self.core.report_replicas(request.index, request.generation,
                                              request.instance, list(request.in_sync)))
        return pb.ReportReplicasResponse(generation=generation)

    @_guard
    def Requeue(self, request, context):
        if not request.quarantined:
            raise invalid(
                               "nothing to requeue: set quarantined=true (--quarantined)")
        n = self.committer.call(lambda: self.core.requeue_quarantined(request.dataset))
        return pb.RequeueResponse(requeued=n)


    @_guard
    def GetLedger(self, request, context):
        if request.dataset:
            self.committer.read(lambda: self.core._dataset(request.dataset))  # NOT_FOUND
        totals = self.store.lease_totals(request.dataset)
        workers = self.store.workers_all()
        epochs, now_ms = self.committer.read(
            lambda: (epoch_ledgers(totals, self.core.datasets), self.core.journal.now_ms())
        )
        labels, total, lost, left = worker_seconds(workers, now_ms)
        updates_lost, per_ps = ps_restores.updates_lost(
            self.store.events_of_kind(ps_restores.KIND), self.store.leases_between)
        done = sum(e["records_done"] for e in epochs)
        handed = sum(e["records_handed"] for e in epochs)
        return pb.GetLedgerResponse(
            epochs=[pb.EpochLedger(**e) for e in epochs],
            worker_seconds=[pb.LabelSeconds(**x) for x in labels],
            worker_seconds_total=total, records_done=done, records_handed=handed,
            records_redone=sum(e["records_redone"] for e in epochs),
            records_rehanded=sum(e["records_rehanded"] for e in epochs),
            goodput=done / handed if handed else 1.0, workers_lost=lost, workers_left=left,
            updates_lost=updates_lost, ps_updates_lost=[pb.PSUpdatesLost(**x) for x in per_ps],
        )


def build_server(
    core: MasterCore, committer: Committer, store: Store, host: str, port: int, threads: int,
    credentials: grpc.ServerCredentials | None = None,
    interceptors: tuple[grpc.ServerInterceptor, ...] | list = (),
) -> tuple[grpc.Server, int, health.HealthServicer]:
    """The master's gRPC server (not started): the Master service, health and reflection;
    over TLS with `credentials`, `interceptors` (rpckit.auth) checking the token."""
    return rpc_server.build_server(
        host, port, threads,
        [(pb_grpc.add_MasterServicer_to_server, MasterServicer(core, committer, store))],
        [SERVICE], interceptors=interceptors, credentials=credentials,
    )
