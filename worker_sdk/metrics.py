"""A worker's Prometheus metrics, served when `ELASTIC_PS_METRICS_PORT` is set.

`maybe_serve()` (called by MasterClient and DataClient when they are made) starts one HTTP
endpoint per process on that port (0: a free one, logged) and reads, at scrape time, what the
SDK already keeps: the open datasets' lease streams (records delivered and trained, leases
held and taken away) and the PSClients' step timeline (seconds waiting on pulls and on
pushes, pushes, stale refusals). Samples/s is `rate(elasticps_worker_records_trained_total)`.
Nothing is counted on the training loop's path for this, but for the rare re-route of a
request whose slot moved to another PS (`rerouted`).
"""
from __future__ import annotations

import logging
import os
import sys
import threading

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from rpckit.metrics import PREFIX, Metrics, MetricsPortInUse

from .data import ack

log = logging.getLogger(__name__)
ENV = "ELASTIC_PS_METRICS_PORT"
_lock = threading.Lock()
_served: Metrics | None = None
port = 0  # the bound port once served
reroutes = 0  # parts of data-plane calls sent on to a slot's new owner (WRONG_OWNER)


def rerouted() -> None:
    global reroutes
    with _lock:
        reroutes += 1


class WorkerCollector:
    def describe(self):
        return []

    def collect(self):
        # only when datasets were made (it imports torch; the lease protocol does not)
        lease_stream = sys.modules.get(__package__ + ".data.lease_stream")
        counters = {name: CounterMetricFamily(PREFIX + name, doc, labels=["dataset"])
                    for name, doc in (
                        ("worker_records_delivered", "records handed to the training loop"),
                        ("worker_records_trained", "records acknowledged as trained (their "
                         "step's push answered): rate() is samples/s"),
                        ("worker_leases_completed", "leases reported done and accepted"),
                        ("worker_leases_dropped", "leases the master took away"),
                        ("worker_records_wasted", "records read from leases taken away"),
                    )}
        held = GaugeMetricFamily(PREFIX + "worker_leases_held", "leases held now",
                                 labels=["dataset"])
        epoch = GaugeMetricFamily(PREFIX + "worker_epoch", "the epoch being read",
                                  labels=["dataset"])
        for stream in list(lease_stream._open) if lease_stream else []:
            t = stream.table
            name = t.dataset
            with t.lock:
                values = dict(worker_records_delivered=stream.delivered,
                              worker_records_trained=t.trained,
                              worker_leases_completed=t.completed,
                              worker_leases_dropped=t.dropped, worker_records_wasted=t.wasted)
                leases = len(t.leases)
            for key, value in values.items():
                counters[key].add_metric([name], value)
            held.add_metric([name], leases)
            epoch.add_metric([name], stream.epoch)
        yield from counters.values()
        yield held
        yield epoch
        yield from self._steps()

    @staticmethod
    def _steps():
        wait = CounterMetricFamily(PREFIX + "worker_wait_seconds",
                                   "step timeline: seconds the training loop waited, by phase",
                                   labels=["phase"])
        pushes = CounterMetricFamily(PREFIX + "worker_pushes", "pushes sent")
        stale = CounterMetricFamily(PREFIX + "worker_stale_refusals",
                                    "pushes a PS refused as too stale")
        pull_s = push_s = 0.0
        n_push = n_stale = 0
        clients = ack.LEDGER.flushers()  # the PSClients of this process's ledger
        for client in clients:
            timeline = client.timeline()
            pull_s += timeline.get("wait_pull_s", 0.0)
            push_s += timeline.get("wait_push_s", 0.0)
            n_push += getattr(client, "pushes", 0)
            n_stale += getattr(client, "stale_refusals", 0)
        wait.add_metric(["pull"], pull_s)
        wait.add_metric(["push"], push_s)
        pushes.add_metric([], n_push)
        stale.add_metric([], n_stale)
        yield wait
        yield pushes
        yield stale
        yield CounterMetricFamily(PREFIX + "worker_reroutes", "parts of data-plane calls a PS "
                                  "refused WRONG_OWNER (its slot moved) and that were sent on "
                                  "by a newer PS layout", value=reroutes)


def maybe_serve() -> int:
    """Serve worker metrics on $ELASTIC_PS_METRICS_PORT once per process; the port, or 0
    when the variable is unset (or the port could not be bound: logged, training goes on)."""
    global _served, port
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return 0
    with _lock:
        if _served is not None:
            return port
        try:
            wanted = int(raw)
            if not 0 <= wanted <= 65535:
                raise ValueError(raw)
        except ValueError:
            log.warning("%s=%r is not a port: worker metrics are off", ENV, raw)
            _served = Metrics()  # do not warn again
            return 0
        metrics = Metrics()
        metrics.registry.register(WorkerCollector())
        try:
            port = metrics.serve("0.0.0.0", wanted)
        except MetricsPortInUse as exc:
            log.warning("worker metrics are off: %s", exc)
            _served = Metrics()
            return 0
        _served = metrics
        log.info("worker metrics on http://0.0.0.0:%d/metrics", port)
        return port
