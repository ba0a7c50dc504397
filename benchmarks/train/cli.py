"""bench_train: records/s of a CTR job through elastic-ps against a local torch loop.

    python scripts/bench_train.py                  # 3 rounds, batch 256 and 1024
    python scripts/bench_train.py --rounds 1 --records 50000 --batches 1024
    python scripts/bench_train.py --pin --rounds 3 --batches 1024 256
    python scripts/bench_train.py --model criteo --pin --runs local-sparse local-dense elastic-1w

`--model` (benchmarks/train/models.py): `ctr`, examples/ctr's model (4 fields, dim 8), or
`criteo`, the shape of most recommendation jobs (26 fields of 1,000 to 100,000 ids in one
table, 13 dense features, dim 16; issue 42).

Per round and batch size, alternating, the same data, model, optimizer and epochs: the local
loop over tensor batches with sparse embedding gradients (`local-sparse`: nn.Embedding(
sparse=True) and torch.optim.Adagrad, as a user writes it) and with dense ones
(`local-dense`: Adagrad then updates every row every step), the local record-by-record loop,
elastic-ps with 1 worker, with 2 workers (each elastic run: its own master and 2 PS). Printed:
records/s, the ratio to the faster local tensor loop of the same round (sparse or dense;
medians over rounds), the final held-out AUC of each run, and the step timeline of the elastic
runs (share of worker wall time reading, in the embedding's forward, waiting on pulls,
computing, pushing: benchmarks/train/worker.py). Floors (docs/benchmarks.md, issue 15):
1 worker >= 0.5x at batch 1024, >= 0.35x at batch 256, AUC within 0.005 of the local loop.

CPU, in every run: records per CPU-second of the whole job (workers + PS + master, over the
training span) against the local loop's (its thread's CPU time; the better of the two tensor
loops of the round), and each PS's CPU per record against that loop's `optimizer.step()` CPU
per record (the PS does that arithmetic).

`--pin` (issue 27): the trainer alone on CPU 0 (the local loops in this process, the elastic
workers), the master and PS on CPU 1 (`os.sched_setaffinity`): the deployment shape, where
servers do not share the trainer's cores. Floors then: 1 worker >= 0.65x at batch 1024 and
>= 0.5x at 256, the job's records per CPU-second >= 0.5x the local loop's, the PS's CPU per
record (both PS together) <= 2x the local optimizer's. On the Criteo shape the goals are
issue 42's: >= 0.8x at 1024, >= 0.6x at 256, records per CPU-second >= 0.6x.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks import report
from benchmarks.train import elastic, local, models

RUNS = ("local-sparse", "local-dense", "local-record", "elastic-1w", "elastic-2w",
        "elastic-1w-plain", "elastic-1w-backup", "elastic-1w-secure", "elastic-1w-inflight1",
        "elastic-1w-fresh", "elastic-1w-correct", "elastic-1w-stale", "elastic-2w-stale")
DEFAULT_RUNS = RUNS[:5]
LOCAL_TENSOR = ("local-sparse", "local-dense")  # a round's base: the faster of them
ALIASES = {"local-tensor": "local-dense"}  # the name before issue 42 (dense gradients)
FLOORS = {256: 0.35, 1024: 0.5}
PINNED_FLOORS = {256: 0.5, 1024: 0.65}  # issue 27 (goals 0.6x and 0.8x)
CRITEO_PINNED_GOALS = {256: 0.6, 1024: 0.8}  # issue 42
CPU_FLOOR = 0.5  # the job's records per CPU-second against the local loop's (goal 0.6x)
CRITEO_CPU_GOAL = 0.6
PS_CPU_CEILING = 2.0  # the PS's CPU per record against the local optimizer's (goal 1.5x)
TRAINER_CPUS, SERVER_CPUS = {0}, {1}  # --pin


def make_data(out: Path, records: int, test_records: int, seed: int = 2026,
              model: str = "ctr") -> None:
    models.make_data(model, out, records, test_records, seed)


def one(kind: str, data: str, tmp: Path, batch: int, epochs: int, lr: float,
        max_inflight: int, prefetch_ahead: int, pin: bool = False) -> dict:
    if kind.startswith("local-"):
        return _pinned(local.train, pin)(data, batch, epochs, lr, records=kind == "local-record",
                                         sparse=kind != "local-dense")
    workers = int(kind.split("-")[1][0])
    if kind.endswith("inflight1"):
        max_inflight = prefetch_ahead = 1
    secure = kind.endswith("secure")  # as a careful user runs it: TLS, a token, backups
    return elastic.run(data, tmp / f"{kind}-{batch}", batch, epochs, lr, workers=workers,
                       plain=kind.endswith("plain"),
                       backups=int(kind.endswith("backup") or secure), secure=secure,
                       max_inflight=max_inflight, prefetch_ahead=prefetch_ahead,
                       read_own_writes=kind.endswith("fresh"),
                       correct_own_writes=(True if kind.endswith("correct") else
                                           False if kind.endswith("stale") else None),
                       trainer_cpus=TRAINER_CPUS if pin else None,
                       server_cpus=SERVER_CPUS if pin else None)


def _pinned(fn, pin: bool):
    """`fn` run with this process on the trainer's CPU (when `pin`), then back where it was."""
    if not pin:
        return fn

    def run(*args, **kw):
        before = os.sched_getaffinity(0)
        os.sched_setaffinity(0, TRAINER_CPUS)
        try:
            return fn(*args, **kw)
        finally:
            os.sched_setaffinity(0, before)
    return run


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=models.MODELS, default="ctr",
                   help="ctr: examples/ctr's model; criteo: 26 fields, 13 dense, dim 16")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batches", type=int, nargs="+", default=[256, 1024])
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--test-records", type=int, default=50_000)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--max-inflight", type=int, default=2,
                   help="pushes in flight of the elastic workers (one I/O lane each)")
    p.add_argument("--prefetch-ahead", type=int, default=1,
                   help="batches ahead whose data the elastic workers prefetch: 2 lets two "
                   "steps' messages overlap, and the parameters then miss two pushes; 0 sends "
                   "each batch's request with the last push and waits for it")
    p.add_argument("--runs", nargs="+", default=list(DEFAULT_RUNS),
                   choices=RUNS + tuple(ALIASES),
                   help="elastic-1w-plain: one worker without prefetch, synchronous pushes; "
                   "elastic-1w-backup: one worker, a backup per PS index (--ps-replicas 1); "
                   "elastic-1w-secure: the same with TLS and a token on every call (the data "
                   "plane under CURVE); "
                   "elastic-1w-inflight1: one worker, one push in flight, prefetching one "
                   "batch ahead; "
                   "elastic-1w-fresh: one worker with PSClient(read_own_writes=True), each "
                   "step computing on every push of its own; "
                   "elastic-1w-correct: one worker with PSClient(correct_own_writes=True) "
                   "(--max-inflight), each step adding its last push's update to what it read "
                   "(the other runs take PSClient's default for it); "
                   "elastic-1w-stale, elastic-2w-stale: correct_own_writes=False, each step "
                   "missing its worker's last push (the default before issue 42)")
    p.add_argument("--pin", action="store_true",
                   help="the trainer (local loop, elastic workers) alone on CPU 0, the master "
                   "and PS on CPU 1")
    p.add_argument("--json", help="write every measurement here")
    a = p.parse_args(argv)
    a.runs = list(dict.fromkeys(ALIASES.get(r, r) for r in a.runs))
    if a.pin and not (TRAINER_CPUS | SERVER_CPUS) <= os.sched_getaffinity(0):
        p.error(f"--pin needs CPUs {sorted(TRAINER_CPUS | SERVER_CPUS)}; this process may run "
                f"on {sorted(os.sched_getaffinity(0))}")
    print(f"bench_train --model {a.model} on {report.machine()}, commit "
          f"{report.git_commit('worker_sdk')}"
          + (f"; pinned: trainer on CPU {sorted(TRAINER_CPUS)}, master and PS on CPU "
             f"{sorted(SERVER_CPUS)}" if a.pin else ""))
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        tmp = Path(tmp)
        data = str(tmp / "data")
        make_data(Path(data), a.records, a.test_records, model=a.model)
        for r in range(a.rounds):
            for batch in a.batches:
                for kind in a.runs:
                    got = one(kind, data, tmp / f"round{r}", batch, a.epochs, a.lr,
                              a.max_inflight, a.prefetch_ahead, a.pin)
                    results.setdefault(batch, {}).setdefault(kind, []).append(got)
                    print(f"round {r + 1} batch {batch:5d} {kind:20s} "
                          f"{got['records_per_s']:9.0f} records/s  AUC {got['auc']:.4f}"
                          + (_timeline(got) if "timeline" in got else "") + _cpu_line(got),
                          flush=True)
    criteo = a.model == "criteo"
    floors = (CRITEO_PINNED_GOALS if criteo else PINNED_FLOORS) if a.pin else FLOORS
    print(summary(results, floors, pinned=a.pin, auc_gap=0.002 if criteo else 0.005))
    print(cpu_summary(results, a.pin, CRITEO_CPU_GOAL if criteo else CPU_FLOOR))
    if a.json:
        report.write_json(a.json, {str(k): v for k, v in results.items()})
    return 0


def _timeline(got: dict) -> str:
    t = got["timeline"]
    return "  " + " ".join(f"{k} {t[k]:.0%}" for k in elastic.PHASES)


def job_cpu_s(got: dict) -> float:
    """CPU seconds of a run: the local loop's thread, or workers + PS + master."""
    if "worker_cpu_s" in got:
        return got["worker_cpu_s"] + got["master_cpu_s"] + sum(got["ps_cpu_s"])
    return got["cpu_s"]


def per_cpu_s(got: dict) -> float:
    return got["records"] / job_cpu_s(got)


def _cpu_line(got: dict) -> str:
    us = 1e6 / got["records"]
    if "worker_cpu_s" not in got:
        return (f"  CPU {got['cpu_s']:.2f} s ({got['cpu_s'] * us:.2f} us/record), optimizer "
                f"{got['optimizer_cpu_s']:.2f} s ({got['optimizer_cpu_s'] * us:.2f} us/record)"
                f", embedding forward {got['embedding_cpu_s'] * us:.2f} us/record")
    ps = " + ".join(f"{c:.2f}" for c in got["ps_cpu_s"])
    return (f"  CPU worker {got['worker_cpu_s']:.2f} s, PS {ps} s, master "
            f"{got['master_cpu_s']:.2f} s: {per_cpu_s(got):,.0f} records per "
            f"CPU-s; PS {' / '.join(f'{c * us:.2f}' for c in got['ps_cpu_s'])} us/record")


def bases(runs: dict, key) -> list[dict] | None:
    """Per round, the local tensor loop (sparse or dense gradients) that did best by `key`;
    None when neither ran."""
    got = [runs[k] for k in LOCAL_TENSOR if k in runs]
    if not got:
        return None
    return [max(same, key=key) for same in zip(*got)]


def _spread(values: list[float]) -> str:
    """The median, and the range when there are several."""
    med = statistics.median(values)
    return f"{med:.2f}" + (f" ({min(values):.2f}-{max(values):.2f})" if len(values) > 1 else "")


def cpu_summary(results: dict, pin: bool, floor: float = CPU_FLOOR) -> str:
    """The CPU table: per batch and run, medians of rounds; ratios paired by round with the
    local tensor loop of the same round that used the least CPU per record."""
    lines = ["", "| batch | run | records per CPU-second (median) | ratio to local (median, "
             "range) | worker CPU us/record | each PS's CPU us/record | both PS us/record / "
             "local optimizer's |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for batch, runs in sorted(results.items()):
        base = bases(runs, per_cpu_s)
        for kind, got in runs.items():
            per_cpu = statistics.median(per_cpu_s(g) for g in got)
            ratio = (_spread([per_cpu_s(g) / per_cpu_s(b) for g, b in zip(got, base)])
                     if base else "")
            if "worker_cpu_s" not in got[0]:
                opt = statistics.median(1e6 * g["optimizer_cpu_s"] / g["records"] for g in got)
                own = statistics.median(1e6 * g["cpu_s"] / g["records"] for g in got)
                lines.append(f"| {batch} | {kind} | {per_cpu:,.0f} | {ratio} | {own:.2f}"
                             f" (optimizer {opt:.2f}) | | |")
                continue
            worker = statistics.median(1e6 * g["worker_cpu_s"] / g["records"] for g in got)
            each = " / ".join(
                f"{statistics.median(1e6 * g['ps_cpu_s'][i] / g['records'] for g in got):.2f}"
                for i in range(len(got[0]["ps_cpu_s"])))
            ps_ratio = (_spread([sum(g["ps_cpu_s"]) / g["records"] * b["records"]
                                 / b["optimizer_cpu_s"] for g, b in zip(got, base)])
                        if base else "")
            lines.append(f"| {batch} | {kind} | {per_cpu:,.0f} | {ratio} | {worker:.2f} | "
                         f"{each} | {ps_ratio} |")
        if base and "elastic-1w" in runs:
            got = runs["elastic-1w"]
            ratio = statistics.median(per_cpu_s(g) / per_cpu_s(b) for g, b in zip(got, base))
            ps_ratio = statistics.median(sum(g["ps_cpu_s"]) / g["records"] * b["records"]
                                         / b["optimizer_cpu_s"] for g, b in zip(got, base))
            lines.append(f"|  | 1 worker{' (pinned)' if pin else ''}: records per CPU-second "
                         f">= {floor}x: {'met' if ratio >= floor else 'MISSED'} "
                         f"({ratio:.2f}x); PS CPU per record <= {PS_CPU_CEILING}x the local "
                         f"optimizer's: {'met' if ps_ratio <= PS_CPU_CEILING else 'MISSED'} "
                         f"({ps_ratio:.2f}x) | | | | | |")
    return "\n".join(lines)


def summary(results: dict, floors: dict = FLOORS, pinned: bool = False,
            auc_gap: float = 0.005) -> str:
    pinned = " (pinned)" if pinned else ""
    lines = ["", "| batch | run | records/s (median) | ratio to the faster local tensor loop "
             "(median of rounds, range) | AUC (median) | timeline: "
             + " / ".join(elastic.PHASES) + " |", "| --- | --- | --- | --- | --- | --- |"]
    for batch, runs in sorted(results.items()):
        base = bases(runs, lambda g: g["records_per_s"])
        for kind, got in runs.items():
            rate = statistics.median(g["records_per_s"] for g in got)
            ratio = (_spread([g["records_per_s"] / b["records_per_s"]
                              for g, b in zip(got, base)]) if base else "")
            auc = statistics.median(g["auc"] for g in got)
            tl = ""
            if "timeline" in got[0]:
                tl = " / ".join(f"{np.median([g['timeline'][k] for g in got]):.0%}"
                                for k in elastic.PHASES)
            lines.append(f"| {batch} | {kind} | {rate:,.0f} | {ratio} | {auc:.4f} | {tl} |")
        if base and "elastic-1w" in runs:
            ratio = statistics.median(g["records_per_s"] / b["records_per_s"]
                                      for g, b in zip(runs["elastic-1w"], base))
            gap = abs(statistics.median(g["auc"] for g in runs["elastic-1w"])
                      - statistics.median(g["auc"] for g in base))
            floor = floors.get(batch)
            if floor:
                lines.append(f"|  | floor 1 worker{pinned} >= {floor}x: "
                             f"{'met' if ratio >= floor else 'MISSED'} ({ratio:.2f}x); AUC gap "
                             f"{gap:.4f} (<= {auc_gap}: {'met' if gap <= auc_gap else 'MISSED'})"
                             " | | | | |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
