"""Load: 160 concurrent clients against one real master for about 30 s on loopback (issue 16).

Each client is a worker with its own channel: it leases shards (some batched), acknowledges
them with the next GetShard or a ReportShard, sends PROGRESS heartbeats now and then, and
leaves at the end. Afterwards: no call failed, every acknowledged record is counted once (the
durable lease history tiles what was done without overlap and matches the clients' own
count), and no worker was declared lost. It stops by itself (ELASTIC_PS_LOAD_S, default 30).
"""
from __future__ import annotations

import os
import random
import threading
import time

import grpc
import pytest

from master.persistence.store import Store
from protos import master_pb2 as pb
from protos import master_pb2_grpc as pb_grpc
from tests.master.harness import audit

CLIENTS = 160
SECONDS = float(os.environ.get("ELASTIC_PS_LOAD_S", "30"))
PACE_S = 0.15  # between a client's calls: ~1,000 calls/s in all, what 2 cores can carry


class Client(threading.Thread):
    def __init__(self, address: str, n: int, stop_at: float):
        super().__init__(name=f"load-{n}", daemon=True)
        self.channel = grpc.insecure_channel(address)
        self.stub = pb_grpc.MasterStub(self.channel)
        self.n = n
        self.stop_at = stop_at
        self.rng = random.Random(n)
        self.errors: list[str] = []
        self.acked = 0  # records whose DONE the master accepted
        self.calls = 0

    def _done(self, results, leases_by_id):
        for r in results:
            if r.accepted:
                lease = leases_by_id.pop(r.lease_id)
                self.acked += lease.shard.end - lease.shard.start
            else:
                self.errors.append(f"report refused: {r}")

    def run(self) -> None:
        try:
            self._run()
        except grpc.RpcError as exc:
            self.errors.append(f"{exc.code()}: {exc.details()}")
        finally:
            self.channel.close()

    def _run(self) -> None:
        wid = self.stub.RegisterWorker(pb.RegisterWorkerRequest(
            name=f"load-{self.n}", labels={"client": str(self.n)}), timeout=30).worker_id
        held: dict[int, pb.Lease] = {}
        batch = 4 if self.n % 4 == 0 else 1
        while time.monotonic() < self.stop_at:
            self.calls += 1
            choice = self.rng.random()
            if held and choice < 0.1:  # progress on one lease, by heartbeat
                lease = next(iter(held.values()))
                self.stub.Heartbeat(pb.HeartbeatRequest(worker_id=wid, progress=[
                    pb.ShardReport(lease_id=lease.lease_id, outcome=pb.ShardReport.PROGRESS,
                                   records_done=1)]), timeout=30)
            elif held and choice < 0.2:  # acknowledge with ReportShard
                reply = self.stub.ReportShard(pb.ReportShardRequest(worker_id=wid, reports=[
                    pb.ShardReport(lease_id=i, outcome=pb.ShardReport.DONE) for i in held]),
                    timeout=30)
                self._done(reply.results, held)
            else:  # the batched path: acknowledge and lease in one call
                reply = self.stub.GetShard(pb.GetShardRequest(
                    worker_id=wid, dataset="load", max_shards=batch, reports=[
                        pb.ShardReport(lease_id=i, outcome=pb.ShardReport.DONE) for i in held]),
                    timeout=30)
                self._done(reply.results, held)
                if reply.status != pb.GetShardResponse.LEASED:
                    self.errors.append(f"status {reply.status}")
                held.update((x.lease_id, x) for x in reply.leases)
            time.sleep(PACE_S * (0.5 + self.rng.random()))
        reply = self.stub.LeaveWorker(pb.LeaveWorkerRequest(
            worker_id=wid, reason="finished", reports=[
                pb.ShardReport(lease_id=i, outcome=pb.ShardReport.DONE) for i in held]),
            timeout=30)
        self._done(reply.results, held)


@pytest.mark.slow
def test_many_concurrent_clients(master_factory, tmp_path):
    db = f"sqlite:///{tmp_path / 'load.db'}"
    master = master_factory(db=db)
    stub = pb_grpc.MasterStub(grpc.insecure_channel(master.address))
    stub.CreateDataset(pb.DatasetSpec(name="load", num_records=10_000_000, shard_size=100,
                                      num_epochs=1))
    stop_at = time.monotonic() + SECONDS
    clients = [Client(master.address, n, stop_at) for n in range(CLIENTS)]
    for c in clients:
        c.start()
    for c in clients:
        c.join(SECONDS + 120)
    assert not any(c.is_alive() for c in clients), "clients did not stop"
    errors = [e for c in clients for e in c.errors]
    assert errors == [], errors[:5]
    acked = sum(c.acked for c in clients)
    assert sum(c.calls for c in clients) > CLIENTS * SECONDS  # it was load, not a trickle
    assert master.alive
    kinds = [e.kind for e in master.events()]
    assert "worker_lost" not in kinds
    assert kinds.count("worker_left") == CLIENTS
    (epoch,) = master.dataset("load").epochs
    store = Store(db)
    try:
        (ranges,) = audit(store, "load").values()
    finally:
        store.close()
    position, counted = -1, 0
    for start, end in ranges:  # done ranges never overlap: each record counted once
        assert start >= position, f"overlap at {start}"
        position, counted = end, counted + end - start
    # the clients' acknowledged records, plus what progress reports credited on leave
    assert counted == epoch.records_done >= acked > 0
