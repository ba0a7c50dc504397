"""The market trace: capacities over time per market, bad rows refused by row and column."""
from __future__ import annotations

import pytest

from engines.markets import MarketTrace, TraceError

TRACE = """# a comment: where the shape comes from
t_s,market,capacity
0,spot,4
600,spot,0

1200.5,spot,2
0,on-demand,100
"""


def test_capacity_steps_per_market_and_no_limit_where_the_trace_says_nothing():
    trace = MarketTrace.parse(TRACE)
    assert trace.markets == ("on-demand", "spot")
    assert [trace.capacity("spot", t) for t in (0, 599.9, 600, 1200, 1200.5, 10**6)] == [
        4, 4, 0, 0, 2, 2]
    assert trace.capacity("on-demand", 50) == 100
    assert trace.capacity("reserved", 50) is None          # not in the trace: no limit
    later = MarketTrace.parse("t_s,market,capacity\n100,spot,1\n")
    assert later.capacity("spot", 99) is None              # before its first row: no limit
    assert later.capacity("spot", 100) == 1


def test_next_change_and_end():
    trace = MarketTrace.parse(TRACE)
    assert trace.next_change(0) == 600
    assert trace.next_change(600) == 1200.5
    assert trace.next_change(1200.5) is None
    assert trace.end_s == 1200.5


@pytest.mark.parametrize("text, row, column", [
    ("", 1, ""),
    ("time,market,capacity\n0,spot,1\n", 1, ""),
    ("t_s,market,capacity\n0,spot\n", 2, ""),
    ("t_s,market,capacity\n0,spot,1,2\n", 2, ""),
    ("t_s,market,capacity\n0,spot,1\nsoon,spot,1\n", 3, "t_s"),
    ("t_s,market,capacity\n-5,spot,1\n", 2, "t_s"),
    ("t_s,market,capacity\ninf,spot,1\n", 2, "t_s"),
    ("t_s,market,capacity\n0,Spot Market,1\n", 2, "market"),
    ("t_s,market,capacity\n0,spot,-1\n", 2, "capacity"),
    ("t_s,market,capacity\n0,spot,1.5\n", 2, "capacity"),
    ("t_s,market,capacity\n0,spot,1\n# c\n0,spot,2\n", 4, "t_s"),  # the same time twice
])
def test_a_bad_row_is_refused_by_row_and_column(text, row, column):
    with pytest.raises(TraceError) as e:
        MarketTrace.parse(text)
    assert (e.value.row, e.value.column) == (row, column), str(e.value)
    assert str(e.value).startswith(f"row {row}")


def test_an_unreadable_file_is_refused(tmp_path):
    with pytest.raises(TraceError, match="cannot read"):
        MarketTrace.load(tmp_path / "missing.csv")


def test_the_repository_trace_reads():
    from cluster.launch import CODE_ROOT

    trace = MarketTrace.load(CODE_ROOT / "examples" / "traces" / "spot-24h.csv")
    assert trace.end_s <= 86400
    assert any(trace.capacity("spot", t) == 0 for t in range(0, 86400, 300))
