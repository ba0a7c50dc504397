"""elastic-ctl's folded status, its cost table and `drop`."""
from __future__ import annotations

import pytest

from master.ctl.cli import (format_cost, format_report, format_resize, format_status,
                            format_updates_lost)
from master.ctl.views import cost_rows, dataset_rows, ps_rows
from master.datasets.ledger import epoch_ledgers, goodput
from protos import master_pb2 as pb
from tests.master.ctl.test_cli import ctl


def _dataset(epochs_done: int, running: int) -> pb.DatasetStatus:
    spec = pb.DatasetSpec(name="clicks", num_records=100, shard_size=10, num_epochs=10)
    epochs = [pb.EpochStatus(epoch=e, done=10, records_done=100, records_total=100,
                             handouts=11, duplicates=1, requeues={"lost": 1}, finished=True)
              for e in range(epochs_done)]
    epochs += [pb.EpochStatus(epoch=epochs_done + i, todo=5, doing=2, done=3, records_done=30,
                              records_total=100, handouts=5) for i in range(running)]
    return pb.DatasetStatus(spec=spec, epoch=epochs_done, epochs=epochs)


def test_finished_epochs_fold_into_one_line_with_their_sums():
    rows = dataset_rows(_dataset(epochs_done=7, running=2))
    assert len(rows) == 3  # one for the 7 finished epochs, one per running epoch
    folded = rows[0]
    assert folded[1:3] == ["0-6", "7 finished"]
    assert folded[5:8] == ["70/70", "700/700", "77"]
    assert folded[10:12] == ["7", "lost=7"]
    assert rows[1][1:3] == ["7", "epoch 8/10"] and rows[2][1:3] == ["8", "running"]
    text = format_status(pb.GetStatusResponse(datasets=[_dataset(7, 2)]))
    assert text.count("clicks") == 3


def test_nothing_to_fold_before_the_first_epoch_ends():
    rows = dataset_rows(_dataset(epochs_done=0, running=1))
    assert [r[1] for r in rows] == ["0"]


def test_status_names_each_index_primary_generation_and_backups_in_sync():
    status = pb.GetStatusResponse(time_ms=10_000, ps=[
        pb.PSInfo(index=1, num_ps=2, state="alive", address="h:11", data_address="tcp://h:12",
                  generation=1, incarnation=1, registered_ms=9_000),
        pb.PSInfo(index=0, num_ps=2, state="alive", address="h:1", data_address="tcp://h:2",
                  generation=3, incarnation=2, registered_ms=8_000, backups=[
                      pb.PSBackup(address="h:3", data_address="tcp://h:4", state="in_sync",
                                  registered_ms=9_000),
                      pb.PSBackup(address="h:5", data_address="tcp://h:6", state="syncing",
                                  registered_ms=9_500)]),
    ])
    rows = ps_rows(status)
    assert [r[:5] for r in rows] == [
        ["0/2", "primary", "alive", "3", "h:1"],
        ["0/2", "backup", "in_sync", "3", "h:3"],
        ["0/2", "backup", "syncing", "3", "h:5"],
        ["1/2", "primary", "alive", "1", "h:11"],
    ]
    text = format_status(status).split("PARAMETER SERVERS")[1]
    assert "generation" in text.splitlines()[1] and "in_sync" in text and "syncing" in text


def _epoch(**counts) -> dict:
    return dict(dataset="d", epoch=0, handouts=12, records_first_try=0, **counts)


def test_goodput_is_records_trained_once_over_records_trained():
    # handed out 200 records for 100: 60 came back untrained from graceful leaves (SIGTERM,
    # Ctrl-C) and 40 after a loss, of which at most 40 were trained twice
    (e,) = epoch_ledgers([_epoch(records_done=100, records_handed=200, records_rehanded=100,
                                 records_redone=40)], {})
    assert e["goodput"] == pytest.approx(100 / 140)
    (e,) = epoch_ledgers([_epoch(records_done=100, records_handed=160, records_rehanded=60,
                                 records_redone=0)], {})
    assert e["goodput"] == 1.0  # SIGTERM churn only: nothing trained twice, nothing wasted
    assert goodput(0, 0) == 1.0


def test_cost_prices_exactly_the_records_trained_twice():
    ledger = pb.GetLedgerResponse(
        worker_seconds=[pb.LabelSeconds(label="(no labels)", workers=1, worker_seconds=3600)],
        worker_seconds_total=3600, records_done=900, records_handed=2000,
        records_rehanded=1100, records_redone=100, goodput=goodput(900, 100))
    text = format_cost(ledger, {}, 1.0)
    # 1.0 for 1000 trainings, 100 of them repeats: 0.1, not the 1100 records handed out again
    assert "trained more than once (at most 100 records; 1 - goodput 90.0%): 0.1000" in text
    assert "goodput 90.0% (records trained once / records trained" in format_report(ledger)


def _ledger() -> pb.GetLedgerResponse:
    # 3 workers of an hour each: one spot, one on-demand, one without labels
    return pb.GetLedgerResponse(
        worker_seconds=[pb.LabelSeconds(label="(no labels)", workers=1, worker_seconds=3600),
                        pb.LabelSeconds(label="market=on-demand", workers=1,
                                        worker_seconds=3600),
                        pb.LabelSeconds(label="market=spot", workers=1, worker_seconds=3600)],
        worker_seconds_total=3 * 3600, records_done=1000, goodput=1.0)


def test_cost_prices_unlabelled_workers_on_a_line_of_their_own():
    rows, total = cost_rows(_ledger(), {"market=spot": 0.1, "market=on-demand": 0.3}, 0.5)
    assert ("(no labels)", 3600, 0.5) in rows
    assert total == pytest.approx(0.1 + 0.3 + 0.5)
    text = format_cost(_ledger(), {"market=spot": 0.1, "market=on-demand": 0.3}, 0.5)
    assert "(no labels)" in text and "total 0.9000" in text


def test_cost_covers_workers_whose_labels_have_no_price():
    rows, total = cost_rows(_ledger(), {"market=spot": 0.1}, 1.0)
    assert total == pytest.approx(0.1 + 1.0 + 1.0)  # on-demand: no price, still paid
    assert [r[0] for r in rows] == ["market=spot", "(no labels)", "(other labels)"]


def test_cost_without_prices_counts_each_worker_once():
    ledger = pb.GetLedgerResponse(
        worker_seconds=[pb.LabelSeconds(label="market=spot", workers=1, worker_seconds=3600),
                        pb.LabelSeconds(label="zone=a", workers=1, worker_seconds=3600)],
        worker_seconds_total=3600)  # one worker with two labels
    assert cost_rows(ledger, {}, 2.0)[1] == pytest.approx(2.0)


@pytest.mark.slow
def test_ctl_drop_refuses_while_leases_are_out_then_drops(master):
    stub = master.stub()
    stub.CreateDataset(pb.DatasetSpec(name="d", num_records=20, shard_size=10, num_epochs=1))
    wid = stub.RegisterWorker(pb.RegisterWorkerRequest(name="w")).worker_id
    stub.GetShard(pb.GetShardRequest(worker_id=wid, dataset="d"))
    out = ctl(master.address, "drop", "d")
    assert out.returncode == 1
    assert "FAILED_PRECONDITION" in out.stderr and "--force" in out.stderr
    out = ctl(master.address, "drop", "d", "--force")
    assert out.returncode == 0 and "1 leases out were ended" in out.stdout
    datasets = ctl(master.address, "status").stdout.split("WORKERS")[0]
    assert datasets.strip() == "DATASETS\n  (none)"


def _ps(index: int, num_ps: int) -> pb.PSInfo:
    return pb.PSInfo(index=index, num_ps=num_ps, state="alive", address=f"h:{index + 1}")


def test_each_ps_is_counted_against_the_layout_now_not_its_registration():
    """Issue 37: after a shrink to 1 PS, PS 0 (registered as one of 2) showed '0/2'."""
    shrunk = pb.GetStatusResponse(ps=[_ps(0, 2), _ps(1, 2)], layout=pb.PSLayoutStatus(
        layout_version=3, num_ps=1, target_num_ps=1, ps_slots=64))
    assert [r[0] for r in ps_rows(shrunk)] == ["0/1", "1/1 (leaving)"]
    growing = pb.GetStatusResponse(ps=[_ps(0, 1), _ps(1, 2)], layout=pb.PSLayoutStatus(
        layout_version=1, num_ps=1, target_num_ps=2, ps_slots=64, resizing=True))
    assert [r[0] for r in ps_rows(growing)] == ["0/1", "1/1 (joining)"]
    no_layout = pb.GetStatusResponse(ps=[_ps(0, 2)])
    assert [r[0] for r in ps_rows(no_layout)] == ["0/2"]


def test_updates_lost_is_calm_at_zero_and_a_warning_above():
    assert format_updates_lost(pb.GetLedgerResponse()) == ""  # no restore: no line
    calm = format_updates_lost(pb.GetLedgerResponse(updates_lost=0, ps_updates_lost=[
        pb.PSUpdatesLost(index=0, records=0, restores=2)]))
    assert calm.startswith("updates lost: none") and "2 restore(s)" in calm
    assert "WARNING" not in calm and "UPDATES LOST" not in calm
    lost = format_updates_lost(pb.GetLedgerResponse(updates_lost=40, ps_updates_lost=[
        pb.PSUpdatesLost(index=1, records=40, restores=1, from_ms=1000, to_ms=2000)]))
    assert lost.startswith("WARNING: UPDATES LOST: 40 records") and "ps 1: 40 records" in lost


def test_resize_says_the_slots_move_live():
    grow = format_resize(pb.ResizePSResponse(layout_version=1, num_ps=1, target_num_ps=2,
                                             moves_planned=32, moves_pending=32, ps_slots=64,
                                             changed=True), "m:1")
    assert "elastic-ps --master m:1 --index K for K in 1..1" in grow
    assert "moves the 32 slots live" in grow and "once the new PS have registered" in grow
    assert "yet" not in grow and "issue" not in grow
    shrink = format_resize(pb.ResizePSResponse(layout_version=2, num_ps=2, target_num_ps=1,
                                               moves_planned=32, moves_pending=32, ps_slots=64,
                                               changed=True), "m:1")
    assert "elastic-ps" not in shrink and "exit once they hold no slot" in shrink
    same = format_resize(pb.ResizePSResponse(layout_version=2, num_ps=1, target_num_ps=1,
                                             ps_slots=64), "m:1")
    assert same.startswith("the PS layout already has the target 1")
