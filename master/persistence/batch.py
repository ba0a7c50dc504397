"""A batch of row changes: what the core decided, for a store to commit in one transaction.

The core writes every change into the batch that is currently collecting; the committer
swaps it for a fresh one and commits it, so the changes of many concurrent calls share one
durable commit (group commit). Changes to the same row within a batch are merged, so a lease
handed out and finished before the commit costs one insert.
"""
from __future__ import annotations

TABLES = ("datasets", "epochs", "leases", "pieces", "workers", "ps", "ps_generations",
          "ps_backups", "ps_layout", "ps_slot_ranges", "ps_slot_moves", "job", "job_processes")
DATASET_TABLES = ("leases", "pieces", "epochs", "datasets")  # what a dropped dataset had


def _of_dataset(table: str, key, row: dict) -> str | None:
    """The dataset a pending row belongs to, when it can be told (a partial update of a
    lease or piece cannot: harmless, its id is never reused, the update then matches no row)."""
    if table == "datasets":
        return key
    if table == "epochs":
        return key[0]
    return row.get("dataset")


class Batch:
    __slots__ = ("inserts", "updates", "deletes", "events", "drops")

    def __init__(self) -> None:
        self.inserts: dict[str, dict] = {t: {} for t in TABLES}
        self.updates: dict[str, dict] = {t: {} for t in TABLES}
        self.deletes: dict[str, set] = {t: set() for t in TABLES}
        self.events: list[dict] = []
        self.drops: set[str] = set()  # datasets whose every row goes, before anything else

    def insert(self, table: str, key, row: dict) -> None:
        # a delete of the same key stays: a store applies deletes before inserts, so a row
        # deleted and inserted again in one batch is replaced, not inserted twice
        self.inserts[table][key] = row

    def update(self, table: str, key, row: dict) -> None:
        """Set the columns in `row` (a full or partial row) of an existing row."""
        pending = self.inserts[table].get(key)
        if pending is not None:
            pending.update(row)
            return
        previous = self.updates[table].get(key)
        if previous is None:
            self.updates[table][key] = dict(row)
        else:
            previous.update(row)

    def delete(self, table: str, key) -> None:
        self.updates[table].pop(key, None)
        if self.inserts[table].pop(key, None) is None:
            self.deletes[table].add(key)

    def event(self, row: dict) -> None:
        self.events.append(row)

    def drop_dataset(self, name: str) -> None:
        """Delete every row of dataset `name` (master/datasets/drop.py). A store applies drops
        first, so the rows of this name still pending here are dropped from the batch now: what is
        added after this call (the name created again) is what stays."""
        for table in DATASET_TABLES:
            for pending in (self.inserts[table], self.updates[table]):
                for key in [k for k, row in pending.items()
                            if _of_dataset(table, k, row) == name]:
                    del pending[key]
        self.drops.add(name)

    def merge_into(self, other: "Batch") -> None:
        """Apply this batch's changes on top of `other` (a call's batch onto the collecting one).

        Deletes first, as a store applies them: a key deleted and inserted again within one
        batch is a replaced row either way.
        """
        for name in self.drops:
            other.drop_dataset(name)
        for table in TABLES:
            for key in self.deletes[table]:
                other.delete(table, key)
            for key, row in self.inserts[table].items():
                other.insert(table, key, row)
            for key, row in self.updates[table].items():
                other.update(table, key, row)
        other.events.extend(self.events)

    def __bool__(self) -> bool:
        return bool(self.events) or bool(self.drops) or any(
            self.inserts[t] or self.updates[t] or self.deletes[t] for t in TABLES
        )
