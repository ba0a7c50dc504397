"""A market trace: how many processes each market lets run, over the time since a job started.

The CSV has the header `t_s,market,capacity`; a row says that from `t_s` seconds on, at most
`capacity` processes may run on `market` (until that market's next row). A market has no limit
before its first row, and a market the trace never names has none at all. Lines starting with
`#` are comments (a trace says where its shape comes from). The local engine refuses launches
beyond a market's capacity and preempts what runs beyond it; `elastic-job simulate` replays the
same file on a simulated clock.
"""
from __future__ import annotations

import bisect
import csv
import io
import math
import re
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

HEADER = ("t_s", "market", "capacity")
MAX_ROWS = 1_000_000
MAX_CAPACITY = 1_000_000
MAX_T_S = 366 * 86400.0
_MARKET = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")


class TraceError(ValueError):
    """A row that cannot be read: `row` is its line in the file (1 = the header), `column` the
    column's name (empty when the whole row is wrong)."""

    def __init__(self, row: int, column: str, message: str):
        where = "file" if row == 0 else f"row {row}" + (f", column {column}" if column else "")
        super().__init__(f"{where}: {message}")
        self.row, self.column, self.message = row, column, message


@dataclass(frozen=True)
class MarketTrace:
    """Per market, the times its capacity changes (ascending) and the capacity from each on."""

    steps: Mapping[str, tuple[tuple[float, ...], tuple[int, ...]]]

    @classmethod
    def load(cls, path: Path | str) -> "MarketTrace":
        try:
            text = Path(path).read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise TraceError(0, "", f"cannot read {path}: {e}") from None
        return cls.parse(text)

    @classmethod
    def parse(cls, text: str) -> "MarketTrace":
        rows = [(n, line) for n, line in enumerate(text.splitlines(), 1)
                if line.strip() and not line.lstrip().startswith("#")]
        if not rows:
            raise TraceError(1, "", f"no header; the first line must be {','.join(HEADER)}")
        header_line, header = rows[0]
        if tuple(c.strip() for c in next(csv.reader([header]))) != HEADER:
            raise TraceError(header_line, "", f"the header must be {','.join(HEADER)}, "
                                              f"got {header[:60]!r}")
        if len(rows) - 1 > MAX_ROWS:
            raise TraceError(rows[MAX_ROWS + 1][0], "", f"more than {MAX_ROWS} rows")
        points: dict[str, dict[float, int]] = {}
        for n, line in rows[1:]:
            t_s, market, capacity = _row(n, line)
            at = points.setdefault(market, {})
            if t_s in at:
                raise TraceError(n, "t_s", f"market {market!r} already has a row at t_s={t_s:g}")
            at[t_s] = capacity
        steps = {m: (tuple(sorted(at)), tuple(at[t] for t in sorted(at)))
                 for m, at in points.items()}
        return cls(MappingProxyType(steps))

    @property
    def markets(self) -> tuple[str, ...]:
        return tuple(sorted(self.steps))

    def capacity(self, market: str, t_s: float) -> int | None:
        """How many processes may run on `market` at `t_s`; None = no limit."""
        if market not in self.steps:
            return None
        times, capacities = self.steps[market]
        i = bisect.bisect_right(times, t_s) - 1
        return None if i < 0 else capacities[i]

    def next_change(self, t_s: float) -> float | None:
        """The first time after `t_s` at which some market's capacity changes; None = never."""
        later = [times[i] for times, _ in self.steps.values()
                 if (i := bisect.bisect_right(times, t_s)) < len(times)]
        return min(later, default=None)

    @property
    def end_s(self) -> float:
        """The time of the last row (capacities hold as they are after it)."""
        return max((times[-1] for times, _ in self.steps.values()), default=0.0)


def _row(n: int, line: str) -> tuple[float, str, int]:
    cells = next(csv.reader(io.StringIO(line)))
    if len(cells) != len(HEADER):
        raise TraceError(n, "", f"has {len(cells)} columns; expected {len(HEADER)} "
                                f"({','.join(HEADER)})")
    t_text, market, cap_text = (c.strip() for c in cells)
    try:
        t_s = float(t_text)
    except ValueError:
        raise TraceError(n, "t_s", f"{t_text[:30]!r} is not a number of seconds") from None
    if not (math.isfinite(t_s) and 0 <= t_s <= MAX_T_S):
        raise TraceError(n, "t_s", f"is {t_text[:30]}; must be in [0, {MAX_T_S:g}]")
    if not _MARKET.fullmatch(market):
        raise TraceError(n, "market", f"{market[:30]!r} is not a market name (lower-case "
                                      "letters, digits and '-')")
    try:
        capacity = int(cap_text)
    except ValueError:
        raise TraceError(n, "capacity", f"{cap_text[:30]!r} is not a whole number") from None
    if not 0 <= capacity <= MAX_CAPACITY:
        raise TraceError(n, "capacity", f"is {capacity}; must be in [0, {MAX_CAPACITY}]")
    return t_s, market, capacity
