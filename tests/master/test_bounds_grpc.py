"""Issue 16 over real gRPC: undecodable bytes, quoted messages, bounded answers."""
from __future__ import annotations

import grpc
import pytest

from protos import master_pb2 as pb
from protos import master_pb2_grpc as pb_grpc
from rpckit.errors import reason_of

METHODS = [m.name for m in pb.DESCRIPTOR.services_by_name["Master"].methods]
CLIENT_LIMIT = 4 * 1024 * 1024  # grpc's default max receive size


def test_undecodable_request_bytes_are_invalid_argument(master):
    channel = grpc.insecure_channel(master.address)
    garbage = [b"\xff\xff\xff\xff", b"\x0a\xff\x01abc", b"\x08" + b"\xff" * 11, b"\x12\x05\xc3\x28"]
    for name in METHODS:
        call = channel.unary_unary(f"/elasticps.v1.Master/{name}")
        for data in garbage:
            with pytest.raises(grpc.RpcError) as info:
                call(data, timeout=10)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (name, data)
            assert reason_of(info.value) == "UNDECODABLE"
    stub = pb_grpc.MasterStub(channel)
    assert stub.GetStatus(pb.GetStatusRequest()).time_ms > 0  # still serving


def test_error_messages_quote_a_short_prefix(master):
    stub = pb_grpc.MasterStub(grpc.insecure_channel(master.address))
    wid = stub.RegisterWorker(pb.RegisterWorkerRequest(name="w")).worker_id
    with pytest.raises(grpc.RpcError) as info:
        stub.GetShard(pb.GetShardRequest(worker_id=wid, dataset="x" * 200_000))
    assert info.value.code() == grpc.StatusCode.NOT_FOUND  # not RESOURCE_EXHAUSTED
    assert len(info.value.details()) < 300
    with pytest.raises(grpc.RpcError) as info:
        stub.Heartbeat(pb.HeartbeatRequest(worker_id="w" * 200_000))
    assert info.value.code() == grpc.StatusCode.NOT_FOUND and len(info.value.details()) < 300


@pytest.mark.slow
def test_status_and_events_stay_under_the_client_limit_at_1000_workers(master):
    stub = pb_grpc.MasterStub(grpc.insecure_channel(master.address))
    labels = {f"{k:02d}" + "k" * 61: "v" * 256 for k in range(32)}  # the most a worker may have
    futures = [stub.RegisterWorker.future(pb.RegisterWorkerRequest(name="n" * 128, labels=labels))
               for _ in range(1000)]
    ids = [f.result(timeout=60).worker_id for f in futures]
    assert len(set(ids)) == 1000
    status = stub.GetStatus(pb.GetStatusRequest())
    assert status.ByteSize() < CLIENT_LIMIT
    assert status.workers and len(status.workers) + status.workers_not_shown == 1000
    seen, since = 0, 0
    while True:
        page = stub.GetEvents(pb.GetEventsRequest(since=since, limit=10_000))
        assert page.ByteSize() < CLIENT_LIMIT
        if not page.events:
            break
        seen += sum(e.kind == "worker_registered" for e in page.events)
        since = page.next
    assert seen == 1000


def _refused(call) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call()
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    assert reason_of(info.value) == "INVALID_ARGUMENT"
    return info.value


def test_rpcs_since_round_2_bound_every_number_and_name(master):
    """Issue 37: GetLeases answered INTERNAL for a lease id past int64; its siblings' fields."""
    stub = pb_grpc.MasterStub(grpc.insecure_channel(master.address))
    stub.CreateDataset(pb.DatasetSpec(name="d", num_records=100, shard_size=10, num_epochs=1))
    events_before = stub.GetEvents(pb.GetEventsRequest(since=0, limit=10_000)).next
    for after in (1 << 63, (1 << 64) - 1):
        err = _refused(lambda: stub.GetLeases(pb.GetLeasesRequest(
            dataset="d", after=after, limit=2147483647)))
        assert "after" in err.details()
    assert stub.GetLeases(pb.GetLeasesRequest(dataset="d", after=(1 << 63) - 1)).next == \
        (1 << 63) - 1  # the largest lease id: an empty page
    _refused(lambda: stub.GetLeases(pb.GetLeasesRequest(dataset="d", limit=-1)))
    _refused(lambda: stub.GetLeases(pb.GetLeasesRequest(dataset="x" * 200)))
    _refused(lambda: stub.GetEvents(pb.GetEventsRequest(since=-1)))
    ps = dict(address="127.0.0.1:1", data_address="tcp://127.0.0.1:2", index=0, num_ps=1,
              instance="i-1")
    for bad in (dict(address="no-port"), dict(address="h:0"), dict(address="h:65536"),
                dict(data_address="127.0.0.1:2"), dict(data_address="tcp://h"),
                dict(restored=pb.RestoredCheckpoint(taken_ms=1, started_ms=2, number=-1)),
                dict(restored=pb.RestoredCheckpoint(taken_ms=1, started_ms=(1 << 63) - 1)),
                dict(restored=pb.RestoredCheckpoint(taken_ms=1, started_ms=2,
                                                    applied={"c": -1}))):
        _refused(lambda: stub.RegisterPS(pb.RegisterPSRequest(**{**ps, **bad})))
    joined = stub.RegisterPS(pb.RegisterPSRequest(**ps))
    report = dict(index=0, generation=joined.generation, instance="i-1")
    for bad in (dict(index=-1), dict(index=1 << 30), dict(generation=-1),
                dict(in_sync=["x" * 65]), dict(in_sync=["a\nb"])):
        _refused(lambda: stub.ReportReplicas(pb.ReportReplicasRequest(**{**report, **bad})))
    stub.ReportReplicas(pb.ReportReplicasRequest(**report, in_sync=["i-2"]))
    kinds = [e.kind for e in stub.GetEvents(pb.GetEventsRequest(since=events_before)).events]
    assert kinds == ["ps_registered"], kinds  # only the accepted registration left a trace
