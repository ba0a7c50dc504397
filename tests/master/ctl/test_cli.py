"""elastic-ctl against a real master."""
from __future__ import annotations

import subprocess
import sys

import grpc
import pytest

from protos import master_pb2 as pb
from protos import master_pb2_grpc as pb_grpc
from tests.conftest import REPO

pytestmark = pytest.mark.slow


def ctl(master_address, *args):
    return subprocess.run([sys.executable, "-m", "master.ctl", "--master", master_address, *args],
                          capture_output=True, text=True, timeout=30, cwd=REPO)


def test_status_shows_datasets_workers_and_ps(master):
    stub = pb_grpc.MasterStub(grpc.insecure_channel(master.address))
    stub.CreateDataset(pb.DatasetSpec(name="clicks", num_records=100, shard_size=10,
                                      num_epochs=2))
    wid = stub.RegisterWorker(pb.RegisterWorkerRequest(name="trainer-a",
                                                       labels={"market": "spot"})).worker_id
    lease = stub.GetShard(pb.GetShardRequest(worker_id=wid, dataset="clicks")).leases[0]
    stub.RegisterPS(pb.RegisterPSRequest(address="127.0.0.1:1", data_address="tcp://x:2",
                                         index=0, num_ps=1))
    out = ctl(master.address, "status")
    assert out.returncode == 0, out.stderr
    assert "clicks" in out.stdout and "0/10" in out.stdout and "0/100" in out.stdout
    assert "trainer-a" in out.stdout and "market=spot" in out.stdout
    assert f"clicks:e0/s{lease.shard.index}" in out.stdout
    assert "tcp://x:2" in out.stdout
    ps_table = out.stdout.split("PARAMETER SERVERS")[1].splitlines()
    assert ps_table[1].split() == ["ps", "role", "state", "generation", "grpc", "data",
                                   "incarnation", "registered"]
    assert ps_table[2].split()[:3] == ["0/1", "primary", "alive"]


def test_events_lists_the_timeline_and_since_filters(master):
    stub = pb_grpc.MasterStub(grpc.insecure_channel(master.address))
    wid = stub.RegisterWorker(pb.RegisterWorkerRequest(name="a")).worker_id
    stub.LeaveWorker(pb.LeaveWorkerRequest(worker_id=wid, reason="preempted"))
    out = ctl(master.address, "events")
    assert out.returncode == 0
    lines = out.stdout.splitlines()
    assert "master_started" in lines[0] and "worker_registered" in lines[1]
    assert "worker_left" in lines[2] and "cause=preempted" in lines[2]
    later = ctl(master.address, "events", "--since", "2").stdout.splitlines()
    assert later == lines[2:]


def test_requeue_needs_a_what_and_unknown_dataset_is_reported(master):
    out = ctl(master.address, "requeue", "nope")
    assert out.returncode == 2 and "--quarantined" in out.stderr
    out = ctl(master.address, "requeue", "nope", "--quarantined")
    assert out.returncode == 1 and "NOT_FOUND" in out.stderr and "nope" in out.stderr


def test_unreachable_master_is_a_clear_error():
    out = ctl("127.0.0.1:1", "--timeout", "2", "status")
    assert out.returncode == 1 and "cannot reach the master" in out.stderr


def test_ledger_report_and_cost(master):
    stub = pb_grpc.MasterStub(grpc.insecure_channel(master.address))
    stub.CreateDataset(pb.DatasetSpec(name="d", num_records=100, shard_size=10, num_epochs=1))
    spot = stub.RegisterWorker(pb.RegisterWorkerRequest(name="s", labels={"market": "spot"}))
    lease = stub.GetShard(pb.GetShardRequest(worker_id=spot.worker_id, dataset="d")).leases[0]
    stub.LeaveWorker(pb.LeaveWorkerRequest(
        worker_id=spot.worker_id, reason="preempted",
        reports=[pb.ShardReport(lease_id=lease.lease_id, outcome=pb.ShardReport.PROGRESS,
                                records_done=4)]))
    od = stub.RegisterWorker(pb.RegisterWorkerRequest(name="o", labels={"market": "on-demand"}))
    while True:
        reply = stub.GetShard(pb.GetShardRequest(worker_id=od.worker_id, dataset="d",
                                                 max_shards=4))
        if reply.status == pb.GetShardResponse.END:
            break
        stub.ReportShard(pb.ReportShardRequest(worker_id=od.worker_id, reports=[
            pb.ShardReport(lease_id=x.lease_id, outcome=pb.ShardReport.DONE)
            for x in reply.leases]))
    ledger = stub.GetLedger(pb.GetLedgerRequest(dataset="d"))
    (e,) = ledger.epochs
    assert (e.records_done, e.records_handed, e.records_rehanded) == (100, 106, 6)
    assert e.records_redone == 0  # the preempted worker reported its exact offset
    assert e.records_first_try == 94 and e.handouts == 11 and e.finished
    # SIGTERM churn only: the 6 records handed back untrained were never trained twice
    assert e.goodput == 1.0 and ledger.goodput == 1.0
    assert dict(e.requeues) == {"preempted": 1}
    assert {x.label for x in ledger.worker_seconds} == {"market=spot", "market=on-demand"}
    assert dict(ledger.workers_left) == {"preempted": 1}
    out = ctl(master.address, "report")
    assert out.returncode == 0 and "100.0%" in out.stdout and "market=spot" in out.stdout
    out = ctl(master.address, "cost", "--price", "market=spot=0.1", "--price",
              "market=on-demand=0.3")
    assert out.returncode == 0 and "per million records done" in out.stdout
    assert "trained more than once (at most 0 records; 1 - goodput 100.0%): 0.0000" in out.stdout
    out = ctl(master.address, "cost", "--price", "spot")
    assert out.returncode != 0 and "LABEL=PRICE" in out.stderr
    assert ctl(master.address, "report", "--dataset", "nope").returncode == 1
