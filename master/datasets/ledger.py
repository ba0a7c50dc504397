"""The goodput ledger: what training cost and how much of it was useful, per dataset epoch.

Derived, never kept on the side: record counts come from the durable lease history (every
lease ever handed out, with how much of it was counted done), worker-seconds from the worker
table (registration to leave / loss, or to now), so the ledger is right after any restart.

GOODPUT is records trained once over records trained: `records_done / (records_done +
records_redone)`. Waste is training a record again, nothing else. A record handed back
untrained, with the exact offset of what was trained (SIGTERM, Ctrl-C, a dataset that ended
while leases were held, any graceful leave), was never trained by its first holder: handing it
out again costs no training, so it is not waste, however often it happens (`records_rehanded`
counts those hand-outs for the curious). `records_redone` counts the records of pieces handed
out again after an inexact loss (a worker lost or timed out, a failed lease): an upper bound of
what was trained twice, so goodput is a lower bound. `cost` prices exactly that share.
"""
from __future__ import annotations

import json

from .shards import DatasetQueue
from ..states import WorkerState

NO_LABELS = "(no labels)"


def ledger(totals: list[dict], datasets: dict[str, DatasetQueue], workers: list[dict],
           now_ms: int) -> dict:
    """The whole ledger (GetLedgerResponse's fields): per epoch, per label, and the totals.

    `totals` are the store's per-(dataset, epoch) sums over the lease history
    (`Store.lease_totals`), `workers` its worker rows; `datasets` give the epoch counters.
    """
    epochs = epoch_ledgers(totals, datasets)
    labels, seconds, lost, left = worker_seconds(workers, now_ms)
    done = sum(e["records_done"] for e in epochs)
    redone = sum(e["records_redone"] for e in epochs)
    return dict(
        epochs=epochs, worker_seconds=labels, worker_seconds_total=seconds,
        records_done=done, records_handed=sum(e["records_handed"] for e in epochs),
        records_redone=redone,
        records_rehanded=sum(e["records_rehanded"] for e in epochs),
        goodput=goodput(done, redone), workers_lost=lost, workers_left=left,
    )


def goodput(done: int, redone: int) -> float:
    """Records trained once over records trained (see the module docstring); 1.0 when nothing
    was trained yet."""
    return done / (done + redone) if done + redone else 1.0


def epoch_ledgers(totals: list[dict], datasets: dict[str, DatasetQueue]) -> list[dict]:
    out = []
    for row in totals:
        queue = datasets.get(row["dataset"])
        stats = queue.epochs.get(row["epoch"]) if queue else None
        handed = row["records_handed"]
        out.append(dict(
            dataset=row["dataset"], epoch=row["epoch"],
            records_total=queue.spec.num_records if queue else 0,
            records_done=row["records_done"], records_first_try=row["records_first_try"],
            records_handed=handed, records_redone=row["records_redone"],
            records_rehanded=row["records_rehanded"],
            handouts=row["handouts"], duplicates=stats.duplicates if stats else 0,
            requeues=dict(stats.requeues) if stats else {},
            goodput=goodput(row["records_done"], row["records_redone"]),
            finished=bool(stats and stats.finished_ms),
            started_ms=stats.started_ms if stats else 0,
            finished_ms=stats.finished_ms if stats else 0,
        ))
    return out


def worker_seconds(workers: list[dict], now_ms: int) -> tuple[list[dict], float, int, dict]:
    """Worker-seconds by label (each key=value a row), the total, losses, leaves by reason."""
    by_label: dict[str, list] = {}
    total = 0.0
    lost = 0
    left: dict[str, int] = {}
    for w in workers:
        end = w["ended_ms"] or now_ms
        seconds = max(0, end - w["registered_ms"]) / 1000
        total += seconds
        if w["state"] == WorkerState.LOST:
            lost += 1
        elif w["state"] == WorkerState.LEFT:
            left[w["reason"]] = left.get(w["reason"], 0) + 1
        labels = json.loads(w["labels"] or "{}")
        for label in [f"{k}={v}" for k, v in sorted(labels.items())] or [NO_LABELS]:
            entry = by_label.setdefault(label, [0.0, 0])
            entry[0] += seconds
            entry[1] += 1
    rows = [dict(label=k, worker_seconds=v[0], workers=v[1]) for k, v in sorted(by_label.items())]
    return rows, total, lost, left
