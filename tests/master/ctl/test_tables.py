"""`elastic-ctl status` prints a line per embedding table with its rows held."""
from __future__ import annotations

from protos import ps_pb2
from master.ctl.tables import format_tables


def _ps(rows: int, cap: int) -> ps_pb2.GetPSStatusResponse:
    resp = ps_pb2.GetPSStatusResponse()
    t = resp.tables.add(rows=rows, bytes=3 << 20)
    t.spec.name, t.spec.max_rows = "emb", 100
    t.evicted.update({"cap": cap, "ttl": 0})
    resp.tables.add(rows=7).spec.name = "user"
    return resp


def test_a_line_per_table_with_rows_summed_over_ps():
    out = format_tables([_ps(40, 5), _ps(50, 1)], ["2/3"])
    assert "emb: 90 rows of max 100 on 2 PS, 6.0 MiB, evicted 6 (cap) 0 (ttl)" in out
    assert "user: 14 rows on 2 PS" in out and "not answering: 2/3" in out
    assert format_tables([ps_pb2.GetPSStatusResponse()]) == ""
