"""A call's content cut by the slot layout, and cut again when a slot moved (pure)."""
import numpy as np

from pswire.slots import Layout, Move, split_rows, tensor_slot
from worker_sdk.ps.parts import Part, Rows, owning, split

TWO = Layout.initial(2)


def owner(layout):
    return layout.owner_of_tensor


def test_split_rows_by_layout_keeps_positions_and_order():
    ids = np.arange(1000, 5000, 7)
    cut = split_rows(TWO, ids)
    assert [i for i, _, _ in cut] == [0, 1]
    owners = TWO.owner_of_rows(ids)
    for index, positions, sub in cut:
        assert (owners[positions] == index).all() and (ids[positions] == sub).all()
        assert (np.diff(positions) > 0).all()  # in the order asked
    assert sorted(np.concatenate([p for _, p, _ in cut]).tolist()) == list(range(ids.size))
    assert split_rows(TWO, []) == []
    (only,) = split_rows(Layout.initial(1), ids)
    assert only[0] == 0 and (only[2] == ids).all()


def test_split_rows_sorts_when_many_owners():
    layout = Layout.initial(40)
    ids = np.random.default_rng(0).integers(0, 2**53, 3000)
    cut = split_rows(layout, ids)
    assert [i for i, _, _ in cut] == sorted({i for i, _, _ in cut})
    owners = layout.owner_of_rows(ids)
    for index, positions, sub in cut:
        assert (owners[positions] == index).all() and (ids[positions] == sub).all()


def test_a_call_splits_by_the_layout():
    ids = np.arange(50, dtype=np.int64)
    whole = Part(push=["a", "b", "c"], rows=[Rows(0, ids)], pull=["a", "b"],
                 pull_rows=[Rows("t", ids[::-1].copy())])
    parts = split(whole, TWO, owner(TWO))
    assert set(parts) == {0, 1}
    assert sorted(n for p in parts.values() for n in p.push) == ["a", "b", "c"]
    for index, part in parts.items():
        assert all(TWO.owner_of_tensor(n) == index for n in part.push + part.pull)
        (rows,) = part.rows
        assert (TWO.owner_of_rows(rows.ids) == index).all()
        assert (ids[rows.positions] == rows.ids).all()
        (pulled,) = part.pull_rows
        assert (ids[::-1][pulled.positions] == pulled.ids).all()


def test_one_owner_keeps_the_ids_as_they_are():
    ids = np.arange(10, dtype=np.int64)
    parts = split(Part(rows=[Rows(0, ids)]), Layout.initial(1), lambda n: 0)
    assert parts[0].rows[0].ids is ids and parts[0].rows[0].positions is None
    assert split(Part(), TWO, owner(TWO), every=True) == {0: Part(), 1: Part()}


def test_a_refused_part_split_again_points_into_the_calls_ids():
    ids = np.arange(200, dtype=np.int64)
    first = split(Part(pull_rows=[Rows("t", ids)]), TWO, owner(TWO))
    # every slot of PS 1 goes to a new PS 2
    grown = TWO.with_moves([Move(s, 1, 2) for r in TWO.ranges(1) for s in range(r.start, r.end)])
    again = split(first[1], grown, owner(grown))
    assert set(again) == {2}
    (rows,) = again[2].pull_rows
    assert (ids[rows.positions] == rows.ids).all()
    assert rows.positions.tolist() == first[1].pull_rows[0].positions.tolist()
    # half of them to PS 0 instead: each id keeps its position in the call
    half = TWO.with_moves([Move(s, 1, 0) for s in range(TWO.ranges(1)[0].start, 700)])
    again = split(first[1], half, owner(half))
    got = np.concatenate([p.pull_rows[0].positions for p in again.values()])
    assert sorted(got.tolist()) == first[1].pull_rows[0].positions.tolist()
    for index, part in again.items():
        assert (half.owner_of_rows(ids[part.pull_rows[0].positions]) == index).all()


def test_reads_only_drops_the_mutations_and_merge_joins_ids_of_one_list():
    a = Part(push=["a"], rows=[Rows(0, np.array([1, 2]), np.array([0, 1]))], pull=["a"],
             pull_rows=[Rows("t", np.array([5]), np.array([3]))])
    reads = a.reads_only()
    assert reads.push == [] and reads.rows == [] and reads.pull == ["a"]
    assert reads.counts() == (1, 1) and a.counts() == (2, 3)
    assert Part().empty and not reads.empty
    a.merge(Part(push=["b"], rows=[Rows(0, np.array([9]), np.array([4]))],
                 pull_rows=[Rows("u", np.array([7]))]))
    assert a.push == ["a", "b"] and len(a.rows) == 1
    assert a.rows[0].ids.tolist() == [1, 2, 9] and a.rows[0].positions.tolist() == [0, 1, 4]
    assert [r.key for r in a.pull_rows] == ["t", "u"]


def test_a_refused_pull_of_everything_goes_to_the_new_owners_of_its_slots():
    moved = TWO.with_moves([Move(tensor_slot("b", 1024), 1, 0)])
    assert owning(moved) == [0, 1]
    parts = split(Part(pull_all=True), moved, owner(moved), old=TWO, refused=1)
    assert set(parts) == {0, 1} and all(p.pull_all for p in parts.values())
    shrunk = Layout(np.zeros(1024, dtype=np.int32), version=2)
    assert set(split(Part(pull_all=True), shrunk, owner(shrunk), old=TWO, refused=1)) == {0}
