"""The demo's resize claims (examples/ctr/resize.py) fail when what they claim did not happen."""
from __future__ import annotations

from types import SimpleNamespace

from examples.ctr import resize
from examples.ctr.resize import Resize


def events(*rows):
    return [SimpleNamespace(seq=n, kind=kind, detail=detail, time_ms=1000 * n)
            for n, (kind, detail) in enumerate(rows, 1)]


GROW_AND_SHRINK = events(
    ("ps_resize_started", "2 -> 3 PS: 342 of 1024 slots to move; layout version 1"),
    ("ps_registered", "ps 2/3 at ..."),
    ("ps_slots_moved", "64 slots in 0.020 s (0->2); layout version 2; 278 moves pending"),
    ("ps_slots_moved", "278 slots in 0.050 s (1->2); layout version 3; 0 moves pending"),
    ("ps_resize_finished", "3 PS, layout version 3, 342 slots moved in 3.0 s"),
    ("ps_resize_started", "3 -> 2 PS: 341 of 1024 slots to move; layout version 3"),
    ("ps_slots_moved", "341 slots in 0.030 s (2->0); layout version 4; 0 moves pending"),
    ("ps_resize_finished", "2 PS, layout version 4, 341 slots moved in 1.0 s"),
)


def resizes(codes=None):
    return [Resize(2, 3, 0), Resize(3, 2, 5000,
                                    exit_codes=codes if codes is not None else {"ps2": 0})]


def test_a_grow_and_a_shrink_that_happened_hold():
    c = resize.claims(resizes(), GROW_AND_SHRINK, 2, [], 0)
    assert [(s["before"], s["after"], s["slots_moved"], s["batches"]) for s in c["seen"]] == \
        [(2, 3, 342, 2), (3, 2, 341, 1)]
    assert c["seen"][0]["finished_s"] == 4.0
    assert resize.ok(c)


def test_each_missing_part_fails():
    unfinished = GROW_AND_SHRINK[:-1]
    assert not resize.ok(resize.claims(resizes(), unfinished, 2, [], 0))
    nothing_moved = [e for e in GROW_AND_SHRINK if not (e.kind == "ps_slots_moved"
                                                        and "(2->0)" in e.detail)]
    assert not resize.ok(resize.claims(resizes(), nothing_moved, 2, [], 0))
    assert not resize.ok(resize.claims(resizes({"ps2": 1}), GROW_AND_SHRINK, 2, [], 0))
    assert not resize.ok(resize.claims(resizes({"ps2": None}), GROW_AND_SHRINK, 2, [], 0))
    assert not resize.ok(resize.claims(resizes({}), GROW_AND_SHRINK, 2, [], 0))
    assert not resize.ok(resize.claims(resizes(), GROW_AND_SHRINK, 3, [], 0))
    assert not resize.ok(resize.claims(resizes(), GROW_AND_SHRINK, 2, ["shrink: ended"], 0))
    assert not resize.ok(resize.claims(resizes(), GROW_AND_SHRINK, 2, [], 5))
    assert not resize.ok(resize.claims(resizes()[:1], GROW_AND_SHRINK, 2, [], 0))
    assert not resize.ok(resize.claims([], [], 2, [], 0))
