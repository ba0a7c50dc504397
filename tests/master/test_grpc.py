"""The master over gRPC on 127.0.0.1: a real `python -m master` process, real clients, kills."""
from __future__ import annotations

import subprocess
import sys
import threading
import time

import grpc
import pytest

from cluster.launch import LISTENING
from worker_sdk.data.simworker import SimWorker
from master.persistence.store import Store
from protos import master_pb2 as pb
from protos import master_pb2_grpc as pb_grpc
from tests.conftest import REPO
from tests.master.harness import assert_exactly_once, audit

pytestmark = pytest.mark.slow


def stub_for(address):
    channel = grpc.insecure_channel(address)
    return pb_grpc.MasterStub(channel), channel


def code_of(fn):
    with pytest.raises(grpc.RpcError) as info:
        fn()
    return info.value.code(), info.value.details()


def spec(name="train", records=1000, shard=10, epochs=2, **kw):
    return pb.DatasetSpec(name=name, num_records=records, shard_size=shard, num_epochs=epochs,
                          **kw)


def status_of(stub, name="train"):
    (ds,) = [d for d in stub.GetStatus(pb.GetStatusRequest()).datasets if d.spec.name == name]
    return ds


def test_bad_input_gets_the_right_status_and_changes_nothing(master):
    stub, _ = stub_for(master.address)
    stub.CreateDataset(spec())
    before = stub.GetStatus(pb.GetStatusRequest())
    assert code_of(lambda: stub.CreateDataset(spec(records=0)))[0] == grpc.StatusCode.INVALID_ARGUMENT
    assert code_of(lambda: stub.CreateDataset(spec(name="")))[0] == grpc.StatusCode.INVALID_ARGUMENT
    code, details = code_of(lambda: stub.CreateDataset(spec(shard=20)))
    assert code == grpc.StatusCode.ALREADY_EXISTS and "shard_size=10 (asked: 20)" in details
    assert stub.CreateDataset(spec()) == spec()  # the same spec again: a no-op
    code, details = code_of(lambda: stub.GetShard(pb.GetShardRequest(worker_id="w-9",
                                                                     dataset="train")))
    assert code == grpc.StatusCode.NOT_FOUND and "register" in details
    wid = stub.RegisterWorker(pb.RegisterWorkerRequest(name="a")).worker_id
    code, _ = code_of(lambda: stub.GetShard(pb.GetShardRequest(worker_id=wid, dataset="nope")))
    assert code == grpc.StatusCode.NOT_FOUND
    code, _ = code_of(lambda: stub.GetShard(pb.GetShardRequest(worker_id=wid, dataset="train",
                                                              max_shards=-1)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert code_of(lambda: stub.RegisterWorker(pb.RegisterWorkerRequest(name="")))[0] == \
        grpc.StatusCode.INVALID_ARGUMENT
    assert code_of(lambda: stub.Heartbeat(pb.HeartbeatRequest(worker_id="nobody")))[0] == \
        grpc.StatusCode.NOT_FOUND
    reply = stub.ReportShard(pb.ReportShardRequest(worker_id=wid, reports=[
        pb.ShardReport(lease_id=12345, outcome=pb.ShardReport.DONE)]))
    assert not reply.results[0].accepted and "unknown lease" in reply.results[0].reason
    assert code_of(lambda: stub.GetEvents(pb.GetEventsRequest(since=-1)))[0] == \
        grpc.StatusCode.INVALID_ARGUMENT
    after = stub.GetStatus(pb.GetStatusRequest())
    assert after.datasets == before.datasets


def test_health_service_reports_serving(master):
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    _, channel = stub_for(master.address)
    health = health_pb2_grpc.HealthStub(channel)
    reply = health.Check(health_pb2.HealthCheckRequest(service="elasticps.v1.Master"))
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


def run_workers(address, n, dataset="train", **kw):
    workers = [SimWorker(address, dataset, name=f"sim{i}", **kw) for i in range(n)]
    threads = [threading.Thread(target=w.run, kwargs={"max_seconds": 120}) for w in workers]
    for t in threads:
        t.start()
    return workers, threads


def test_concurrent_clients_drain_two_epochs_exactly_once(master):
    stub, _ = stub_for(master.address)
    stub.CreateDataset(spec(records=2005, shard=10, epochs=2, shuffle=True, seed=4))
    workers, threads = run_workers(master.address, 4, max_shards=3)
    for t in threads:
        t.join(150)
    assert not any(t.is_alive() for t in threads)
    ds = status_of(stub)
    assert ds.finished and [e.records_done for e in ds.epochs] == [2005, 2005]
    assert [e.done for e in ds.epochs] == [201, 201]
    assert sum(w.records_trained for w in workers) == 2 * 2005
    history = audit(Store(master.db), "train")
    for epoch in (0, 1):
        assert_exactly_once(history[epoch], 2005)


def test_get_leases_pages_through_the_durable_lease_history(master):
    stub, _ = stub_for(master.address)
    stub.CreateDataset(spec(records=95, shard=10, epochs=2))
    workers, threads = run_workers(master.address, 2, max_shards=2)
    for t in threads:
        t.join(150)
    assert status_of(stub).finished
    pages, after = [], 0
    while page := stub.GetLeases(pb.GetLeasesRequest(dataset="train", after=after,
                                                     limit=3)).leases:
        assert len(page) <= 3
        pages.append(page)
        after = page[-1].lease_id
    assert stub.GetLeases(pb.GetLeasesRequest(dataset="train", after=after)).next == after
    got = [{f.name: getattr(x, f.name) for f in x.DESCRIPTOR.fields} for p in pages for x in p]
    stored = Store(master.db).leases_of("train")
    assert got == [{k: row[k] for k in got[0]} for row in stored] and len(got) >= 20
    assert code_of(lambda: stub.GetLeases(pb.GetLeasesRequest(dataset="nope")))[0] == \
        grpc.StatusCode.NOT_FOUND
    assert code_of(lambda: stub.GetLeases(pb.GetLeasesRequest(dataset="train", limit=-1)))[0] \
        == grpc.StatusCode.INVALID_ARGUMENT


def test_a_silent_worker_is_declared_lost_and_its_shards_move_within_3s(master):
    stub, _ = stub_for(master.address)
    stub.CreateDataset(spec(records=100, shard=10, epochs=1))
    quiet = stub.RegisterWorker(pb.RegisterWorkerRequest(name="quiet")).worker_id
    held = stub.GetShard(pb.GetShardRequest(worker_id=quiet, dataset="train", max_shards=10))
    assert len(held.leases) == 10
    last_call = time.monotonic()  # quiet never calls again
    got = {}

    def watch(lease):
        got.setdefault(lease.shard.index, time.monotonic())

    other = SimWorker(master.address, "train", name="busy", on_lease=watch)
    other.run(max_seconds=30)
    assert sorted(got) == list(range(10))
    handed_over = min(got.values()) - last_call
    # worker timeout 3 s (default) + the master's 50 ms tick + one 100 ms WAIT poll, with
    # room for scheduling on a loaded 2-core machine
    assert handed_over <= 3.6, f"shards came back {handed_over:.2f} s after the last call"
    reasons = [e for e in stub.GetEvents(pb.GetEventsRequest()).events if e.kind == "worker_lost"]
    assert [e.worker_id for e in reasons] == [quiet]


def _kill_master_twice_mid_run(proc, records=3000, shard=10):
    """Drive 3 workers through 2 epochs while the master is SIGKILLed twice."""
    stub, _ = stub_for(proc.address)
    stub.CreateDataset(spec(records=records, shard=shard, epochs=2, shuffle=True, seed=9))
    workers, threads = run_workers(proc.address, 3, max_shards=2,
                                   seconds_per_record=0.0002)
    for kill in range(2):
        target = (kill + 1) * records * 2 // 3
        deadline = time.monotonic() + 60
        while sum(w.records_trained for w in workers) < target:
            assert time.monotonic() < deadline, "workers made no progress"
            time.sleep(0.02)
        proc.kill()
        time.sleep(0.3)
        proc.start()  # the same database and port
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    stub, _ = stub_for(proc.address)
    ds = status_of(stub)
    assert ds.finished and [e.records_done for e in ds.epochs] == [records, records]
    events = stub.GetEvents(pb.GetEventsRequest()).events
    assert [e.cause for e in events if e.kind == "master_started"] == \
        ["fresh", "restarted", "restarted"]
    history = audit(Store(proc.db), "train")
    for epoch in (0, 1):
        assert_exactly_once(history[epoch], records)


def test_master_killed_twice_mid_run_loses_and_double_counts_nothing_sqlite(master):
    _kill_master_twice_mid_run(master)


@pytest.mark.postgres
def test_master_killed_twice_mid_run_loses_and_double_counts_nothing_postgres(
        pg_url, master_factory):
    _kill_master_twice_mid_run(master_factory(db=pg_url))


# ---- the command line ------------------------------------------------------------------------


def run_cli(*args, timeout=30):
    return subprocess.run([sys.executable, "-m", "master", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO)


def test_unopenable_db_exits_non_zero_with_the_reason(tmp_path):
    result = run_cli("--port", "0", "--db", "sqlite:////nonexistent-dir/x/m.db")
    assert result.returncode != 0
    assert "cannot open database" in result.stderr


def test_bad_flags_exit_non_zero_with_a_message():
    result = run_cli("--worker-timeout", "0.5", "--heartbeat-interval", "1")
    assert result.returncode == 2 and "--worker-timeout" in result.stderr
    result = run_cli("--port", "banana")
    assert result.returncode == 2 and "invalid int value" in result.stderr


def test_port_in_use_exits_non_zero(master, tmp_path):
    result = run_cli("--host", "127.0.0.1", "--port", str(master.port), "--db",
                     f"sqlite:///{tmp_path}/other.db")
    assert result.returncode != 0
    assert "cannot listen" in result.stderr


def test_sigterm_stops_cleanly_and_env_vars_configure(tmp_path, launcher):
    proc = launcher.python(
        "-m", "master", "--host", "127.0.0.1", name="master-env", ready=LISTENING,
        env={"ELASTIC_PS_PORT": "0", "ELASTIC_PS_DB": f"sqlite:///{tmp_path}/env.db",
             "ELASTIC_PS_WORKER_TIMEOUT": "7.5"},
    )
    stub, _ = stub_for(proc.address)
    reply = stub.RegisterWorker(pb.RegisterWorkerRequest(name="x"))
    assert reply.worker_timeout_s == 7.5
    assert (tmp_path / "env.db").exists()
    assert proc.terminate() == 0


def test_a_ps_that_stops_answering_is_recorded_lost_until_it_registers_again(master):
    from concurrent import futures

    from grpc_health.v1 import health, health_pb2_grpc

    fake_ps = grpc.server(futures.ThreadPoolExecutor(2))
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), fake_ps)
    port = fake_ps.add_insecure_port("127.0.0.1:0")
    fake_ps.start()
    stub, _ = stub_for(master.address)
    stub.RegisterPS(pb.RegisterPSRequest(address=f"127.0.0.1:{port}", data_address="tcp://x:1",
                                         index=0, num_ps=1))
    time.sleep(1.5)
    assert stub.ListPS(pb.ListPSRequest()).ps[0].state == "alive"
    fake_ps.stop(0)
    deadline = time.monotonic() + 15
    while stub.ListPS(pb.ListPSRequest()).ps[0].state != "lost":
        assert time.monotonic() < deadline, "the PS was never declared lost"
        time.sleep(0.2)
    lost = [e for e in stub.GetEvents(pb.GetEventsRequest()).events if e.kind == "ps_lost"]
    assert len(lost) == 1 and "ps 0" in lost[0].detail
    stub.RegisterPS(pb.RegisterPSRequest(address=f"127.0.0.1:{port}", data_address="tcp://x:1",
                                         index=0, num_ps=1))
    assert stub.ListPS(pb.ListPSRequest()).ps[0].state == "alive"
