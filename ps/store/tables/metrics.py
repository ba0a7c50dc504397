"""Prometheus metric families of the embedding tables, read at scrape time.

Names (docs/ps.md "Bounded embedding tables"): elasticps_ps_table_rows{table},
elasticps_ps_table_bytes{table}, elasticps_ps_table_admitted_total{table},
elasticps_ps_table_filtered_total{table}, elasticps_ps_table_evicted_total{table,cause}.
"""
from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from rpckit.metrics import PREFIX

from .eviction import Cause


def table_families(tables: dict) -> list:
    """The families for `tables` (name -> ps.store.tables.table.Table); runs each one's lazy TTL."""
    rows = GaugeMetricFamily(PREFIX + "ps_table_rows", "rows held (admitted) by the table on "
                             "this PS", labels=["table"])
    nbytes = GaugeMetricFamily(PREFIX + "ps_table_bytes", "memory of the table's arrays on "
                               "this PS (rows, row metadata, index, admission sketch)",
                               labels=["table"])
    # CounterMetricFamily appends _total to these names
    admitted = CounterMetricFamily(PREFIX + "ps_table_admitted", "rows created",
                                   labels=["table"])
    filtered = CounterMetricFamily(PREFIX + "ps_table_filtered", "sightings of ids not "
                                   "admitted (admit_after)", labels=["table"])
    evicted = CounterMetricFamily(PREFIX + "ps_table_evicted", "rows evicted, by cause (ttl, "
                                  "cap)", labels=["table", "cause"])
    for name in sorted(tables):
        t = tables[name]
        t.expire()
        rows.add_metric([name], len(t))
        nbytes.add_metric([name], t.nbytes)
        admitted.add_metric([name], t.admitted)
        filtered.add_metric([name], t.filtered)
        for cause in Cause:
            evicted.add_metric([name, cause.value], t.evicted[cause])
    return [rows, nbytes, admitted, filtered, evicted]
