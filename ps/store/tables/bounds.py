"""Changing a table's bounds on a running job: its cap, TTLs and eviction policy.

`max_rows`, `ttl_s`, `ttl_steps` and `evict` (pswire.tables.RETUNABLE) decide how many rows a
table keeps and which, never what a row holds, so a later InitParameters may change them
(ps/store/model_match.py decides which declarations may; docs/ps.md, "Changing a table's bounds").
"""
from __future__ import annotations

import numpy as np

from pswire.tables import TableSpec

from .eviction import Cause, victims


def retune(table, spec: TableSpec, row_cap: int, settle: bool = True) -> None:
    """Make `table` adopt `spec`, which differs from its own in `RETUNABLE` fields alone, and
    this PS's `row_cap` of it. With `settle` (a change on a running job, not a restore, whose
    files hold its effects) the new values take effect at once: rows past a lower cap are
    evicted, and a table gaining `ttl_s` counts its rows as touched now (their touch times
    were not kept before: the rows would expire by their creation times), marked changed for
    the next delta."""
    spec.check()
    with table.lock:
        gained_ttl_s = spec.ttl_s and not table.spec.ttl_s
        table.spec, table.row_cap = spec, row_cap
        if settle:
            live = table._live()
            if gained_ttl_s and live.size:
                table.touched[live] = table.clock()
                table.dirty[live] = True
            if row_cap and live.size > row_cap:
                table._evict(victims(live, live.size - row_cap, spec.evict, table.counts,
                                     table.ticks, table.ids), Cause.CAP)
        table._reset_deadlines()


def reshare(table, row_cap: int) -> int:
    """This PS's share of the table's `max_rows` is now `row_cap` (the slots it owns changed): a table
    holding more rows evicts down to it at once (cause `cap`). Returns the rows evicted."""
    with table.lock:
        table.row_cap = row_cap
        over = len(table) - row_cap if row_cap else 0
        if over <= 0:
            return 0
        before = len(table)
        table._make_room(over, np.empty(0, dtype=np.int64))
        return before - len(table)
