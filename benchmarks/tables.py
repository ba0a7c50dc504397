"""Bounded embedding tables: memory at a cap, lookup cost, accuracy under eviction, deltas.

    python scripts/bench_tables.py            # the issue's sizes (a few minutes)
    python scripts/bench_tables.py --quick    # a tenth of them (about a minute)

Four measurements, each on a ParamStore in this process (the PS's state and request path,
without the network, which does not change with the table's size):

- memory: a Zipf stream over `--distinct` ids (every one of them appears) into a table capped
  at `--cap` rows, in a child process: its resident memory at the end against an empty PS's
  plus the table's bytes (`Table.nbytes`: rows, metadata, index). Target: within 1.5x.
- latency: one request (pull, then push, of `--batch` ids, 5 % of them new) against an
  unbounded table of 10 k and of `--large` rows. Target: flat.
- auc: online logistic regression on a drifting stream (each field's ids live in a window that
  moves: ids appear and vanish), scored before each batch trains (progressive AUC over the
  second half), capped at 2, 1 and 0.5 times the ids live at a time against unbounded.
  Target: within 0.005.
- delta: a delta checkpoint after 1 % of a `--delta-rows` table changed against a full one,
  and the files of a small capped table with admission (its 2 MiB sketch) under a stream,
  bytes and seconds. Target: at most 5 %.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

from ps.checkpoint import CheckpointDir, Checkpointer
from pswire.tables import TableSpec
from ps.store.limits import Limits
from pswire.optimizers import make_config
from ps.store.params import ParamStore

_MULT = np.uint64(0x9E3779B97F4A7C15)


def _scramble(x: np.ndarray) -> np.ndarray:
    """A fixed bijection of [0, 2**52): ranks -> ids that are not contiguous."""
    with np.errstate(over="ignore"):
        return ((x.astype(np.uint64) * _MULT) & np.uint64(2**52 - 1)).astype(np.int64)


def _store(spec: TableSpec, optimizer: str = "sgd", lr: float = 0.05) -> ParamStore:
    store = ParamStore(limits=Limits(max_new_rows=1 << 30))
    store.init_parameters([("bias", torch.zeros(1))], make_config(optimizer, lr=lr),
                          [(spec, None)])
    return store


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# -- memory -----------------------------------------------------------------------------------

def memory(distinct: int, cap: int, batch: int, dim: int, seed: int = 0) -> dict:
    """(in a child) Stream every one of `distinct` ids, Zipf-popular, through a capped table."""
    rng = np.random.default_rng(seed)
    # an empty PS that has served requests once (code paths warm), before the table's rows
    warm = _store(TableSpec("warm", dim))
    for k in range(3):
        ids = torch.from_numpy(np.unique(_scramble(np.arange(batch))))
        warm.pull_rows("warm", ids)
        warm.push_rows("bench", k + 1, "warm", ids, torch.full((ids.numel(), dim), 0.01))
    del warm
    store = _store(TableSpec("emb", dim, max_rows=cap))
    table = store.tables["emb"]
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    empty = _rss()
    fresh_per_batch = batch // 2
    start, seq, seen = time.perf_counter(), 0, 0
    while seen < distinct:
        new = np.arange(seen, min(distinct, seen + fresh_per_batch))
        seen += new.size
        hot = np.minimum(rng.zipf(1.1, batch - new.size), seen) - 1  # popular: low ranks
        ids = torch.from_numpy(np.unique(_scramble(np.concatenate([new, hot]))))
        store.pull_rows("emb", ids)
        seq += 1
        store.push_rows("bench", seq, "emb", ids, torch.full((ids.numel(), dim), 0.01))
        assert len(table) <= cap
    end = _rss()
    # what the allocator keeps of freed request buffers (glibc returns it on malloc_trim)
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    trimmed = _rss()
    return {"distinct": distinct, "cap": cap, "rows": len(table), "requests": seq,
            "seconds": round(time.perf_counter() - start, 1), "empty_ps_mib": empty / 2**20,
            "ps_mib": end / 2**20, "trimmed_ps_mib": trimmed / 2**20,
            "table_mib": table.nbytes / 2**20, "ratio": (end - empty) / table.nbytes,
            "trimmed_ratio": (trimmed - empty) / table.nbytes,
            "evicted": int(sum(table.evicted.values()))}


# -- latency ----------------------------------------------------------------------------------

def latency(rows: int, batch: int, dim: int, requests: int, seed: int = 1) -> dict:
    store = _store(TableSpec("emb", dim))
    step = 1 << 16
    for start in range(0, rows, step):
        store.pull_rows("emb", torch.from_numpy(_scramble(np.arange(start, min(rows, start + step)))))
    rng = np.random.default_rng(seed)
    times, next_new = [], rows
    for k in range(requests):
        old = rng.integers(0, rows, batch - batch // 20)
        new = np.arange(next_new, next_new + batch // 20)
        next_new += new.size
        ids = torch.from_numpy(np.unique(_scramble(np.concatenate([old, new]))))
        grads = torch.full((ids.numel(), dim), 0.01)
        t0 = time.perf_counter()
        store.pull_rows("emb", ids)
        store.push_rows("bench", k + 1, "emb", ids, grads)
        times.append(time.perf_counter() - t0)
    times = np.array(times[requests // 10:]) * 1e3  # the first ones warm up
    return {"rows": rows, "batch": batch, "p50_ms": float(np.median(times)),
            "p99_ms": float(np.percentile(times, 99)), "mean_ms": float(times.mean())}


# -- accuracy on a drifting stream ------------------------------------------------------------

def auc_score(labels: np.ndarray, scores: np.ndarray) -> float:
    """ROC AUC by ranks (Mann-Whitney), ties averaged."""
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(scores.size)
    s = scores[order]
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    ends = np.r_[starts[1:], s.size]
    for a, b in zip(starts, ends):
        ranks[order[a:b]] = (a + b + 1) / 2
    pos = labels.sum()
    neg = labels.size - pos
    return float((ranks[labels == 1].sum() - pos * (pos + 1) / 2) / (pos * neg))


def drifting_auc(cap: int, batches: int, batch: int, window: int, drift: int, fields: int,
                 seed: int = 2) -> dict:
    """Online logistic regression, one scalar weight per (field, id); ids of each field come
    from a window [t * drift, t * drift + window) of its id space, Zipf-popular within it,
    with a true weight fixed per id."""
    rng = np.random.default_rng(seed)
    store = _store(TableSpec("emb", 1, initializer="zeros", max_rows=cap), "adagrad", 0.1)
    table = store.tables["emb"]
    labels, scores = [], []
    for t in range(batches):
        base = t * drift
        ranks = np.minimum(rng.zipf(1.2, (batch, fields)), window) - 1
        local = (base + ranks * 7919) % window + base  # popular ids spread over the window
        ids = local * fields + np.arange(fields)[None, :]  # each field its own ids
        true = _true_weight(ids)
        p = 1 / (1 + np.exp(-(true.sum(axis=1) - 0.5)))
        y = (rng.random(batch) < p).astype(np.float32)
        flat = ids.ravel()
        unique, inverse = np.unique(flat, return_inverse=True)
        rows, _ = store.pull_rows("emb", torch.from_numpy(unique))
        w = rows[:, 0].numpy()[inverse].reshape(batch, fields)
        logit = w.sum(axis=1)
        if t >= batches // 2:
            labels.append(y)
            scores.append(logit)
        g = (1 / (1 + np.exp(-logit)) - y) / batch  # d loss / d logit
        grads = np.zeros(unique.size, dtype=np.float32)
        np.add.at(grads, inverse, np.repeat(g, fields))
        store.push_rows("bench", t + 1, "emb", torch.from_numpy(unique),
                        torch.from_numpy(grads[:, None]))
    return {"cap": cap, "rows": len(table), "evicted": int(sum(table.evicted.values())),
            "auc": auc_score(np.concatenate(labels), np.concatenate(scores))}


def _true_weight(ids: np.ndarray) -> np.ndarray:
    """A fixed N(0, 1) weight per id (from its bits: no table of them)."""
    with np.errstate(over="ignore"):
        h = ids.astype(np.uint64) * _MULT
        h ^= h >> np.uint64(31)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(29)
    u1 = ((h >> np.uint64(11)).astype(np.float64) + 1) / 2**53
    u2 = ((h & np.uint64(2**20 - 1)).astype(np.float64) + 0.5) / 2**20
    return np.sqrt(-2 * np.log(u1)) * np.cos(2 * np.pi * u2)


# -- delta against full -----------------------------------------------------------------------

def delta_cost(rows: int, dim: int, changed: float = 0.01) -> dict:
    store = _store(TableSpec("emb", dim), "adagrad", 0.1)
    step = 1 << 16
    for start in range(0, rows, step):
        store.pull_rows("emb", torch.arange(start, min(rows, start + step)))
    with tempfile.TemporaryDirectory() as d:
        cp = Checkpointer(store, CheckpointDir(d, 0, 1))
        full = cp.write()
        ids = torch.from_numpy(np.random.default_rng(3).choice(rows, int(rows * changed),
                                                                 replace=False))
        store.push_rows("bench", 1, "emb", torch.sort(ids).values,
                        torch.full((ids.numel(), dim), 0.01))
        delta = cp.write(delta=True)
        full2 = cp.write()
    return {"rows": rows, "changed": ids.numel(), "full_bytes": full.bytes,
            "full_s": min(full.seconds, full2.seconds), "delta_bytes": delta.bytes,
            "delta_s": delta.seconds, "bytes_ratio": delta.bytes / full.bytes,
            "seconds_ratio": delta.seconds / min(full.seconds, full2.seconds)}


def sketch_delta_cost(cap: int, dim: int, files: int = 8, steps: int = 20) -> dict:
    """A small capped table with admission (`admit_after=2`: a 2 MiB sketch) under a Zipf
    stream: the bytes of each file written as a delta where one is due, against the full
    first one (a full file where a delta is no smaller, which the log line says)."""
    store = _store(TableSpec("emb", dim, max_rows=cap, admit_after=2), "adagrad", 0.1)
    rng = np.random.default_rng(5)
    written, seq = [], 0
    with tempfile.TemporaryDirectory() as d:
        cp = Checkpointer(store, CheckpointDir(d, 0, 1))
        for _ in range(files):
            for _ in range(steps):
                seq += 1
                ids = torch.from_numpy(np.unique(rng.zipf(1.2, 256) % 100_000))
                store.pull_rows("emb", ids)
                store.push_rows("bench", seq, "emb", ids, torch.full((ids.numel(), dim), 0.01))
            info = cp.write(delta=True)
            written.append({"delta": info.delta, "bytes": info.bytes})
    full = written[0]["bytes"]
    deltas = [w["bytes"] / full for w in written[1:] if w["delta"]]
    return {"cap": cap, "files": written, "deltas": len(deltas),
            "max_ratio": max(deltas, default=0.0)}


# -- the command ------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a tenth of the sizes")
    p.add_argument("--only", choices=("memory", "latency", "auc", "delta"), action="append")
    p.add_argument("--distinct", type=int, default=5_000_000)
    p.add_argument("--cap", type=int, default=100_000)
    p.add_argument("--batch", type=int, default=4096)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--large", type=int, default=1_000_000, help="rows of the large table")
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--auc-batches", type=int, default=3000)
    p.add_argument("--auc-window", type=int, default=20_000, help="live ids per field")
    p.add_argument("--auc-cap", type=int, default=0,
                   help="rows of the capped table (0: 2, 1 and 0.5 times the live ids)")
    p.add_argument("--delta-rows", type=int, default=1_000_000)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--json", help="also write the results here")
    a = p.parse_args(argv)
    if a.quick:
        a.distinct, a.cap, a.large, a.delta_rows = 500_000, 10_000, 100_000, 100_000
        a.auc_batches, a.requests = 600, 100
    only = set(a.only or ("memory", "latency", "auc", "delta"))
    torch.set_num_threads(1)
    if a.child:
        print(json.dumps(memory(a.distinct, a.cap, a.batch, a.dim)))
        return 0
    out: dict = {}
    if "memory" in only:
        child = subprocess.run([sys.executable, "-m", "benchmarks.tables", "--child",
                                "--distinct", str(a.distinct), "--cap", str(a.cap),
                                "--batch", str(a.batch), "--dim", str(a.dim)],
                               capture_output=True, text=True, check=True)
        out["memory"] = m = json.loads(child.stdout.strip().splitlines()[-1])
        print(f"memory: {m['distinct']} distinct ids, cap {m['cap']}: {m['rows']} rows, PS "
              f"{m['ps_mib']:.0f} MiB = empty {m['empty_ps_mib']:.0f} MiB + "
              f"{m['ratio']:.2f} x table {m['table_mib']:.1f} MiB; after malloc_trim "
              f"{m['trimmed_ps_mib']:.0f} MiB = empty + {m['trimmed_ratio']:.2f} x table "
              f"({m['seconds']} s, {m['requests']} requests)", flush=True)
    if "latency" in only:
        out["latency"] = []
        for rows in (10_000, a.large):
            r = latency(rows, a.batch, a.dim, a.requests)
            out["latency"].append(r)
            print(f"latency at {rows} rows: p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms "
                  f"(pull + push of {a.batch} ids)", flush=True)
    if "auc" in only:
        fields = 4
        live = fields * a.auc_window
        drift = max(1, a.auc_window // 200)  # a window's ids are all replaced in 200 batches
        unbounded = drifting_auc(0, a.auc_batches, 1024, a.auc_window, drift, fields)
        out["auc"] = {"unbounded": unbounded, "capped": []}
        print(f"auc: unbounded {unbounded['auc']:.4f} ({unbounded['rows']} rows; {live} ids "
              "live at a time)", flush=True)
        caps = [a.auc_cap] if a.auc_cap else [int(f * live) for f in (2, 1, 0.5)]
        for cap in caps:
            capped = drifting_auc(cap, a.auc_batches, 1024, a.auc_window, drift, fields)
            capped["difference"] = unbounded["auc"] - capped["auc"]
            out["auc"]["capped"].append(capped)
            print(f"auc: capped at {cap} rows {capped['auc']:.4f} ({capped['evicted']} "
                  f"evicted): {capped['difference']:+.4f} below unbounded", flush=True)
    if "delta" in only:
        out["delta"] = d = delta_cost(a.delta_rows, a.dim)
        print(f"delta at 1 % of {d['rows']} rows changed: {d['delta_bytes']} bytes in "
              f"{d['delta_s']:.3f} s against full {d['full_bytes']} bytes in {d['full_s']:.3f} s"
              f" ({100 * d['bytes_ratio']:.2f} % of the bytes, {100 * d['seconds_ratio']:.1f} % "
              "of the time)", flush=True)
        out["sketch_delta"] = k = sketch_delta_cost(1000, a.dim)
        print(f"deltas of a capped table ({k['cap']} rows) with admit_after=2: "
              f"{k['deltas']} of {len(k['files']) - 1} files after the first are deltas, at "
              f"most {100 * k['max_ratio']:.1f} % of its {k['files'][0]['bytes']} bytes",
              flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
