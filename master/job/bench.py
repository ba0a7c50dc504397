"""Speeds for `elastic-job simulate` from a measured run: a `scripts/bench_train.py --json`
file. Its `elastic-1w` runs (one worker, the job's own master and PS) give a worker's
records/s and, from the PS set's CPU seconds over the records it served, how many records/s
one PS serves at a full core (the set serves its size times that)."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

RUN = "elastic-1w"


def speeds_from_bench_train(path: str | Path) -> tuple[float, float]:
    """(worker records/s, PS capacity records/s), medians over the largest batch's runs;
    ValueError says what is missing."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read it: {e}") from None
    if not isinstance(doc, dict):
        raise ValueError("not a bench_train --json file (expected {batch: {run: [...]}})")
    batches = [b for b in doc if str(b).isdigit() and isinstance(doc[b], dict)
               and doc[b].get(RUN)]
    if not batches:
        raise ValueError(f"no {RUN!r} runs in it (run bench_train with --runs {RUN})")
    runs = doc[max(batches, key=int)][RUN]
    try:
        worker = statistics.median(float(r["records_per_s"]) for r in runs)
        ps = statistics.median(float(r["records"]) / sum(float(c) for c in r["ps_cpu_s"])
                               for r in runs)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
        raise ValueError(f"its {RUN!r} runs lack records_per_s, records or ps_cpu_s: "
                         f"{e!r}") from None
    if not (worker > 0 and ps > 0):
        raise ValueError(f"its {RUN!r} runs give no speed (worker {worker}, PS {ps})")
    return worker, ps
