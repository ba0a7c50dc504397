"""Exactly once, from the master's durable lease history: per epoch, the record ranges
counted done must tile [0, num_records) with no gap and no overlap.

A lease counts its whole range when DONE, and its acknowledged prefix `[start, start +
records_done)` when it was taken back (requeued: its holder died, left or timed out) or
FAILED; the rest of such a lease went back to TODO as a new piece. The rows are
`master.persistence.store.Store.leases_of(dataset)`.
"""
from __future__ import annotations


def done_ranges(leases: list[dict]) -> dict[int, list[tuple[int, int]]]:
    """Per epoch, the sorted record ranges counted done."""
    ranges: dict[int, list[tuple[int, int]]] = {}
    for row in leases:
        start = row["start_rec"]
        if row["state"] == "done":
            end = row["end_rec"]
        elif row["state"] in ("requeued", "failed") and row["records_done"]:
            end = start + row["records_done"]
        else:
            continue
        ranges.setdefault(row["epoch"], []).append((start, end))
    return {epoch: sorted(r) for epoch, r in ranges.items()}


def tiling_errors(ranges: list[tuple[int, int]], num_records: int) -> list[str]:
    """What keeps `ranges` from tiling [0, num_records) exactly ([] when they do)."""
    errors, position = [], 0
    for start, end in ranges:
        if start > position:
            errors.append(f"records [{position}, {start}) never counted done")
        elif start < position:
            errors.append(f"records [{start}, {min(end, position)}) counted done twice")
        position = max(position, end)
    if position < num_records:
        errors.append(f"records [{position}, {num_records}) never counted done")
    elif position > num_records:
        errors.append(f"records up to {position} counted, past the {num_records} there are")
    return errors


def exactly_once(leases: list[dict], num_records: int, num_epochs: int) -> dict[int, list[str]]:
    """Per epoch 0..num_epochs-1, what is wrong with its counting ({} when nothing is)."""
    ranges = done_ranges(leases)
    problems = {e: tiling_errors(ranges.get(e, []), num_records) for e in range(num_epochs)}
    return {e: errs for e, errs in problems.items() if errs}
