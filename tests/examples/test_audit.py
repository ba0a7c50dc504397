"""The demo's exactly-once proof from a lease history (examples/ctr/audit.py)."""
from __future__ import annotations

from examples.ctr.audit import done_ranges, exactly_once, tiling_errors


def lease(epoch, start, end, state="done", records_done=0):
    return {"epoch": epoch, "start_rec": start, "end_rec": end, "state": state,
            "records_done": records_done}


def test_a_requeued_prefix_and_its_remainder_tile_the_epoch():
    history = [lease(0, 0, 100), lease(0, 100, 200, "requeued", records_done=30),
               lease(0, 130, 200), lease(0, 200, 250, "doing"), lease(0, 200, 250),
               lease(1, 0, 250)]
    assert done_ranges(history)[0] == [(0, 100), (100, 130), (130, 200), (200, 250)]
    assert exactly_once(history, 250, 2) == {}


def test_gaps_overlaps_and_missing_epochs_are_named():
    assert tiling_errors([(0, 100), (150, 200)], 200) == ["records [100, 150) never counted done"]
    assert tiling_errors([(0, 100), (90, 200)], 200) == ["records [90, 100) counted done twice"]
    assert tiling_errors([(0, 100)], 200) == ["records [100, 200) never counted done"]
    # a lease taken back with nothing acknowledged counts nothing; epoch 1 never ran
    history = [lease(0, 0, 100, "requeued"), lease(0, 0, 100), lease(0, 100, 200, "failed", 10),
               lease(0, 100, 200)]
    assert exactly_once(history, 200, 2) == {
        0: ["records [100, 110) counted done twice"],
        1: ["records [0, 200) never counted done"]}
