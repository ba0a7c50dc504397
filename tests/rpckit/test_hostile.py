"""The descriptor walk of tests/rpckit/hostile.py reaches every field, nested ones included,
and leaves the rest of the base request as it was (no network)."""
from __future__ import annotations

from protos import master_pb2 as pb
from tests.rpckit.hostile import LONG, MANY, variants


def _leaves(descriptor, prefix: str = "") -> set[str]:
    out = set()
    for field in descriptor.fields:
        if field.message_type is not None and not field.message_type.GetOptions().map_entry:
            out |= _leaves(field.message_type, f"{prefix}{field.name}.")
        else:
            out.add(prefix + field.name)
    return out


def test_every_field_nested_and_mapped_is_made_hostile():
    base = pb.RegisterPSRequest(address="h:1", index=0, instance="i",
                                restored=pb.RestoredCheckpoint(taken_ms=1, started_ms=2,
                                                               applied={"c": 1}))
    found = list(variants(base))
    touched = {path.split("=")[0].split("[")[0] for path, _ in found}
    assert touched == _leaves(pb.RegisterPSRequest.DESCRIPTOR)
    by_path = dict(found)
    assert by_path["index=-1"].index == -1
    assert by_path["index=-1"].address == "h:1" and by_path["index=-1"].restored.taken_ms == 1
    assert by_path["restored.number=9223372036854775807"].restored.applied == {"c": 1}
    assert len(by_path[f"restored.applied[{MANY} entries]"].restored.applied) == MANY
    assert any(len(m.address) == LONG for m in by_path.values())


def test_repeated_messages_get_hostile_items_and_huge_counts():
    base = pb.HeartbeatRequest(worker_id="w-1", progress=[pb.ShardReport(lease_id=5)])
    by_path = dict(variants(base))
    assert by_path["progress.lease_id=18446744073709551615"].progress[0].lease_id == (1 << 64) - 1
    assert len(by_path[f"progress[{MANY} items]"].progress) == MANY
    assert by_path["progress.outcome=999"].worker_id == "w-1"
    assert base.progress[0].lease_id == 5  # the base itself is never changed
