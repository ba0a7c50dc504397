"""The job's Prometheus metrics (`--metrics-port`): the policy's targets per role and market
(`elasticps_scaler_target`) and its decisions by reason (`elasticps_scaler_decisions_total`,
from the job's durable counts: a leader that takes over goes on counting from them)."""
from __future__ import annotations

from typing import Callable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from rpckit.metrics import PREFIX


class JobCollector:
    """Read at scrape time from the driver of the job this master leads (None: no job, or a
    standby): nothing is exported then."""

    def __init__(self, driver: Callable[[], object]):
        self.driver = driver

    def describe(self):
        return []

    def collect(self):
        driver = self.driver()
        if driver is None:
            return
        targets, decisions = driver.committer.read(
            lambda: (dict(driver.book.targets), dict(driver.book.decisions)))
        target = GaugeMetricFamily(PREFIX + "scaler_target",
                                   "processes the scaling policy wants, per role and market",
                                   labels=["role", "market"])
        for key, n in sorted(targets.items()):
            role, _, market = key.partition("/")
            target.add_metric([role, market], n)
        total = CounterMetricFamily(PREFIX + "scaler_decisions",
                                    "the scaling policy's decisions, by reason",
                                    labels=["reason"])
        for reason, n in sorted(decisions.items()):
            total.add_metric([reason], n)
        yield target
        yield total
