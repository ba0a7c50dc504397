"""MasterClient against a real master: registration, loss and re-registration, leave."""
from __future__ import annotations

import time

import pytest

from protos import master_pb2 as pb
from worker_sdk import MasterClient, MasterError
from worker_sdk.data.leases import LeaseTable, Report

pytestmark = pytest.mark.timeout(60)


def _spec(name, n=20, size=5):
    return pb.DatasetSpec(name=name, num_records=n, shard_size=size, num_epochs=1)


def test_a_lost_worker_registers_again_and_drops_its_leases(master_factory):
    master = master_factory("--worker-timeout", "0.8", "--heartbeat-interval", "0.2")
    client = MasterClient(master.address, name="quiet", heartbeat=False)
    table = LeaseTable("d")
    client.attach(table)
    seen = []
    client.on_reregister(seen.append)
    client.create_dataset(_spec("d"))
    response, uncertain = client.get_shard("d", 2)
    assert response.status == pb.GetShardResponse.LEASED and not uncertain
    for lease in response.leases:
        table.add(lease.lease_id, lease.shard.epoch, lease.shard.index, lease.shard.start,
                  lease.shard.end)
    first = client.worker_id
    assert client.heartbeat_interval_s == 0.2 and len(client.worker_leases("d")) == 2
    time.sleep(1.5)  # no heartbeats: the master declares the worker lost
    response, _ = client.get_shard("d", 1)
    assert client.worker_id != first and client.registrations == 2
    assert seen and "register again" in seen[0]
    assert table.dropped == 2 and not table.leases  # the master took them back
    assert response.leases[0].shard.index in {0, 1}  # they come back first, to anyone
    epoch = master.dataset("d").epochs[0]
    assert epoch.requeues["lost"] == 2
    client.leave("finished")
    client.close()
    table.close()


def test_leave_carries_progress_and_the_remainder_comes_back_at_once(master):
    client = MasterClient(master.address, name="leaver")
    client.create_dataset(_spec("d"))
    response, _ = client.get_shard("d", 1)
    (lease,) = response.leases
    results = client.leave("scaled-down", reports=(Report(lease.lease_id, "PROGRESS", 2),))
    assert [r.accepted for r in results] == [True]
    assert client.worker_id is None
    epoch = master.dataset("d").epochs[0]
    assert epoch.records_done == 2 and epoch.requeues["scaled-down"] == 1
    assert [e.cause for e in master.events() if e.kind == "worker_left"] == ["scaled-down"]
    # a later call registers again
    response, _ = client.get_shard("d", 1)
    assert response.leases[0].shard.start == lease.shard.start + 2  # the remainder, first
    client.close()


def test_bad_input_is_raised_with_the_masters_message(master):
    client = MasterClient(master.address, name="bad", heartbeat=False)
    with pytest.raises(MasterError, match="shard_size must be > 0"):
        client.create_dataset(_spec("d", size=0))
    with pytest.raises(MasterError, match="unknown dataset 'nope'"):
        client.get_shard("nope", 1)
    client.close()


def test_a_launched_worker_registers_with_the_master_name_and_labels_of_its_environment(
        master, monkeypatch):
    """What a launching master sets (ELASTIC_PS_MASTER, ELASTIC_PS_WORKER_NAME,
    ELASTIC_PS_LABELS) is how the worker registers; labels given in code are added over them."""
    monkeypatch.setenv("ELASTIC_PS_MASTER", master.address)
    monkeypatch.setenv("ELASTIC_PS_WORKER_NAME", "job-worker-3")
    monkeypatch.setenv("ELASTIC_PS_LABELS", "market=spot")
    monkeypatch.setenv("ELASTIC_PS_WORKER_LABELS", "zone=a")
    plain = MasterClient(heartbeat=False)
    extra = MasterClient(name="by-hand", labels={"zone": "b"}, heartbeat=False)
    try:
        plain.register()
        extra.register()
        workers = {w.name: dict(w.labels) for w in master.status().workers}
        assert workers == {"job-worker-3": {"market": "spot", "zone": "a"},
                           "by-hand": {"market": "spot", "zone": "b"}}
    finally:
        plain.close()
        extra.close()
