"""gRPC control plane: a thin servicer over the ParamStore and Checkpointer, plus health checking."""
from __future__ import annotations

import errno
import logging
import time
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health

from protos import ps_pb2, ps_pb2_grpc
from rpckit import decode
from rpckit import server as rpc_server
from rpckit.errors import Reason, ServiceError, abort
from rpckit.server import PortInUse  # noqa: F401 - re-exported for __main__

from .checkpoint import Checkpointer
from .slots.bounds import check_move
from pswire.optimizers import config_to_pb
from .store.params import ParamStore
from pswire.frames import meta_of

log = logging.getLogger(__name__)
DESCRIPTOR = ps_pb2.DESCRIPTOR.services_by_name["ParameterServer"]
SERVICE = DESCRIPTOR.full_name


def register(servicer: "PSServicer", server: grpc.Server) -> None:
    """Add the control service to `server`, undecodable requests answered INVALID_ARGUMENT
    (UNDECODABLE) rather than grpc's INTERNAL."""
    decode.add_servicer(server, servicer, DESCRIPTOR)


@dataclass
class Identity:
    index: int
    num_ps: int
    address: str = ""
    data_address: str = ""
    started_ms: int = 0
    data_public_key: str = ""  # CURVE (Z85) when the data plane is encrypted


def status_view(store: ParamStore, checkpointer: Checkpointer | None,
                me: Identity, node=None) -> ps_pb2.GetPSStatusResponse:
    s = store.stats
    resp = ps_pb2.GetPSStatusResponse(
        index=me.index, num_ps=me.num_ps, address=me.address, data_address=me.data_address,
        initialized=store.initialized, pushes=s.pushes, pulls=s.pulls,
        duplicates=store.applied.duplicates, refused_stale=s.refused_stale,
        max_staleness_seen=s.max_staleness_seen, started_ms=me.started_ms,
        max_staleness_allowed=store.max_staleness, waited_for_send=s.waited_for_send,
        copies_on_write=s.copies_on_write, data_public_key=me.data_public_key,
    )
    if node is not None:  # ps.replication.ReplicaNode
        for key, value in node.status().items():
            setattr(resp, key, value)
    else:
        resp.role = "primary"
    if store.optimizer_cfg:
        resp.optimizer.CopyFrom(config_to_pb(store.optimizer_cfg))
    for name in sorted(store.dense):
        d = store.dense[name]
        resp.tensors.add(meta=meta_of(name, d.value), version=d.version)
    for name in sorted(store.tables):
        t = store.tables[name]
        t.expire()  # lazy TTL: rows past it are not counted as held
        row = resp.tables.add(rows=len(t), pushes=t.pushes, bytes=t.nbytes,
                              admitted=t.admitted, filtered=t.filtered)
        row.evicted.update({cause.value: n for cause, n in t.evicted.items()})
        row.spec.name, row.spec.dim, row.spec.seed = t.spec.name, t.spec.dim, t.spec.seed
        row.spec.initializer, row.spec.init_a, row.spec.init_b = (
            t.spec.initializer, t.spec.init_a, t.spec.init_b)
        row.spec.num_embeddings = t.spec.num_embeddings
        row.spec.max_rows, row.spec.admit_after, row.spec.evict = (
            t.spec.max_rows, t.spec.admit_after, t.spec.evict)
        row.spec.ttl_s, row.spec.ttl_steps = t.spec.ttl_s, t.spec.ttl_steps
        row.spec.optimizer.CopyFrom(config_to_pb(store.table_cfgs[name]))
    resp.staleness.update({int(k): int(v) for k, v in dict(s.staleness).items()})
    if checkpointer is not None:
        resp.checkpoints = checkpointer.written
        if checkpointer.last is not None:
            resp.last_checkpoint = checkpointer.last.path.name
            resp.last_checkpoint_ms = checkpointer.last.time_ms
        if checkpointer.restored is not None:
            resp.restored_from = checkpointer.restored.path.name
    return resp


class PSServicer(ps_pb2_grpc.ParameterServerServicer):
    def __init__(self, store: ParamStore, checkpointer: Checkpointer, me: Identity, node=None,
                 slot_calls=None):
        """slot_calls: a ps.slots.calls.SlotCalls (MoveSlots is refused without one)."""
        self.node = node
        self.slot_calls = slot_calls
        self.store = store
        self.checkpointer = checkpointer
        self.me = me

    def Checkpoint(self, request, context):
        try:
            info = self.checkpointer.write()
        except OSError as exc:
            code = (grpc.StatusCode.RESOURCE_EXHAUSTED if exc.errno == errno.ENOSPC
                    else grpc.StatusCode.UNAVAILABLE)
            context.abort(code, f"cannot write the checkpoint: {exc}")
        except Exception:  # noqa: BLE001 - a bug
            log.exception("checkpoint failed")
            context.abort(grpc.StatusCode.INTERNAL, "checkpoint failed (see the PS log)")
        return ps_pb2.CheckpointResponse(path=info.path.name, bytes=info.bytes,
                                         seconds=info.seconds, number=info.number)

    def GetPSStatus(self, request, context):
        return status_view(self.store, self.checkpointer, self.me, self.node)

    def MoveSlots(self, request, context):
        if self.slot_calls is None:
            abort(context, ServiceError("FAILED_PRECONDITION", Reason.LAYOUT_MISMATCH,
                                        "this PS runs without a master: its slots never move"))
        try:
            check_move(request, self.store.ownership.num_slots)
            return self.slot_calls.call(request)
        except ServiceError as exc:
            abort(context, exc)
        except Exception:  # noqa: BLE001 - a bug: logged, and said to be one
            log.exception("MoveSlots failed")
            context.abort(grpc.StatusCode.INTERNAL, "MoveSlots failed (see the PS log)")


def build_server(servicer: PSServicer, host: str, port: int, threads: int,
                 credentials: grpc.ServerCredentials | None = None,
                 interceptors: tuple[grpc.ServerInterceptor, ...] | list = (),
                 ) -> tuple[grpc.Server, int, health.HealthServicer]:
    """The PS's gRPC server (not started): the control service, health and reflection;
    over TLS with `credentials`, `interceptors` (rpckit.auth) checking the token."""
    return rpc_server.build_server(
        host, port, threads,
        [(register, servicer)], [SERVICE],
        thread_name_prefix="ps-grpc", interceptors=interceptors, credentials=credentials,
    )


def not_serving_on_failure(health_servicer: health.HealthServicer):
    """A DataPlane `on_failure` callback: a PS whose data plane stopped serving must not look
    healthy to the master's health checks or to a prober."""
    from grpc_health.v1 import health_pb2

    def failed(why: str) -> None:
        for service in ("", SERVICE):
            health_servicer.set(service, health_pb2.HealthCheckResponse.NOT_SERVING)

    return failed


def now_ms() -> int:
    return int(time.time() * 1000)
