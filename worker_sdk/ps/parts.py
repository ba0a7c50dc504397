"""What one request to one PS carries, as content that a layout can split, and split again.

A call (a pull, a push, rows, a Step, InitParameters) starts as one `Part` holding all of its
content; `split` cuts it by the slot layout (pswire/slots.py) into one Part per PS index. When
a PS refuses its part `WRONG_OWNER` (a slot moved), that part alone is split again by the newer
layout and sent on. Row positions always point into the call's own ids, so the answers of
every round merge back in the order the caller asked. Pure: no sockets, no torch.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from pswire.slots import Layout, split_rows


class SplitMemo:
    """The cut of one id list by the last layout it was cut by. A step pulls the rows of a
    batch's distinct ids and, a step later, pushes their gradients: the same ids, cut once
    while the layout keeps its runs (hashing and grouping them is most of a split)."""

    __slots__ = ("kept",)

    def __init__(self):
        self.kept: tuple[Layout, list] | None = None  # one attribute: read and set at once

    def split(self, layout: Layout, ids: np.ndarray) -> list:
        """`split_rows(layout, ids)`, for the ids this memo was made for (never others)."""
        kept = self.kept
        # a Layout is immutable; clients of one process hold equal ones as distinct objects
        if kept is not None and (kept[0] is layout or kept[0].runs == layout.runs):
            return kept[1]
        cut = split_rows(layout, ids)
        self.kept = (layout, cut)
        return cut


@dataclass
class Rows:
    """Some ids of one of the call's id lists."""

    key: int | str  # which list: a row push's position in the call, or a pulled table's name
    ids: np.ndarray  # int64, contiguous
    positions: np.ndarray | None = None  # where they sit in that list; None: all, in order
    # the cut of `ids` kept across calls (only for a whole list: `positions` None)
    memo: SplitMemo | None = field(default=None, repr=False, compare=False)

    def at(self) -> np.ndarray:
        return np.arange(self.ids.size) if self.positions is None else self.positions


@dataclass
class Part:
    push: list[str] = field(default_factory=list)  # dense gradients (check_only: checked)
    rows: list[Rows] = field(default_factory=list)  # row gradients
    pull: list[str] = field(default_factory=list)  # dense tensors read
    pull_all: bool = False  # every tensor the PS holds is read
    pull_rows: list[Rows] = field(default_factory=list)  # rows read

    def reads_only(self) -> "Part":
        """This part without its mutations: what is re-sent when a PS says they were applied
        there already (a WRONG_OWNER refusal with the duplicate flag)."""
        return Part(pull=list(self.pull), pull_all=self.pull_all,
                    pull_rows=list(self.pull_rows))

    @property
    def empty(self) -> bool:
        return not (self.push or self.rows or self.pull or self.pull_all or self.pull_rows)

    def counts(self) -> tuple[int, int]:
        """(tensors, row ids) carried, for the re-route log line."""
        return (len(self.push) + len(self.pull),
                sum(r.ids.size for r in self.rows) + sum(r.ids.size for r in self.pull_rows))

    def merge(self, other: "Part") -> None:
        """Take `other`'s content too (two refused parts bound for one PS go as one request);
        ids of the same list are joined, since a PullRows or PushRows carries one list."""
        self.push += other.push
        self.pull += other.pull
        self.pull_all |= other.pull_all
        self.rows = _join(self.rows + other.rows)
        self.pull_rows = _join(self.pull_rows + other.pull_rows)


def _join(entries: list[Rows]) -> list[Rows]:
    by_key: dict = {}
    for r in entries:
        by_key.setdefault(r.key, []).append(r)
    out = []
    for key, same in by_key.items():
        if len(same) == 1:
            out.append(same[0])
        else:
            out.append(Rows(key, np.concatenate([r.ids for r in same]),
                            np.concatenate([r.at() for r in same])))
    return out


def owning(layout: Layout) -> list[int]:
    """The indices that own at least one slot, ascending."""
    return sorted({owner for _, _, owner in layout.runs})


def split(part: Part, layout: Layout, tensor_owner: Callable[[str], int],
          every: bool = False, old: Layout | None = None,
          refused: int | None = None) -> dict[int, Part]:
    """`part` cut by `layout`: index -> the part it owns (indices with nothing left out unless
    `every`). A `pull_all` goes to every owning index, or, when it is a part PS `refused`
    answered WRONG_OWNER under layout `old`, to the new owners of the slots it had."""
    out: dict[int, Part] = {}
    if every:
        for index in owning(layout):
            out[index] = Part()

    def at(index: int) -> Part:
        got = out.get(index)
        if got is None:
            got = out[index] = Part()
        return got

    for name in part.push:
        at(tensor_owner(name)).push.append(name)
    for name in part.pull:
        at(tensor_owner(name)).pull.append(name)
    for entries, attr in ((part.rows, "rows"), (part.pull_rows, "pull_rows")):
        for r in entries:
            cut = split_rows(layout, r.ids) if r.memo is None else r.memo.split(layout, r.ids)
            if len(cut) == 1:  # all to one PS: the ids as they are (no gather)
                getattr(at(cut[0][0]), attr).append(r)
                continue
            for index, positions, ids in cut:
                where = positions if r.positions is None else r.positions[positions]
                getattr(at(index), attr).append(Rows(r.key, ids, where))
    if part.pull_all:
        if old is None or refused is None:
            targets = owning(layout)
        else:
            targets = sorted(set(layout.owners()[old.owners() == refused].tolist()))
        for index in targets:
            at(index).pull_all = True
    return out
