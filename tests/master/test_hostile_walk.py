"""Every field of every Master RPC made hostile, one at a time, against a real master process
(issue 37): the walk comes from the protobuf descriptors (tests/rpckit/hostile.py), so an RPC
or field added later is walked too, and a new RPC fails here until it has a base request.

Each variant is a request the master accepts (its base) with one field set to a large,
negative or max-value number, NaN, an unknown enum value, an empty, unknown, long or
control-character string, or a huge repeated count. The answer is never INTERNAL or UNKNOWN;
a refusal carries an ErrorInfo reason; a refused call changes nothing (GetStatus and the
timeline are the same after it); the master stays up and healthy.
"""
from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from protos import master_pb2 as pb
from protos import master_pb2_grpc as pb_grpc
from rpckit.errors import reason_of
from tests.rpckit.hostile import variants

pytestmark = pytest.mark.slow

BUGS = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}
TICK_KINDS = {"worker_lost", "lease_requeued", "epoch_finished", "ps_lost", "ps_backup_lost",
              "ps_resize_waiting"}  # the mover says on its tick what a resize waits for
PROGRESS = pb.ShardReport.PROGRESS
# the field a call uses up: each variant gets a fresh one (a worker that leaves, a dataset
# that is dropped), unless that field is the hostile one
USED_UP = {"LeaveWorker": "worker_id", "DropDataset": "dataset"}
# RPCs of a job the master drives (elastic-job): this master runs none, so even their base is
# refused, with NO_JOB; their hostile variants are walked all the same
NEEDS_JOB = {"GetPlan", "StopJob"}


class Bases:
    """Per RPC, a request the master accepts, built fresh for each variant where the call
    uses something up (a worker that leaves, a dataset that is dropped)."""

    def __init__(self, stub):
        self.stub = stub
        self.drops = 0
        self.wid = self._worker()
        stub.CreateDataset(self.spec("d"))
        grant = stub.GetShard(pb.GetShardRequest(worker_id=self.wid, dataset="d", max_shards=2))
        self.lease_id = grant.leases[0].lease_id
        stub.RegisterPS(self._register_ps())

    def _worker(self) -> str:
        return self.stub.RegisterWorker(pb.RegisterWorkerRequest(name="n")).worker_id

    @staticmethod
    def spec(name: str) -> pb.DatasetSpec:
        return pb.DatasetSpec(name=name, num_records=1000, shard_size=10, num_epochs=3,
                              shuffle=True, seed=7, lease_timeout_s=3600)

    @staticmethod
    def _register_ps() -> pb.RegisterPSRequest:
        return pb.RegisterPSRequest(
            address="127.0.0.1:1", data_address="tcp://127.0.0.1:2", index=0, num_ps=1,
            instance="i-1", restored=pb.RestoredCheckpoint(
                taken_ms=1, started_ms=2, number=1, applied={"client": 3}))

    def _report_replicas(self) -> pb.ReportReplicasRequest:
        # the primary of index 0 now: RegisterPS's variants may have replaced the base's
        primary = self.stub.ListPS(pb.ListPSRequest()).ps[0]
        return pb.ReportReplicasRequest(index=0, generation=primary.generation,
                                        instance=primary.instance, in_sync=["i-2"])

    def report(self) -> pb.ShardReport:
        return pb.ShardReport(lease_id=self.lease_id, outcome=PROGRESS, records_done=1,
                              message="m")

    def build(self, method: str):
        s = self
        if method == "LeaveWorker":
            return pb.LeaveWorkerRequest(worker_id=self._worker(), reason="preempted",
                                         reports=[pb.ShardReport(lease_id=1 << 40)])
        if method == "DropDataset":
            s.drops += 1
            name = f"drop-{s.drops}"
            self.stub.CreateDataset(self.spec(name))
            return pb.DropDatasetRequest(dataset=name, force=True)
        return {
            "RegisterWorker": lambda: pb.RegisterWorkerRequest(name="n", labels={"zone": "z"}),
            "Heartbeat": lambda: pb.HeartbeatRequest(worker_id=s.wid, progress=[s.report()]),
            "CreateDataset": lambda: s.spec("d"),
            "GetShard": lambda: pb.GetShardRequest(worker_id=s.wid, dataset="d", max_shards=1,
                                                   reports=[s.report()]),
            "ReportShard": lambda: pb.ReportShardRequest(worker_id=s.wid, reports=[s.report()]),
            "GetStatus": pb.GetStatusRequest,
            "GetEvents": lambda: pb.GetEventsRequest(since=1, limit=5),
            "GetLeases": lambda: pb.GetLeasesRequest(dataset="d", after=0, limit=5),
            "RegisterPS": self._register_ps,
            "ListPS": pb.ListPSRequest,
            "ResizePS": lambda: pb.ResizePSRequest(num_ps=1),
            "ReportReplicas": self._report_replicas,
            "Requeue": lambda: pb.RequeueRequest(dataset="d", quarantined=True),
            "GetLedger": lambda: pb.GetLedgerRequest(dataset="d"),
            "GetPlan": lambda: pb.GetPlanRequest(decisions=5, ended=True),
            "StopJob": lambda: pb.StopJobRequest(reason="walk"),
        }[method]()


def comparable(status: pb.GetStatusResponse) -> bytes:
    status.time_ms = 0
    return status.SerializeToString(deterministic=True)


def _last_seq(stub) -> int:
    since = 0
    while True:
        page = stub.GetEvents(pb.GetEventsRequest(since=since, limit=10_000))
        if not page.events:
            return since
        since = page.next


def test_every_field_of_every_master_rpc_answers_hostile_input_cleanly(master_factory):
    # the PS the bases register is never reachable: the long timeout (workers' and PS') keeps
    # it from being declared lost midway
    master = master_factory("--worker-timeout", "3600")
    channel = grpc.insecure_channel(master.address)
    stub = pb_grpc.MasterStub(channel)
    bases = Bases(stub)
    seen = {"refused": 0, "accepted": 0}
    for service in pb.DESCRIPTOR.services_by_name.values():
        for method in service.methods:
            call = channel.unary_unary(f"/{service.full_name}/{method.name}",
                                       request_serializer=lambda m: m.SerializeToString(),
                                       response_deserializer=lambda b: b)
            if method.name in NEEDS_JOB:
                with pytest.raises(grpc.RpcError) as refused:
                    call(bases.build(method.name), timeout=30)
                assert reason_of(refused.value) == "NO_JOB", method.name
            else:
                call(bases.build(method.name), timeout=30)  # the base itself is accepted
            template, count = bases.build(method.name), 0
            for path, request in variants(template):
                used_up = USED_UP.get(method.name)
                if used_up and getattr(request, used_up) == getattr(template, used_up):
                    setattr(request, used_up, getattr(bases.build(method.name), used_up))
                outcome = _send(stub, call, request, f"{method.name}.{path}")
                seen[outcome] += 1
                count += 1
            assert count or not method.input_type.fields, method.name
    assert seen["refused"] > 100 and seen["accepted"] > 50, seen
    assert master.alive
    health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    assert stub.GetStatus(pb.GetStatusRequest()).time_ms > 0


def _send(stub, call, request, where: str) -> str:
    before = comparable(stub.GetStatus(pb.GetStatusRequest()))
    events_before = _last_seq(stub)
    try:
        call(request, timeout=30)
        return "accepted"
    except grpc.RpcError as exc:
        assert exc.code() not in BUGS, (where, exc.code(), exc.details())
        assert exc.code() != grpc.StatusCode.DEADLINE_EXCEEDED, where
        assert reason_of(exc), (where, exc.code(), exc.details())  # machine-readable
        assert len(exc.details()) < 1000, where  # quotes a short prefix of what it got
    added = stub.GetEvents(pb.GetEventsRequest(since=events_before)).events
    assert {e.kind for e in added} <= TICK_KINDS, (where, added)
    if not added:
        assert comparable(stub.GetStatus(pb.GetStatusRequest())) == before, where
    return "refused"
