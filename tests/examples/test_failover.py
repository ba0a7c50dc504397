"""The demo's HA decisions and measurements that need no process (examples/ctr/failover.py)."""
from __future__ import annotations

from examples.ctr import failover
from protos import master_pb2 as pb
from protos import ps_pb2


def listing(*infos: pb.PSInfo, replicas: int = 1) -> pb.ListPSResponse:
    return pb.ListPSResponse(ps=list(infos), num_ps=len(infos), complete=True,
                             replicas=replicas)


def ps(index: int, *backup_states: str, state: str = "alive", generation: int = 1) -> pb.PSInfo:
    return pb.PSInfo(index=index, state=state, generation=generation,
                     data_address=f"tcp://127.0.0.1:{7000 + index}",
                     backups=[pb.PSBackup(state=s, instance=f"b{index}{n}")
                              for n, s in enumerate(backup_states)])


def test_only_a_live_index_with_a_backup_in_sync_may_lose_its_primary():
    assert failover.promotable(listing(ps(0), ps(1))) is None
    assert failover.promotable(listing(ps(0, "syncing"), ps(1, "syncing"))) is None
    assert failover.promotable(listing(ps(0, "in_sync", state="lost"), ps(1, "syncing"))) is None
    chosen = failover.promotable(listing(ps(1, "in_sync"), ps(0, "syncing", "in_sync")))
    assert chosen.index == 0
    assert failover.generations(listing(ps(0, generation=3), ps(1))) == {0: 3, 1: 1}


def test_pushes_answered_count_dense_rows_and_duplicates():
    status = ps_pb2.GetPSStatusResponse(pushes=5, duplicates=1, tables=[
        ps_pb2.TableStatus(pushes=7), ps_pb2.TableStatus(pushes=2)])
    assert failover.answered(status) == 15


def test_training_flows_again_at_the_first_hand_out_after_the_kill():
    leases = [{"handed_ms": 900}, {"handed_ms": 1700}, {"handed_ms": 1300}]
    assert failover.first_handout_after(leases, 1000) == 1300
    assert failover.first_handout_after(leases, 2000) == 0
    kill = failover.Kill("master", "a:1", at_ms=1000, flowing_ms=1300, takeover_ms=1250)
    assert (kill.takeover_s, kill.flowing_s) == (0.25, 0.3)
    assert failover.Kill("ps", "a:1", at_ms=1000).flowing_s is None
    assert "watch" not in kill.to_json() and kill.to_json()["flowing_s"] == 0.3


def test_settle_reads_the_takeover_and_the_first_hand_out_from_the_records():
    kills = [failover.Kill("master", "a:1", at_ms=1000),
             failover.Kill("ps", "b:1", at_ms=5000, index=1, generation=1)]
    events = [pb.Event(kind="master_started", time_ms=10),
              pb.Event(kind="master_started", time_ms=4000),
              pb.Event(kind="ps_promoted", time_ms=6200)]
    after = listing(ps(0), pb.PSInfo(index=1, address="c:1", generation=2))
    failover.settle(kills, events, [{"handed_ms": 4500}], after, leader="d:1")
    assert (kills[0].takeover_s, kills[0].flowing_s, kills[0].successor) == (3.0, 3.5, "d:1")
    assert (kills[1].takeover_s, kills[1].flowing_s, kills[1].successor) == (1.2, None, "c:1")


def test_a_backup_matches_its_primary_on_versions_and_row_pushes_not_on_rows_pulled():
    def status(version, rows, pushes):
        return ps_pb2.GetPSStatusResponse(
            tensors=[ps_pb2.TensorStatus(meta=ps_pb2.TensorMeta(name="w"), version=version)],
            tables=[ps_pb2.TableStatus(spec=ps_pb2.TableSpec(name="ids"), rows=rows,
                                       pushes=pushes)])

    assert failover.held(status(5, 100, 7)) == failover.held(status(5, 40, 7))
    assert failover.held(status(5, 100, 7)) != failover.held(status(4, 100, 7))
    assert failover.held(status(5, 100, 7)) != failover.held(status(5, 100, 6))
