"""One PS's Prometheus metrics (`--metrics-port`).

What the PS already counts (ps.store.params `Stats`: pushes, pulls, staleness; the checkpointer's
last checkpoint; the replica node's role) is read at scrape time by `PSCollector`. What
nothing counted yet, the data plane's requests (latency, bytes, rows per kind), is measured
by `DataPlaneMeter` around `DataPlane.handle`: a few microseconds a request, against pushes
that take a millisecond or more. Checkpoint durations are observed as each one is written.

The replica state comes from `node.status()` (ps.replication.ReplicaNode): role, generation,
in-sync backups; whatever else the replica work adds to that dict as a number is exported
too, as `elasticps_ps_replica_<key>`.
"""
from __future__ import annotations

import time

import zmq
from prometheus_client import Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from protos import ps_pb2
from rpckit.metrics import PREFIX, Metrics
from .store.tables.metrics import table_families

STALENESS_BOUNDS = (0, 1, 2, 4, 8, 16, 32, 64)  # ps.store.params caps staleness at 64
ROW_KINDS = ("pull_rows", "push_rows")


def _nbytes(part) -> int:
    if isinstance(part, zmq.Frame):
        return len(part)
    size = getattr(part, "nbytes", None)  # numpy arrays, memoryviews
    return int(size) if size is not None else len(part)


class DataPlaneMeter:
    """Requests, bytes in and out, rows and latency per request kind of the data plane."""

    def __init__(self, metrics: Metrics):
        reg = metrics.registry
        self.seconds = metrics.histogram(
            "ps_request_seconds", "data-plane request latency on the PS (push: applied, and "
            "acknowledged by the in-sync backups)", ("kind",))
        self.received = Counter(PREFIX + "ps_received_bytes", "data-plane bytes received",
                                ("kind",), registry=reg)
        self.sent = Counter(PREFIX + "ps_sent_bytes", "data-plane bytes sent", ("kind",),
                            registry=reg)
        self.rows = Counter(PREFIX + "ps_rows", "embedding rows pulled or pushed", ("kind",),
                            registry=reg)
        self._children: dict[str, tuple] = {}

    def _for(self, kind: str) -> tuple:
        got = self._children.get(kind)
        if got is None:
            got = self._children[kind] = (self.seconds.labels(kind), self.received.labels(kind),
                                          self.sent.labels(kind), self.rows.labels(kind))
        return got

    def wrap(self, handle):
        """`handle(parts) -> reply` (DataPlane.handle), measured."""

        def measured(parts):
            started = time.perf_counter()
            reply = handle(parts)
            elapsed = time.perf_counter() - started
            try:
                req = ps_pb2.DataRequest.FromString(_bytes(parts[0]))
                kind = req.WhichOneof("body")
            except Exception:  # noqa: BLE001 - undecodable: answered by handle already
                kind = None
            seconds, received, sent, rows = self._for(kind or "invalid")
            seconds.observe(elapsed)
            received.inc(sum(_nbytes(p) for p in parts))
            sent.inc(sum(_nbytes(p) for p in reply))
            if kind in ROW_KINDS and len(parts) > 1:
                rows.inc(_nbytes(parts[1]) // 8)  # the int64 ids frame
            elif kind == "step":
                rows.inc(sum(_nbytes(parts[i]) // 8 for i in _step_ids(req.step, len(parts))))
            return reply

        return measured


def _step_ids(step, n: int) -> list[int]:
    """Where a Step's int64 ids frames are among its parts (the header first)."""
    at = 1 + len(step.push.tensors)
    where = [at + 2 * i for i in range(len(step.push_rows))]
    at += 2 * len(step.push_rows)
    where += [at + j for j in range(len(step.pull_rows))]
    return [i for i in where if i < n]


def _bytes(part) -> bytes:
    return part.bytes if hasattr(part, "bytes") else bytes(part)


class PSCollector:
    def __init__(self, store, checkpointer, node=None, clock=time.time):
        self.store = store
        self.checkpointer = checkpointer
        self.node = node
        self.clock = clock

    def describe(self):
        return []

    def collect(self):
        store, s = self.store, self.store.stats
        for name, doc, value in (
            ("ps_pushes", "dense pushes applied", s.pushes),
            ("ps_pulls", "dense pulls served", s.pulls),
            ("ps_row_pushes", "embedding row pushes applied", s.row_pushes),
            ("ps_row_pulls", "embedding row pulls served", s.row_pulls),
            ("ps_refused_stale", "pushes refused as too stale (--max-staleness)",
             s.refused_stale),
            ("ps_duplicates", "retried pushes answered without applying them again",
             store.applied.duplicates),
        ):
            c = CounterMetricFamily(PREFIX + name, doc)
            c.add_metric([], value)
            yield c
        yield self._staleness(s)
        init = GaugeMetricFamily(PREFIX + "ps_initialized", "1 once InitParameters arrived")
        init.add_metric([], 1.0 if store.initialized else 0.0)
        yield init
        own = store.ownership
        for name, doc, value in (
                ("ps_slots_owned", "hash slots this PS serves (ps/slots/ownership.py)",
                 int(own.owned.sum())),
                ("ps_slots_frozen", "owned slots being handed over (writes wait)",
                 int(own.frozen.sum())),
                ("ps_layout_version_known", "the PS layout version this PS knows", own.version)):
            g = GaugeMetricFamily(PREFIX + name, doc)
            g.add_metric([], float(value))
            yield g
        yield from table_families(store.tables)
        yield from self._checkpoints()
        yield from self._replica()

    def _staleness(self, s) -> HistogramMetricFamily:
        for _ in range(5):  # a push may add a key while we copy
            try:
                counts = dict(s.staleness)
                break
            except RuntimeError:
                continue
        else:
            counts = {}
        buckets, cumulative = [], 0
        for bound in STALENESS_BOUNDS:
            cumulative = sum(n for k, n in counts.items() if k <= bound)
            buckets.append((str(bound), cumulative))
        buckets.append(("+Inf", sum(counts.values())))
        h = HistogramMetricFamily(PREFIX + "ps_staleness",
                                  "versions a pushed gradient was behind (per applied push)")
        h.add_metric([], buckets, sum_value=sum(k * n for k, n in counts.items()))
        return h

    def _checkpoints(self):
        cp = self.checkpointer
        written = CounterMetricFamily(PREFIX + "ps_checkpoints", "checkpoints written")
        written.add_metric([], cp.written)
        yield written
        if cp.last is not None:
            at = GaugeMetricFamily(PREFIX + "ps_last_checkpoint_timestamp_seconds",
                                   "when the newest checkpoint's snapshot was taken (Unix s)")
            at.add_metric([], cp.last.time_ms / 1000)
            age = GaugeMetricFamily(PREFIX + "ps_checkpoint_age_seconds",
                                    "seconds since the newest checkpoint's snapshot")
            age.add_metric([], max(0.0, self.clock() - cp.last.time_ms / 1000))
            yield at
            yield age

    def _replica(self):
        status = self.node.status() if self.node is not None else {"role": "primary"}
        role = GaugeMetricFamily(PREFIX + "ps_role", "1 for this PS's role", labels=["role"])
        role.add_metric([str(status.get("role") or "none")], 1.0)
        yield role
        in_sync = status.get("replica_state")
        if in_sync:
            g = GaugeMetricFamily(PREFIX + "ps_replica_in_sync",
                                  "1 while this backup is in sync with its primary")
            g.add_metric([], 1.0 if in_sync == "in_sync" else 0.0)
            yield g
        for key, value in sorted(status.items()):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            g = GaugeMetricFamily(PREFIX + f"ps_replica_{key}", f"replica status: {key}")
            g.add_metric([], float(value))
            yield g


def time_checkpoints(checkpointer, metrics: Metrics) -> None:
    """Observe every written checkpoint's duration (the instance's `write`, which the
    periodic thread, the Checkpoint RPC and SIGTERM all call)."""
    seconds = metrics.histogram("ps_checkpoint_seconds", "time to write one checkpoint")
    write = checkpointer.write

    def timed(*args, **kwargs):
        info = write(*args, **kwargs)
        if info is not None:
            seconds.observe(info.seconds)
        return info

    checkpointer.write = timed


def install(metrics: Metrics, store, checkpointer, data, node=None) -> None:
    """Register the PS's collector, time checkpoints, measure the data plane (`data`: the
    DataPlane, before it starts)."""
    metrics.registry.register(PSCollector(store, checkpointer, node))
    time_checkpoints(checkpointer, metrics)
    data.handle = DataPlaneMeter(metrics).wrap(data.handle)
