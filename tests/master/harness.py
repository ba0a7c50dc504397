"""A core wired to a real (in-memory SQLite) store, committed by hand: restarts without sockets."""
from __future__ import annotations

from master.calls import Report
from master.core import MasterCore, Settings
from master.datasets.spec import DatasetSpec
from master.persistence.store import Store
from tests.fakes import FakeClock


class Harness:
    def __init__(self, settings: Settings | None = None, url: str = "sqlite://"):
        self.clock = FakeClock()
        self.store = Store(url)
        self.store.upgrade()
        self.settings = settings or Settings()
        self.core = self._boot()
        self.commit()

    def _boot(self) -> MasterCore:
        return MasterCore(self.settings, clock=self.clock, snapshot=self.store.load())

    def commit(self) -> None:
        self.store.apply(self.core.journal.swap())

    def restart(self, lose_uncommitted: bool = False) -> None:
        """A master restart: what was committed survives, the rest is gone."""
        if not lose_uncommitted:
            self.commit()
        self.core = self._boot()
        self.commit()

    # shorthands --------------------------------------------------------------------------

    def dataset(self, name="d", num_records=100, shard_size=10, num_epochs=1, **kw) -> DatasetSpec:
        spec = DatasetSpec(name=name, num_records=num_records, shard_size=shard_size,
                           num_epochs=num_epochs, **kw)
        self.core.create_dataset(spec)
        self.commit()
        return spec

    def worker(self, name="w", **labels) -> str:
        wid = self.core.register_worker(name, labels).worker_id
        self.commit()
        return wid

    def resolve(self, reports) -> None:
        """What the servicer does outside the lock: look up leases that ended long ago."""
        self.core.remember_ended(self.store.lookup_leases(self.core.unresolved(list(reports))))

    def get(self, wid, dataset="d", n=1, reports=()):
        self.resolve(reports)
        grant = self.core.get_shard(wid, dataset, n, list(reports))
        self.commit()
        return grant

    def done(self, wid, lease, records=0):
        return self.report(wid, Report(lease.lease_id, "DONE", records))

    def report(self, wid, *reports):
        self.resolve(reports)
        results = self.core.report(wid, list(reports))
        self.commit()
        return results

    def drain(self, wid, dataset="d", n=4, limit=100_000):
        """Lease and finish everything left; returns the number of leases finished."""
        finished = 0
        for _ in range(limit):
            grant = self.get(wid, dataset, n)
            if grant.status == "END":
                return finished
            if grant.status == "WAIT":
                self.clock.advance(1)
                self.core._caller(wid)
                self.core.tick()
                self.commit()
                continue
            for lease in grant.leases:
                self.done(wid, lease)
                finished += 1
        raise AssertionError("drain did not end")

    def epoch(self, dataset="d", epoch=0):
        return self.core.datasets[dataset].epochs[epoch]

    def audit(self, dataset="d"):
        return audit(self.store, dataset)


def audit(store: Store, dataset: str) -> dict[int, list[tuple[int, int]]]:
    """Per epoch, the record ranges counted done, from the durable lease history."""
    ranges: dict[int, list[tuple[int, int]]] = {}
    for row in store.leases_of(dataset):
        if row["state"] == "done":
            ranges.setdefault(row["epoch"], []).append((row["start_rec"], row["end_rec"]))
        elif row["state"] in ("requeued", "failed") and row["records_done"]:
            start = row["start_rec"]
            ranges.setdefault(row["epoch"], []).append((start, start + row["records_done"]))
    return {e: sorted(r) for e, r in ranges.items()}


def assert_exactly_once(ranges: list[tuple[int, int]], num_records: int) -> None:
    """The ranges tile [0, num_records) with no gap and no overlap."""
    position = 0
    for start, end in ranges:
        assert start == position, f"gap or overlap at {position}: next range starts at {start}"
        assert end > start
        position = end
    assert position == num_records
