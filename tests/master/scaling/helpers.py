"""Building specs and signals for the policy's tests."""
from __future__ import annotations

import copy

from master.job.spec import parse_spec
from master.scaling.signals import Signals

BASE = {
    "name": "job",
    "workers": {"command": "train", "min": 1, "max": 4,
                "markets": [{"name": "spot", "price": 0.3}, {"name": "on-demand", "price": 1.0}]},
    "ps": {"count": 2, "min": 1, "max": 3},
    "scaling": {"interval_s": 10, "spot_wait_s": 60, "ps_cooldown_s": 300},
}


def spec(**sections):
    doc = copy.deepcopy(BASE)
    for section, values in sections.items():
        doc.setdefault(section, {}).update(values)
    return parse_spec(doc)


def workers(**by_market) -> dict:
    """workers(spot=3, on_demand=1) -> {("worker", "spot"): 3, ("worker", "on-demand"): 1}"""
    return {("worker", m.replace("_", "-")): n for m, n in by_market.items()}


def signals(running=None, **kw) -> Signals:
    kw.setdefault("records_per_s", 100.0 * sum((running or {}).values()))
    kw.setdefault("ps_cpu", (0.5, 0.5))
    return Signals(running=running or {}, **kw)


def brief(decisions) -> list[tuple]:
    return [(d.role.value, d.market, d.from_count, d.to_count, d.reason.value) for d in decisions]
