"""Placement as data: hash slots and the layout that maps each slot to a PS index.

Redis Cluster's model (docs/ps.md, "Slots and resize"): a job has a fixed number of slots
(`--ps-slots` on the master, DEFAULT_SLOTS), a row lives in the slot its id hashes to, a dense
tensor in the slot its name hashes to, and the *layout* says which PS index owns each slot. A
resize moves whole slots between indices; nothing is ever re-hashed. Everything here is pure
(no I/O, no process state, no salt), so the master, the PS and the worker SDK compute the same
answers:

- `row_slot(ids, n)`: splitmix64 of the id, mod n (vectorized over numpy and torch int64 ids):
  neighbouring ids scatter over all slots, unlike `id % n`;
- `tensor_slot(name, n)`: blake2b of the name, mod n;
- `Layout`: the slot -> index map as a value (compact runs, a version), with the owner of rows
  and tensors, each index's ranges, and `with_moves` for a changed copy;
- `plan_resize(layout, target)`: the fewest slot moves after which indices 0..target-1 own
  every slot, shares differing by at most one;
- `encode_ranges` / `decode_ranges`: an index's ranges as text ("0:342,853:1024"), how the
  master stores them;
- `size_for(...)`: which PS count a PS of an index runs with under the layout, or why it
  does not fit (`LayoutMismatch`, the message naming `elastic-ctl resize-ps`).

- `split_rows(layout, ids)`: ids cut by owner, with their positions, for a client that sends
  each PS its part (the worker SDK routes every row and tensor by the layout).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np

DEFAULT_SLOTS = 1024
MAX_SLOTS = 16384  # Redis Cluster's count: a layout is at most a few thousand runs

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


class LayoutMismatch(ValueError):
    """A PS's index or --num-ps does not fit the job's layout; the message names the fix."""


@dataclass(frozen=True)
class SlotRange:
    """Slots start..end-1 (end exclusive), as `SlotRange` in master.proto."""

    start: int
    end: int

    def __len__(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class Move:
    """Slot `slot` goes from PS index `src` to PS index `dst`."""

    slot: int
    src: int
    dst: int


def check_num_slots(num_slots: int) -> None:
    if not isinstance(num_slots, (int, np.integer)) or not 1 <= num_slots <= MAX_SLOTS:
        raise ValueError(f"the number of slots must be in 1..{MAX_SLOTS}, got {num_slots!r}")


def splitmix64(keys: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer over uint64 keys (a copy): the one 64-bit mixer of the project,
    used for row slots here and for rows' initial values (ps/store/embedding.py)."""
    # uint64 array arithmetic wraps without a warning (numpy warns for scalars only)
    z = keys.astype(np.uint64, copy=True)
    z += GOLDEN
    z ^= z >> np.uint64(30)
    z *= _MIX1
    z ^= z >> np.uint64(27)
    z *= _MIX2
    z ^= z >> np.uint64(31)
    return z


def row_slot(ids, num_slots: int):
    """The slot of each id: splitmix64(id) mod num_slots. numpy in, an int64 numpy array out;
    a torch tensor in, an int64 torch tensor out (same shape). One compiled pass over the ids
    (pswire.jit; `row_slot_reference` is the same in numpy)."""
    check_num_slots(num_slots)
    if hasattr(ids, "numpy"):  # a torch tensor; torch is imported only by those who have one
        import torch

        keys = ids.detach().to("cpu", torch.int64).contiguous().numpy()
        return torch.from_numpy(row_slot(keys, num_slots))
    from .jit import row_slots  # numba: imported by those who hash ids (not the master)

    keys = np.ascontiguousarray(ids, dtype=np.int64)
    return row_slots(keys.reshape(-1), int(num_slots)).reshape(keys.shape)


def row_slot_reference(ids, num_slots: int) -> np.ndarray:
    """`row_slot` of numpy ids, in numpy (what the compiled loop is tested against)."""
    mixed = splitmix64(np.asarray(ids, dtype=np.int64).view(np.uint64))
    return (mixed % np.uint64(num_slots)).astype(np.int64)


def tensor_slot(name: str, num_slots: int) -> int:
    """The slot of a dense tensor: blake2b(name) mod num_slots, the same in every process."""
    check_num_slots(num_slots)
    digest = hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % num_slots


class Layout:
    """Which PS index owns each of `num_slots` slots, at layout `version`. Immutable.

    Kept as sorted runs (start, end, owner) that cover 0..num_slots-1 exactly once. The layout
    spans indices 0..num_ps-1, `num_ps` being one more than the highest owner (an index may own
    no slot while a grow is moving slots to it)."""

    __slots__ = ("num_slots", "version", "runs", "_owners", "_ranges")

    def __init__(self, owners: Iterable[int], version: int = 1):
        owners = np.array(list(owners) if not hasattr(owners, "__len__") else owners,
                          dtype=np.int32)
        check_num_slots(len(owners))
        if owners.ndim != 1 or int(owners.min()) < 0:
            raise ValueError("a layout's owners are PS indices >= 0, one per slot")
        if version < 0:
            raise ValueError(f"a layout version is >= 0, got {version}")
        owners.setflags(write=False)
        self.num_slots = len(owners)
        self.version = int(version)
        self._owners = owners
        cuts = np.flatnonzero(np.diff(owners)) + 1
        starts = np.concatenate(([0], cuts))
        ends = np.concatenate((cuts, [self.num_slots]))
        self.runs = tuple((int(s), int(e), int(owners[s])) for s, e in zip(starts, ends))
        self._ranges: dict[int, list[SlotRange]] = {}
        for s, e, owner in self.runs:
            self._ranges.setdefault(owner, []).append(SlotRange(s, e))

    @classmethod
    def initial(cls, num_ps: int, num_slots: int = DEFAULT_SLOTS, version: int = 1) -> "Layout":
        """Index i owns one contiguous block; the first num_slots % num_ps blocks are one
        slot longer."""
        check_num_slots(num_slots)
        if not 1 <= num_ps <= num_slots:
            raise ValueError(f"num_ps must be in 1..{num_slots} (the slots), got {num_ps}")
        q, r = divmod(num_slots, num_ps)
        counts = [q + 1 if i < r else q for i in range(num_ps)]
        return cls(np.repeat(np.arange(num_ps, dtype=np.int32), counts), version)

    @classmethod
    def from_ranges(cls, ranges: Mapping[int, Iterable[SlotRange | tuple[int, int]]],
                    num_slots: int, version: int) -> "Layout":
        """The layout whose index i owns ranges[i]; raises ValueError unless they cover
        0..num_slots-1 exactly once."""
        check_num_slots(num_slots)
        owners = np.full(num_slots, -1, dtype=np.int32)
        for index, spans in ranges.items():
            for span in spans:
                start, end = (span.start, span.end) if isinstance(span, SlotRange) else span
                if not 0 <= start < end <= num_slots:
                    raise ValueError(f"slot range {start}:{end} of PS {index} is not inside "
                                     f"0:{num_slots}")
                if (owners[start:end] != -1).any():
                    raise ValueError(f"slot range {start}:{end} of PS {index} overlaps "
                                     "another range")
                owners[start:end] = index
        missing = np.flatnonzero(owners == -1)
        if missing.size:
            raise ValueError(f"{missing.size} slots have no owner (the first: {missing[0]})")
        return cls(owners, version)

    @property
    def num_ps(self) -> int:
        return int(self._owners.max()) + 1

    def owners(self) -> np.ndarray:
        """The owner of every slot (read-only int32 array)."""
        return self._owners

    def owner(self, slot: int) -> int:
        return int(self._owners[slot])

    def ranges(self, index: int) -> list[SlotRange]:
        """The slots PS `index` owns, as sorted ranges ([] when none)."""
        return list(self._ranges.get(index, ()))

    def shares(self) -> list[int]:
        """Slots owned per index 0..num_ps-1."""
        return np.bincount(self._owners, minlength=self.num_ps).tolist()

    def owner_of_rows(self, ids):
        """The PS index of each row id (vectorized like `row_slot`)."""
        slots = row_slot(ids, self.num_slots)
        if hasattr(slots, "numpy"):
            import torch

            return torch.from_numpy(self._owners[slots.numpy()].astype(np.int64))
        return self._owners[slots].astype(np.int64)

    def owner_of_tensor(self, name: str) -> int:
        return self.owner(tensor_slot(name, self.num_slots))

    def with_moves(self, moves: Iterable[Move], version: int | None = None) -> "Layout":
        """This layout with `moves` applied (each move's src must own its slot), at `version`
        (default: this version + 1)."""
        owners = self._owners.copy()
        for m in moves:
            if not 0 <= m.slot < self.num_slots or owners[m.slot] != m.src or m.dst < 0:
                raise ValueError(f"cannot move slot {m.slot} from PS {m.src} to PS {m.dst}: "
                                 f"PS {owners[m.slot] if 0 <= m.slot < self.num_slots else '-'}"
                                 " owns it")
            owners[m.slot] = m.dst
        return Layout(owners, self.version + 1 if version is None else version)

    def __eq__(self, other) -> bool:
        return (isinstance(other, Layout) and self.version == other.version
                and self.runs == other.runs)

    def __hash__(self) -> int:
        return hash((self.version, self.runs))

    def __repr__(self) -> str:
        return (f"Layout(v{self.version}, {self.num_slots} slots over {self.num_ps} PS, "
                f"{len(self.runs)} runs)")


def plan_resize(layout: Layout, target: int) -> list[Move]:
    """The slot moves that take `layout` to indices 0..target-1, sorted by slot.

    Afterwards every slot has one owner below `target` and shares differ by at most one slot.
    Only surplus slots move: each index keeps min(its share, its quota) and an index either
    gives or receives, never both; of the quotas, the num_slots % target one-slot-larger ones
    go to the indices holding the most, so a grow from N to N+1 from a balanced layout moves
    ceil(num_slots / (N+1)) slots at most (only the new index receives). A donor gives up its
    highest slots; receivers, in index order, take the surplus in slot order, so ranges stay
    few."""
    slots = layout.num_slots
    if not isinstance(target, (int, np.integer)) or not 1 <= target <= slots:
        raise ValueError(f"the target PS count must be in 1..{slots} (the slots), got {target!r}")
    owners = layout.owners()
    counts = np.bincount(owners, minlength=max(layout.num_ps, target))
    q, r = divmod(slots, target)
    quota = np.zeros(len(counts), dtype=np.int64)
    quota[:target] = q
    larger = sorted(range(target), key=lambda i: (-int(counts[i]), i))[:r]
    quota[larger] += 1
    surplus: list[tuple[int, int]] = []
    for index in np.flatnonzero(counts > quota):
        held = np.flatnonzero(owners == index)
        surplus.extend((int(s), int(index)) for s in held[int(quota[index]):])
    surplus.sort()
    moves, taken = [], 0
    for index in range(target):
        for slot, src in surplus[taken:taken + max(0, int(quota[index] - counts[index]))]:
            moves.append(Move(slot, src, index))
        taken += max(0, int(quota[index] - counts[index]))
    assert taken == len(surplus), "quotas must sum to the slots"
    return sorted(moves, key=lambda m: m.slot)


def encode_ranges(ranges: Iterable[SlotRange | tuple[int, int]]) -> str:
    """'0:342,853:1024' (start:end, end exclusive, as a Python slice); '' for none."""
    parts = []
    for span in ranges:
        start, end = (span.start, span.end) if isinstance(span, SlotRange) else span
        parts.append(f"{int(start)}:{int(end)}")
    return ",".join(parts)


def decode_ranges(text: str, num_slots: int) -> list[SlotRange]:
    """The ranges `encode_ranges` wrote; raises ValueError on anything else (or a range
    outside 0..num_slots, or unsorted, overlapping ones)."""
    out: list[SlotRange] = []
    if not text:
        return out
    for part in text.split(","):
        start_text, sep, end_text = part.partition(":")
        if not sep or not start_text.isdigit() or not end_text.isdigit():
            raise ValueError(f"slot range {part[:32]!r} is not START:END")
        start, end = int(start_text), int(end_text)
        if not 0 <= start < end <= num_slots or (out and start < out[-1].end):
            raise ValueError(f"slot range {part!r} is outside 0:{num_slots} or out of order")
        out.append(SlotRange(start, end))
    return out


def size_for(index: int, asked: int, num_ps: int, target: int, resizing: bool = False) -> int:
    """The PS count a PS of `index` started with `--num-ps asked` (0: left out) runs with, in
    a layout of `num_ps` indices resizing to `target` (num_ps == target and not `resizing`: no
    resize; num_ps 0: no layout yet). Raises LayoutMismatch, its message naming the fix.

    The rule: only `elastic-ctl resize-ps` changes the PS count. With no layout the first PS's
    count makes it (left out: 1). Then an index of the layout runs with the layout's size and
    a grow target (num_ps <= index < target) with the target; --num-ps, when given, must be
    that number. During a resize it may be any count under which the index exists, up to the
    larger of the two: the one it was started with (a restart with its original flags; the
    layout's size moves with the first slot moved) or the target (the set restarted as the
    resize's). What a PS holds follows the layout, whatever count it runs with."""
    if num_ps == 0:
        size = asked or 1
        if index >= size:
            raise LayoutMismatch(
                f"PS index {index} is outside 0..{size - 1} (--num-ps {size}); the master has "
                "no PS layout yet, so the first PS's --num-ps makes it: start every PS of the "
                "first set with the same --num-ps")
        return size
    mid = resizing or target != num_ps
    now = f"the job's PS layout has {num_ps} PS" + (f", resizing to {target}" if mid else "")
    top = max(num_ps, target)
    if index < top:
        size, role = (num_ps, "an index of the layout") if index < num_ps else (
            target, "a PS the resize adds")
        fits = index < asked <= top if mid else asked == size
        if asked and not fits:
            give = (f"a count from {index + 1} to {top} (the one it was started with, or the "
                    "target)") if mid else str(size)
            raise LayoutMismatch(
                f"PS {index} says --num-ps {asked} but {now}: only `elastic-ctl resize-ps N` "
                f"changes the PS count. PS {index} is {role}: leave --num-ps out or give "
                f"{give}; to change the count to {asked}, run `elastic-ctl resize-ps {asked}` "
                "first")
        return asked or size
    raise LayoutMismatch(
        f"PS index {index} is not part of the job: {now} (indices 0..{top - 1}). To grow the "
        f"set run `elastic-ctl resize-ps {index + 1}` first, then start this PS; or start it "
        "with the --index of a PS the layout has")


def split_rows(layout: Layout, ids) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """[(index, positions, ids)]: the ids each PS index owns (int64, in their order in `ids`)
    and where they sit in `ids`, by index; owners of none are left out. No per-id Python (a
    batch has thousands of ids)."""
    keys = np.ascontiguousarray(np.asarray(ids, dtype=np.int64).reshape(-1))
    if len(layout.runs) == 1:  # one owner: no hashing at all
        return [(layout.runs[0][2], np.arange(keys.size), keys)] if keys.size else []
    from .jit import group_by_owner  # one compiled pass: hash, owner, counting sort

    counts, order = group_by_owner(keys, layout.num_slots, layout.owners())
    out, start = [], 0
    for index, count in enumerate(counts.tolist()):
        if count:
            group = order[start:start + count]
            out.append((index, group, keys[group]))
            start += count
    return out


def split_rows_reference(layout: Layout, ids) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """`split_rows` in numpy (what the compiled loop is tested against)."""
    keys = np.ascontiguousarray(np.asarray(ids, dtype=np.int64).reshape(-1))
    owners = layout.owners()[row_slot_reference(keys, layout.num_slots)]
    return [(int(index), g, keys[g]) for index in np.flatnonzero(np.bincount(owners))
            for g in [np.flatnonzero(owners == index)]]
