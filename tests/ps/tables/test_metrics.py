"""Per-table metrics: the pinned names, read at scrape time."""
from __future__ import annotations

import torch
from prometheus_client import CollectorRegistry, generate_latest

from pswire.tables import TableSpec
from ps.metrics import PSCollector
from pswire.optimizers import make_config
from ps.store.params import ParamStore


class _Checkpointer:
    written, last = 0, None


def test_table_metrics_have_the_pinned_names():
    store = ParamStore()
    store.init_parameters([], make_config("sgd"), [(TableSpec("emb", 4, max_rows=3,
                                                              admit_after=2), None)])
    for _ in range(2):
        store.pull_rows("emb", torch.arange(3))
    for _ in range(2):
        store.pull_rows("emb", torch.tensor([10]))  # the cap evicts one for it
    registry = CollectorRegistry()
    registry.register(PSCollector(store, _Checkpointer()))
    text = generate_latest(registry).decode()
    assert 'elasticps_ps_table_rows{table="emb"} 3.0' in text
    assert 'elasticps_ps_table_admitted_total{table="emb"} 4.0' in text
    assert 'elasticps_ps_table_filtered_total{table="emb"} 4.0' in text
    assert 'elasticps_ps_table_evicted_total{cause="cap",table="emb"} 1.0' in text
    assert 'elasticps_ps_table_evicted_total{cause="ttl",table="emb"} 0.0' in text
    assert 'elasticps_ps_table_bytes{table="emb"}' in text
