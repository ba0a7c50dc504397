"""Profile one bench worker (benchmarks/train/worker.py) in this process: where its CPU goes.

    python -m benchmarks.train.profile --model criteo --batch 256 --out worker-256.pstats

Starts a master and 2 PS (as bench_train's elastic runs), makes the click log, and runs the
worker here, its training loop under cProfile (`--out`; the top functions by own time are
printed). Times are the loop thread's CPU time unless `--wall`. Profiling slows Python code
several times over, and native code not at all: read the shares, not the seconds.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=("ctr", "criteo"), default="criteo")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--records", type=int, default=50_000)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--wall", dest="cpu", action="store_false",
                   help="time by the wall clock (default: the thread's CPU time)")
    p.add_argument("--max-inflight", type=int, default=2)
    p.add_argument("--correct-own-writes", action="store_true",
                   help="the worker's PSClient(correct_own_writes=True)")
    p.add_argument("--pin", action="store_true",
                   help="the worker (this process) on CPU 0, the master and PS on CPU 1, as "
                   "bench_train --pin runs them: a worker sharing its core with the servers "
                   "finds its caches cold after each switch, and its code looks slower")
    p.add_argument("--out", help="write the profile here (default: no profiler; print the "
                   "loop thread's CPU seconds only, the number to compare between changes)")
    a = p.parse_args(argv)
    from benchmarks.train import worker
    from benchmarks.train.cli import SERVER_CPUS, TRAINER_CPUS
    from benchmarks.train.models import make_data
    from cluster.launch import Launcher

    with tempfile.TemporaryDirectory(prefix="profile-") as tmp:
        tmp = Path(tmp)
        make_data(a.model, tmp / "data", a.records, 1000)
        with Launcher(tmp / "run") as launcher:
            cpus = SERVER_CPUS if a.pin else None
            master = launcher.master(cpus=cpus)
            for i in range(2):
                launcher.ps(master.address, index=i, num_ps=2, checkpoint_dir=f"ps{i}",
                            cpus=cpus)
            if a.pin:
                os.sched_setaffinity(0, TRAINER_CPUS)
            # thread CPU time, not wall time: a busy machine's preemptions are not the code's
            prof = cProfile.Profile(time.thread_time) if a.cpu else cProfile.Profile()
            spent = []
            if a.out:
                worker.ON_START, worker.ON_END = prof.enable, prof.disable
            else:
                worker.ON_START = lambda: spent.append(-time.thread_time())
                worker.ON_END = lambda: spent.append(time.thread_time())
            worker.main([
                "--master", master.address, "--data", str(tmp / "data"), "--batch",
                str(a.batch), "--epochs", str(a.epochs), "--max-inflight",
                str(a.max_inflight),
                "--correct-own-writes", "on" if a.correct_own_writes else "off",
                "--out", str(tmp / "w.json")])
            print((tmp / "w.json").read_text())
    if not a.out:
        print(f"loop thread CPU {sum(spent):.3f} s, {sum(spent) / a.records * 1e6 / a.epochs:.2f} "
              "us/record")
        return 0
    prof.dump_stats(a.out)
    pstats.Stats(a.out).sort_stats("tottime").print_stats(a.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
