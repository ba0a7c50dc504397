"""What a checkpoint costs the PS: peak memory of writing and of restoring one, and how long
pulls wait while it is taken (issue 16: restore held ~3 copies; a snapshot stalled pulls).

    python -m benchmarks.ps.checkpoint_cost [--mb 200] [--dir DIR]

Builds a ParamStore of about `--mb` MB: a dense tensor with Adagrad (the tensor and its
optimizer state: half of it) and an embedding table with row-wise Adagrad (rows and
accumulators: the other half). Each phase runs in a fresh interpreter so that its peak RSS
is its own; the extra memory of a phase is its peak RSS (VmHWM, reset just before the phase)
minus the RSS just before it.

- write: `Checkpointer.write()` while one thread pulls the dense tensor and another pulls rows
  in a loop (neither copies: the pull's cost is its wait for locks); the longest pull is
  reported;
- restore: `Checkpointer.restore()` of that file into an empty store.

Run it in two trees (before and after a change) to compare: each writes and reads its own
format.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _reset_peak() -> None:
    """Start the peak RSS (VmHWM) over from the current RSS (Linux: clear_refs 5)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _peak_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _store(mb: int):
    import torch

    from pswire.tables import TableSpec
    from pswire.optimizers import make_config
    from ps.store.params import ParamStore

    quarter = mb * 2**20 // 4  # bytes of each: dense, its state, rows, their accumulators
    dim = 64
    rows = quarter // (4 * dim)
    s = ParamStore()
    s.init_parameters([("w", torch.zeros(quarter // 4))], make_config("adagrad", lr=0.1),
                      [(TableSpec("e", dim), None)])
    s.push("c", 1, [("w", torch.ones(quarter // 4))], [0])
    for start in range(0, rows, 100_000):
        ids = torch.arange(start, min(rows, start + 100_000))
        s.push_rows("c", 2 + start, "e", ids, torch.ones(ids.numel(), dim))
    return s


def _write(directory: str, mb: int) -> dict:
    import torch

    from ps.checkpoint import CheckpointDir, Checkpointer

    s = _store(mb)
    ck = Checkpointer(s, CheckpointDir(directory, 0, 1, keep=1))
    ck.restore()
    stop = threading.Event()
    waits = {"dense": 0.0, "rows": 0.0}

    def pulls(kind: str) -> None:
        ids = torch.arange(0, 4096)
        while not stop.is_set():
            started = time.perf_counter()
            if kind == "dense":
                s.pull(["w"], lambda t: (t, None))  # no copy: only the wait for the lock
            else:
                s.pull_rows("e", ids)
            waits[kind] = max(waits[kind], time.perf_counter() - started)
            time.sleep(0.001)

    threads = [threading.Thread(target=pulls, args=(k,)) for k in waits]
    for t in threads:
        t.start()
    time.sleep(0.3)
    waits.update(dense=0.0, rows=0.0)
    _reset_peak()
    before = _rss_mb()
    started = time.perf_counter()
    info = ck.write()
    seconds = time.perf_counter() - started
    stop.set()
    for t in threads:
        t.join()
    return {"phase": "write", "file_mb": round(info.bytes / 2**20, 1),
            "seconds": round(seconds, 2), "rss_before_mb": round(before),
            "extra_peak_mb": round(_peak_mb() - before),
            "longest_dense_pull_ms": round(waits["dense"] * 1000, 1),
            "longest_rows_pull_ms": round(waits["rows"] * 1000, 1)}


def _restore(directory: str) -> dict:
    import torch

    from ps.checkpoint import CheckpointDir, Checkpointer
    from ps.store.params import ParamStore

    torch.optim.Adagrad([torch.zeros(1)])  # torch.optim's one-time imports (~70 MB) first
    s = ParamStore()
    _reset_peak()
    before = _rss_mb()
    started = time.perf_counter()
    Checkpointer(s, CheckpointDir(directory, 0, 1)).restore()
    seconds = time.perf_counter() - started
    return {"phase": "restore", "seconds": round(seconds, 2), "rss_before_mb": round(before),
            "extra_peak_mb": round(_peak_mb() - before), "rss_after_mb": round(_rss_mb())}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mb", type=int, default=200)
    p.add_argument("--dir", default="")
    p.add_argument("--phase", choices=("write", "restore"), default=None)
    a = p.parse_args(argv)
    if a.phase == "write":
        print(json.dumps(_write(a.dir, a.mb)))
        return
    if a.phase == "restore":
        print(json.dumps(_restore(a.dir)))
        return
    with tempfile.TemporaryDirectory(dir=a.dir or None) as d:
        for phase in ("write", "restore"):
            out = subprocess.run([sys.executable, "-m", "benchmarks.ps.checkpoint_cost",
                                  "--phase", phase, "--dir", d, "--mb", str(a.mb)],
                                 check=True, capture_output=True, text=True).stdout
            print(out.strip(), flush=True)


if __name__ == "__main__":
    main()
