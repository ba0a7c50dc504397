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
