"""Property test: random and malformed requests for every Master RPC, built from the protobuf
descriptors, against a real master process over gRPC (issue 16).

Whatever a client sends, the answer is never UNKNOWN or INTERNAL, the master stays up, and a
refused call changes nothing: GetStatus and the timeline are the same before and after it.
Requests mix values that make sense (the ids of real workers, datasets and leases) with
hostile ones: huge, negative, NaN and infinite numbers, unknown enum values, long strings,
NUL and control characters, and raw bytes that may not decode at all.
"""
from __future__ import annotations

import grpc
import pytest
from google.protobuf import message_factory
from google.protobuf.descriptor import FieldDescriptor as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protos import master_pb2 as pb
from protos import master_pb2_grpc as pb_grpc

SERVICE = pb.DESCRIPTOR.services_by_name["Master"]
BUGS = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}
WORDS = ["w-1", "w-2", "w-3", "d", "e", "preempted", "127.0.0.1:1", "tcp://127.0.0.1:2", ""]

INT_RANGES = {
    F.TYPE_INT32: (-(1 << 31), (1 << 31) - 1), F.TYPE_SINT32: (-(1 << 31), (1 << 31) - 1),
    F.TYPE_INT64: (-(1 << 63), (1 << 63) - 1), F.TYPE_SINT64: (-(1 << 63), (1 << 63) - 1),
    F.TYPE_UINT32: (0, (1 << 32) - 1), F.TYPE_UINT64: (0, (1 << 64) - 1),
    F.TYPE_FIXED64: (0, (1 << 64) - 1), F.TYPE_FIXED32: (0, (1 << 32) - 1),
}

hostile_text = st.one_of(
    st.sampled_from(WORDS),
    st.text(max_size=12),
    st.text(alphabet=st.sampled_from("\x00\n\r\t\x7f\u2028 a-_./:\u00e9\U0001f600"), max_size=20),
    st.builds(lambda c, n: c * n, st.sampled_from("ax\x00"), st.integers(100, 70_000)),
    st.sampled_from(["d\n", "w-1\x00", "w-99999999999999999999", "w-\u00b2"]),
)


def integers(low: int, high: int):
    edges = [v for v in (low, high, -1, 0, 1, 2, 3, 255, 256, 4096, 1 << 31, 1 << 50, 1 << 62,
                         (1 << 62) + 1) if low <= v <= high]
    return st.one_of(st.sampled_from(edges), st.integers(low, high), st.integers(0, 50))


def field_value(field, depth: int):
    if field.type == F.TYPE_MESSAGE:
        return message(field.message_type, depth + 1)
    if field.type == F.TYPE_ENUM:
        return st.one_of(st.sampled_from([v.number for v in field.enum_type.values]),
                         st.integers(-(1 << 31), (1 << 31) - 1))
    if field.type in INT_RANGES:
        return integers(*INT_RANGES[field.type])
    if field.type in (F.TYPE_DOUBLE, F.TYPE_FLOAT):
        return st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=32
                                   if field.type == F.TYPE_FLOAT else 64),
                         st.sampled_from([0.0, 1.0, 1e17, -1.0, 604800.0, 604801.0]))
    if field.type == F.TYPE_BOOL:
        return st.booleans()
    if field.type == F.TYPE_STRING:
        return hostile_text
    return st.binary(max_size=64)


def message(descriptor, depth: int = 0):
    """A strategy of `descriptor`'s message built field by field (a few levels deep)."""
    cls = message_factory.GetMessageClass(descriptor)
    if depth > 3:
        return st.just(cls())
    fields = {}
    for field in descriptor.fields:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            key, value = field.message_type.fields_by_name["key"], \
                field.message_type.fields_by_name["value"]
            fields[field.name] = st.dictionaries(field_value(key, depth), field_value(value, depth),
                                                 max_size=4)
        elif field.is_repeated:
            fields[field.name] = st.lists(field_value(field, depth), max_size=4)
        else:
            fields[field.name] = st.one_of(st.none(), field_value(field, depth))

    def build(values: dict):
        msg = cls()
        for name, value in values.items():
            if value is None:
                continue
            target = getattr(msg, name) if not isinstance(value, (int, float, str, bytes,
                                                                   bool)) else None
            if isinstance(value, dict):
                target.update(value)
            elif isinstance(value, list):
                if value and not isinstance(value[0], (int, float, str, bytes, bool)):
                    target.extend(value)
                else:
                    target.extend(value)
            elif target is not None:
                target.CopyFrom(value)
            else:
                setattr(msg, name, value)
        return msg

    return st.fixed_dictionaries(fields).map(build)


def comparable(status: pb.GetStatusResponse) -> bytes:
    status.time_ms = 0
    return status.SerializeToString(deterministic=True)


TICK_KINDS = {"worker_lost", "lease_requeued", "epoch_finished", "ps_lost",
              "ps_resize_waiting"}  # the mover says on its tick what a resize waits for


@pytest.mark.slow
def test_no_request_crashes_stalls_or_half_changes_the_master(master_factory):
    master = master_factory("--worker-timeout", "3600", "--heartbeat-interval", "1")
    channel = grpc.insecure_channel(master.address)
    stub = pb_grpc.MasterStub(channel)
    for name in ("a", "b", "c"):
        stub.RegisterWorker(pb.RegisterWorkerRequest(name=name, labels={"zone": "z"}))
    stub.CreateDataset(pb.DatasetSpec(name="d", num_records=1000, shard_size=10, num_epochs=3,
                                      lease_timeout_s=3600))
    stub.GetShard(pb.GetShardRequest(worker_id="w-1", dataset="d", max_shards=4))
    calls = {m.name: (m, channel.unary_unary(
        f"/{SERVICE.full_name}/{m.name}", request_serializer=lambda x: x,
        response_deserializer=lambda x: x)) for m in SERVICE.methods}
    request = st.one_of(
        st.sampled_from(sorted(calls)).flatmap(
            lambda name: st.tuples(st.just(name),
                                   message(calls[name][0].input_type).map(
                                       lambda m: m.SerializeToString()))),
        st.tuples(st.sampled_from(sorted(calls)), st.binary(max_size=200)),
    )
    seen = {"refused": 0, "accepted": 0}
    dropped: set[str] = set()  # datasets an accepted DropDataset removed (a legal request)

    @settings(max_examples=1200, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(call=request)
    def one(call):
        name, data = call
        before = comparable(stub.GetStatus(pb.GetStatusRequest()))
        last = stub.GetEvents(pb.GetEventsRequest(since=0, limit=1)).next
        tail = stub.GetEvents(pb.GetEventsRequest(since=1 << 62)).next  # no event that far
        assert tail == 1 << 62
        events_before = _last_seq(stub, last)
        try:
            calls[name][1](data, timeout=30)
            seen["accepted"] += 1
            if name == "DropDataset":
                dropped.add(pb.DropDatasetRequest.FromString(data).dataset)
            return
        except grpc.RpcError as exc:
            assert exc.code() not in BUGS, (name, data[:200], exc.code(), exc.details())
            assert exc.code() != grpc.StatusCode.DEADLINE_EXCEEDED, (name, data[:200])
            seen["refused"] += 1
        added = stub.GetEvents(pb.GetEventsRequest(since=events_before)).events
        assert {e.kind for e in added} <= TICK_KINDS, (name, data[:200], added)
        if not added:  # nothing happened in the background meanwhile: compare everything
            assert comparable(stub.GetStatus(pb.GetStatusRequest())) == before, name

    one()
    assert seen["refused"] > 100 and seen["accepted"] > 20, seen  # both paths ran
    assert master.alive
    names = {d.spec.name for d in stub.GetStatus(pb.GetStatusRequest()).datasets}
    assert "d" in names or "d" in dropped, (names, dropped)  # gone only if a call dropped it


def _last_seq(stub, since: int) -> int:
    while True:
        page = stub.GetEvents(pb.GetEventsRequest(since=since, limit=10_000))
        if not page.events:
            return since
        since = page.next
