"""Dropping a dataset: refused while leases are out, durable, the name free again."""
from __future__ import annotations

import grpc
import pytest

from master.calls import Report
from master.core import MasterCore
from master.datasets.drop import drop_dataset
from master.datasets.spec import DatasetSpec
from master.persistence.store import Store
from protos import master_pb2 as pb
from rpckit.errors import Reason, ServiceError, reason_of
from tests.fakes import FakeClock


def test_drop_and_create_again_in_one_group_commit_keeps_only_the_new_dataset(tmp_path):
    """Rows of the dropped dataset still pending in the batch go with it; rows written after
    the drop (the name created again) stay."""
    store = Store(f"sqlite:///{tmp_path}/m.db")
    store.upgrade()
    core = MasterCore(clock=FakeClock(), snapshot=store.load())
    store.apply(core.journal.swap())

    def call(fn):  # as the committer runs a call: its changes folded in when it returns
        core.journal.begin_call()
        try:
            return fn()
        except ServiceError:
            core.journal.discard_call()
            raise
        finally:
            core.journal.end_call()

    worker = call(lambda: core.register_worker("w", {}))
    call(lambda: core.create_dataset(DatasetSpec(name="d", num_records=100, shard_size=10)))
    grant = call(lambda: core.get_shard(worker.worker_id, "d", 3, []))
    call(lambda: core.report(worker.worker_id, [Report(grant.leases[0].lease_id, "DONE")]))
    with pytest.raises(ServiceError) as busy:
        call(lambda: drop_dataset(core, "d", force=False))
    assert busy.value.reason == Reason.DATASET_BUSY and "--force" in busy.value.message
    assert "d" in core.datasets and len(core.leases) == 2  # refused: nothing changed
    dropped = call(lambda: drop_dataset(core, "d", force=True))
    assert (dropped.leases_ended, dropped.epochs, dropped.finished) == (2, 1, False)
    assert core.leases == {} and worker.leases == set()
    call(lambda: core.create_dataset(DatasetSpec(name="d", num_records=40, shard_size=20)))
    store.apply(core.journal.swap())  # one transaction for everything above

    again = MasterCore(clock=FakeClock(), snapshot=store.load())
    assert again.datasets["d"].spec.num_records == 40
    assert again.leases == {}
    assert store.leases_of("d") == []
    stats = again.datasets["d"].epochs
    assert all(s.handouts == 0 and s.records_done == 0 for s in stats.values())
    kinds = [e["kind"] for e in store.events(0, 100)]
    assert kinds.count("dataset_created") == 2 and kinds.count("dataset_dropped") == 1


@pytest.mark.slow
def test_drop_refuses_while_leases_are_out_and_works_after(master):
    stub = master.stub()
    stub.CreateDataset(pb.DatasetSpec(name="old", num_records=40, shard_size=10, num_epochs=1))
    wid = stub.RegisterWorker(pb.RegisterWorkerRequest(name="w")).worker_id
    leases = stub.GetShard(pb.GetShardRequest(worker_id=wid, dataset="old", max_shards=4)).leases
    assert len(leases) == 4
    before = master.dataset("old")

    with pytest.raises(grpc.RpcError) as refused:
        stub.DropDataset(pb.DropDatasetRequest(dataset="old"))
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert reason_of(refused.value) == Reason.DATASET_BUSY
    assert "4 leases out" in refused.value.details() and wid in refused.value.details()
    assert master.dataset("old") == before  # nothing changed

    stub.ReportShard(pb.ReportShardRequest(worker_id=wid, reports=[
        pb.ShardReport(lease_id=x.lease_id, outcome=pb.ShardReport.DONE) for x in leases]))
    assert master.dataset("old").finished
    reply = stub.DropDataset(pb.DropDatasetRequest(dataset="old"))
    assert (reply.leases_ended, reply.epochs, reply.finished) == (0, 1, True)
    assert [d.spec.name for d in master.status().datasets] == []
    dropped = [e for e in master.events() if e.kind == "dataset_dropped"]
    assert len(dropped) == 1 and dropped[0].dataset == "old"

    master.restart()  # SIGKILL: the drop was durable before it was answered
    assert [d.spec.name for d in master.status().datasets] == []
    # the name is free: another spec under it is a new dataset, not ALREADY_EXISTS
    stub = master.stub()
    stub.CreateDataset(pb.DatasetSpec(name="old", num_records=30, shard_size=10, num_epochs=1))
    assert master.dataset("old").records_done == 0
    with pytest.raises(grpc.RpcError) as unknown:
        stub.DropDataset(pb.DropDatasetRequest(dataset="nope"))
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.slow
def test_a_forced_drop_ends_the_leases_and_their_reports_count_nowhere(master):
    stub = master.stub()
    stub.CreateDataset(pb.DatasetSpec(name="d", num_records=40, shard_size=10, num_epochs=1))
    wid = stub.RegisterWorker(pb.RegisterWorkerRequest(name="w")).worker_id
    lease = stub.GetShard(pb.GetShardRequest(worker_id=wid, dataset="d")).leases[0]
    reply = stub.DropDataset(pb.DropDatasetRequest(dataset="d", force=True))
    assert reply.leases_ended == 1
    (result,) = stub.ReportShard(pb.ReportShardRequest(worker_id=wid, reports=[
        pb.ShardReport(lease_id=lease.lease_id, outcome=pb.ShardReport.DONE)])).results
    assert not result.accepted and result.duplicate
    (worker,) = master.status().workers
    assert worker.leases_held == 0
    assert stub.GetLedger(pb.GetLedgerRequest()).records_done == 0
    forced = [e for e in master.events() if e.kind == "dataset_dropped"]
    assert forced[0].cause == "forced"
