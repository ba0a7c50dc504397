"""The master's Prometheus metrics (`--metrics-port`), read from the core at scrape time.

The core already counts everything per dataset epoch (master/datasets/shards.py `EpochStats`,
restored from the database after a restart), so `MasterCollector` sums those counters under the
committer's lock when Prometheus scrapes, instead of counting a second time on the hot path.
Sums over every epoch of a dataset are counters; they restart from the durable counts after a
master restart and drop when a dataset is dropped (Prometheus' `rate` treats that as a reset).
The scrape costs O(datasets x epochs + live workers) under the lock, bounded like GetStatus.

Two things are timed as they happen: RPC latency (rpckit.metrics.RpcLatency) and commit
latency (`time_commits`, around `Store.apply`). The leader state comes from a hook, `leader`,
the standby election sets it (a `() -> (is_leader, term)` callable).
"""
from __future__ import annotations

import time
from typing import Callable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from rpckit.metrics import PREFIX, Metrics

from .datasets.ledger import NO_LABELS

# requeue causes always exported (0 until they happen), so a graph has its series from the start
CAUSES = ("failed", "released", "lost", "timeout", "preempted")


class MasterCollector:
    """Counters and gauges from the core currently serving (None on a standby)."""

    def __init__(self, serving: Callable[[], tuple[object, object] | tuple[None, None]],
                 leader: Callable[[], tuple[bool, int]] | None = None):
        self.serving = serving  # () -> (core, committer) of the current leader term, or Nones
        self.leader = leader

    def describe(self):
        return []  # collected lazily: nothing to check at registration

    def collect(self):
        leader = GaugeMetricFamily(PREFIX + "master_leader",
                                   "1 while this master is the leader, 0 on a standby")
        term = GaugeMetricFamily(PREFIX + "master_leader_term",
                                 "the leader term this master last held (0: never led)")
        is_leader, held = self.leader() if self.leader else (True, 0)
        leader.add_metric([], 1.0 if is_leader else 0.0)
        term.add_metric([], float(held))
        yield leader
        yield term
        core, committer = self.serving()
        if core is None or committer is None:
            return
        yield from committer.read(lambda: list(self._from_core(core)))

    def _from_core(self, core):
        c = {name: CounterMetricFamily(PREFIX + name, doc, labels=labels) for name, doc, labels in (
            ("shards_handed_out", "leases handed out (shards and remainders)", ["dataset"]),
            ("shards_done", "shards counted done", ["dataset"]),
            ("shards_requeued", "leases taken back, by cause", ["dataset", "cause"]),
            ("records_done", "records counted done (each once per epoch)", ["dataset"]),
            ("records_redone", "records handed out again after a requeue", ["dataset"]),
            ("duplicates", "reports of leases already taken away (never counted)",
             ["dataset"]),
            ("epochs_finished", "epochs finished", ["dataset"]),
        )}
        g = {name: GaugeMetricFamily(PREFIX + name, doc, labels=labels) for name, doc, labels in (
            ("dataset_epoch", "the dataset's current epoch (num_epochs once finished)",
             ["dataset"]),
            ("dataset_records", "records per epoch", ["dataset"]),
            ("dataset_leases", "leases out now", ["dataset"]),
            ("dataset_quarantined_shards", "shards quarantined now", ["dataset"]),
            ("workers", "live workers, per label (each key=value; '(no labels)')", ["label"]),
        )}
        for name, queue in core.datasets.items():
            handouts = done = records = redone = dups = finished = 0
            requeues = dict.fromkeys(CAUSES, 0)
            for stats in queue.epochs.values():
                handouts += stats.handouts
                done += stats.shards_done
                records += stats.records_done
                redone += stats.records_redone
                dups += stats.duplicates
                finished += 1 if stats.finished_ms else 0
                for cause, n in stats.requeues.items():
                    requeues[cause] = requeues.get(cause, 0) + n
            c["shards_handed_out"].add_metric([name], handouts)
            c["shards_done"].add_metric([name], done)
            c["records_done"].add_metric([name], records)
            c["records_redone"].add_metric([name], redone)
            c["duplicates"].add_metric([name], dups)
            c["epochs_finished"].add_metric([name], finished)
            for cause, n in sorted(requeues.items()):
                c["shards_requeued"].add_metric([name, str(cause)], n)
            g["dataset_epoch"].add_metric([name], queue.current_epoch())
            g["dataset_records"].add_metric([name], queue.spec.num_records)
            g["dataset_leases"].add_metric([name], len(queue.leases))
            g["dataset_quarantined_shards"].add_metric([name], len(queue.quarantine))
        by_label: dict[str, int] = {}
        for worker in core.workers.alive.values():
            for label in [f"{k}={v}" for k, v in sorted(worker.labels.items())] or [NO_LABELS]:
                by_label[label] = by_label.get(label, 0) + 1
        for label, n in sorted(by_label.items()):
            g["workers"].add_metric([label], n)
        live = GaugeMetricFamily(PREFIX + "live_workers", "live (registered, not lost) workers")
        live.add_metric([], len(core.workers.alive))
        leases = GaugeMetricFamily(PREFIX + "leases", "leases out now, every dataset")
        leases.add_metric([], len(core.leases))
        ps = GaugeMetricFamily(PREFIX + "ps", "registered PS primaries, by state",
                               labels=["state"])
        ps.add_metric(["alive"], len(set(core.ps) - set(core.ps_lost)))
        ps.add_metric(["lost"], len(core.ps_lost))
        yield from c.values()
        yield from g.values()
        yield from (live, leases, ps)
        yield from self._layout(core.layout)

    @staticmethod
    def _layout(layout):
        """The PS layout (master/ps/layout.py): its version, size, target and pending moves."""
        for name, doc, value in (
            ("ps_layout_version", "the PS layout's version (0: none yet)", layout.version),
            ("ps_layout_num_ps", "PS indices of the layout", layout.num_ps),
            ("ps_target_num_ps", "the PS count resize-ps asked for", layout.target),
            ("ps_slot_moves_pending", "slot moves the current resize has not done",
             len(layout.moves)),
        ):
            gauge = GaugeMetricFamily(PREFIX + name, doc)
            gauge.add_metric([], value)
            yield gauge


def time_commits(store, metrics: Metrics) -> None:
    """Observe every commit's duration (`Store.apply`: one transaction, the group commit)
    into elasticps_commit_seconds. Wraps the store instance: the committer stays unaware."""
    seconds = metrics.histogram("commit_seconds",
                                "duration of one durable commit (a batch of calls' changes)")
    apply = store.apply

    def timed(batch):
        started = time.perf_counter()
        try:
            return apply(batch)
        finally:
            seconds.observe(time.perf_counter() - started)

    store.apply = timed


def install(metrics: Metrics, store, serving, leader=None) -> None:
    """Register the master's collector and time the store's commits. The RPC interceptor
    (rpckit.metrics.RpcLatency) is made apart: the server is built before the store."""
    metrics.registry.register(MasterCollector(serving, leader))
    time_commits(store, metrics)
