"""Views of `elastic-ctl` that fold or price: finished epochs on one line, the PS replica sets,
the cost table.

Plain functions of the master's protobuf answers, tested without a master.
"""
from __future__ import annotations

from protos import master_pb2 as pb

NO_LABELS = "(no labels)"  # the ledger's row of workers without labels (master/datasets/ledger.py)
OTHER_LABELS = "(other labels)"


def _requeues(m) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(m.items())) or "-"


def dataset_rows(d: pb.DatasetStatus) -> list[list[str]]:
    """The status rows of one dataset: every finished epoch folded into one line (their sums),
    then one row per epoch still running."""
    shards = -(-d.spec.num_records // d.spec.shard_size) if d.spec.shard_size else 0
    state = "finished" if d.finished else f"epoch {d.epoch + 1}/{d.spec.num_epochs}"
    done = [e for e in d.epochs if e.finished]
    rows = []
    if done:
        n = len(done)
        requeues: dict[str, int] = {}
        for e in done:
            for cause, count in e.requeues.items():
                requeues[cause] = requeues.get(cause, 0) + count
        first, last = done[0].epoch, done[-1].epoch
        older = f" (+{d.epochs_not_shown} earlier)" if d.epochs_not_shown else ""
        rows.append([
            d.spec.name, f"{first}-{last}" if n > 1 else str(first),
            f"{n} finished{older}", "0", "0", f"{sum(e.done for e in done)}/{shards * n}",
            f"{sum(e.records_done for e in done)}/{sum(e.records_total for e in done)}",
            str(sum(e.handouts for e in done)), str(sum(e.records_rehanded for e in done)),
            str(sum(e.records_redone for e in done)), str(sum(e.duplicates for e in done)),
            _requeues(requeues), str(sum(e.quarantined for e in done)),
        ])
    for e in d.epochs:
        if e.finished:
            continue
        rows.append([
            d.spec.name, str(e.epoch), state if e.epoch == d.epoch else "running",
            str(e.todo), str(e.doing), f"{e.done}/{shards}",
            f"{e.records_done}/{e.records_total}", str(e.handouts), str(e.records_rehanded),
            str(e.records_redone), str(e.duplicates), _requeues(e.requeues), str(e.quarantined),
        ])
    return rows


def ago(ms: int, now_ms: int) -> str:
    seconds = max(0.0, (now_ms - ms) / 1000)
    return f"{seconds:.1f}s ago" if seconds < 120 else f"{seconds / 60:.0f}m ago"


PS_HEADERS = ["ps", "role", "state", "generation", "grpc", "data", "incarnation", "registered"]


def ps_place(p: pb.PSInfo, lay: pb.PSLayoutStatus) -> str:
    """'index/count' against the layout now (a PS keeps the count it registered with, which a
    resize leaves behind: PS 0 of 2 is '0/1' once the layout is 1 PS); an index a grow adds
    or a shrink removes says so."""
    if not lay.layout_version:
        return f"{p.index}/{p.num_ps}"
    place = f"{p.index}/{lay.num_ps}"
    if p.index < lay.num_ps:
        return place
    return f"{place} (joining)" if p.index < lay.target_num_ps else f"{place} (leaving)"


def ps_rows(s: pb.GetStatusResponse) -> list[list[str]]:
    """One row per PS process, by index (`ps_place`): the primary (alive or lost) with its
    index's generation, then its backups, each `in_sync` (its primary waits for it: promotable) or
    `syncing` (still copying: not promotable without losing pushes)."""
    rows = []
    for p in sorted(s.ps, key=lambda p: p.index):
        index, generation = ps_place(p, s.layout), str(p.generation)
        rows.append([index, "primary", p.state, generation, p.address, p.data_address,
                     str(p.incarnation), ago(p.registered_ms, s.time_ms)])
        rows += [[index, "backup", b.state, generation, b.address, b.data_address, "-",
                  ago(b.registered_ms, s.time_ms)] for b in p.backups]
    return rows


RANGES_SHOWN = 4


def layout_lines(s: pb.GetStatusResponse) -> list[str]:
    """The PS layout: its version and size, a resize in progress, each listed index's slots."""
    lay = s.layout
    if not lay.layout_version:
        return [f"  no layout yet ({lay.ps_slots} slots): the first PS's --num-ps makes it, or "
                "elastic-ctl resize-ps N"]
    out = [f"  version {lay.layout_version}: {lay.ps_slots} slots over {lay.num_ps} PS"]
    if lay.resizing:
        done = lay.moves_planned - lay.moves_pending
        phases = ", ".join(f"{k} {v}" for k, v in sorted(lay.moves_by_phase.items()))
        out.append(f"  resizing to {lay.target_num_ps} PS: {done} of {lay.moves_planned} slot "
                   f"moves done" + (f" ({phases})" if phases else "")
                   + (f", started {ago(lay.resize_started_ms, s.time_ms)}"
                      if lay.resize_started_ms else ""))
        out += [f"  WAITING: {line}" for line in lay.waiting]
    rows = []
    for p in sorted(s.ps, key=lambda p: p.index):
        spans = [f"{r.start}:{r.end}" for r in p.slots]
        more = f" (+{len(spans) - RANGES_SHOWN} more)" if len(spans) > RANGES_SHOWN else ""
        role = "" if p.index < lay.num_ps else " (joining)" if p.index < lay.target_num_ps \
            else " (not in the layout)"
        rows.append([f"{p.index}{role}", str(sum(r.end - r.start for r in p.slots)),
                     ",".join(spans[:RANGES_SHOWN]) + more or "-"])
    if rows:
        widths = [max(len(h), *(len(r[i]) for r in rows))
                  for i, h in enumerate(("ps", "slots", "ranges"))]
        for row in [["ps", "slots", "ranges"], *rows]:
            out.append("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    return out


def cost_rows(r: pb.GetLedgerResponse, prices: dict[str, float],
              default: float) -> tuple[list[tuple[str, float, float]], float]:
    """(label, worker-seconds, price per hour) rows and the total cost.

    The ledger lists worker-seconds per label, a worker under each of its key=value labels
    and unlabelled workers under '(no labels)'. Without prices every worker costs `default`:
    the total is the ledger's total worker-seconds (a worker with two labels is listed twice
    but paid once). With prices, the priced labels are paid at their price, and whatever
    worker time no priced label covers, unlabelled workers included, gets a line of its own
    at `default`, so no worker is dropped from the total (a worker under two priced labels
    is paid twice: price one label key)."""
    total_s = r.worker_seconds_total
    if not prices:
        rows = [(x.label, x.worker_seconds, default) for x in r.worker_seconds]
        return rows, total_s / 3600 * default
    rows = [(x.label, x.worker_seconds, prices[x.label]) for x in r.worker_seconds
            if x.label in prices]
    covered = sum(s for _, s, _ in rows)
    rest = max(0.0, total_s - covered)
    unlabelled = next((x.worker_seconds for x in r.worker_seconds
                       if x.label == NO_LABELS and NO_LABELS not in prices), 0.0)
    if unlabelled:
        rows.append((NO_LABELS, min(unlabelled, rest), default))
        rest -= min(unlabelled, rest)
    if rest > 1e-9:
        rows.append((OTHER_LABELS, rest, default))
    return rows, sum(s / 3600 * p for _, s, p in rows)
