"""bench_startup's report: medians and spread per measure, one column per checkout."""
from __future__ import annotations

import os

from benchmarks.startup import _cpu_s, summary, table


class _Me:
    pid = os.getpid()


def test_summary_and_table_side_by_side():
    reps = [{"ps registered": 3.0, "ps registered, cpu s": 2.0},
            {"ps registered": 1.0, "ps registered, cpu s": 1.5},
            {"ps registered": 2.0, "ps registered, cpu s": 1.0}]
    s = summary(reps)
    assert s["ps registered"] == {"median": 2.0, "min": 1.0, "max": 3.0,
                                  "values": [3.0, 1.0, 2.0]}
    other = summary([{k: v * 2 for k, v in r.items()} for r in reps])
    lines = table([{"commit": "aaaa", "summary": s}, {"commit": "bbbb", "summary": other}])
    assert "aaaa" in lines[0] and "bbbb" in lines[0]
    row = next(line for line in lines if line.startswith("ps registered "))
    assert "2.00 (1.00-3.00)" in row and "4.00 (2.00-6.00)" in row


def test_cpu_seconds_of_a_process_grow_with_its_work():
    before = _cpu_s(_Me)
    sum(i * i for i in range(2_000_000))
    assert _cpu_s(_Me) > before
