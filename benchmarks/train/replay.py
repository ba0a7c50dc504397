"""Capture a bench worker's PS requests once, then replay them into fresh stores: the PS's cost
per Step without the network, the worker or the neighbours (issue 27's method).

    python -m benchmarks.train.replay capture --batch 256 --out steps-256.pkl [--model criteo]
        [--correct-own-writes]
    python -m benchmarks.train.replay replay steps-256.pkl [--repeat 5] [--profile OUT.pstats]

`capture` runs a master and 2 PS (as bench_train) and one bench worker in this process with
`pswire.connection.Connection.send` wrapped: every request's frames and the PS index it went to
are written to `--out` (`--correct-own-writes`: a worker that corrects its reads, with one push
in flight, so its row pulls ask for the Adagrad state of marked rows). `replay` feeds them, in the order sent, to
`DataPlane(build_chain(ParamStore(i, 2))).handle` of two fresh stores in one process (the same
handler chain a PS runs, without sockets and threads) and prints the thread CPU per Step
request (median of `--repeat` replays), split by PS; `--profile` writes a cProfile of one more
replay. Deterministic enough to compare two commits side by side on a busy machine.
"""
from __future__ import annotations

import argparse
import cProfile
import pickle
import statistics
import sys
import tempfile
import time
from pathlib import Path

import zmq


def capture(batch: int, out: Path, records: int, epochs: int, model: str = "ctr",
            correct: bool = False) -> None:
    from benchmarks.train.cli import make_data
    from cluster.launch import Launcher
    from pswire import connection
    from worker_sdk.ps import exchange

    sent: list[tuple[int, list[bytes]]] = []
    plain_send = connection.Connection.send
    plain_exchange_send = exchange.Exchange.send

    def send(self, parts):
        sent.append((getattr(self, "_capture_index", -1),
                     [p.bytes if hasattr(p, "bytes") else bytes(p) for p in parts]))
        return plain_send(self, parts)

    def exchange_send(self, index, req, frames, wire):
        self._conns[index]._capture_index = index
        return plain_exchange_send(self, index, req, frames, wire)

    connection.Connection.send = send
    exchange.Exchange.send = exchange_send
    with tempfile.TemporaryDirectory(prefix="replay-") as tmp:
        tmp = Path(tmp)
        make_data(tmp / "data", records, 1000, model=model)
        with Launcher(tmp / "run") as launcher:
            master = launcher.master()
            for i in range(2):
                launcher.ps(master.address, index=i, num_ps=2, checkpoint_dir=f"ps{i}")
            from benchmarks.train import worker
            mode = ["--max-inflight", "1", "--correct-own-writes"] if correct else [
                "--max-inflight", "2"]
            worker.main(["--master", master.address, "--data", str(tmp / "data"),
                         "--batch", str(batch), "--epochs", str(epochs), *mode,
                         "--out", str(tmp / "w.json")])
    out.write_bytes(pickle.dumps(sent))
    print(f"captured {len(sent)} requests to {out}")


def _stores():
    from ps.dataplane import DataPlane, build_chain
    from ps.store.params import ParamStore

    stores = [ParamStore(i, 2) for i in range(2)]
    return stores, [DataPlane(build_chain(s)) for s in stores]


def replay_once(sent, profile: cProfile.Profile | None = None) -> dict[int, list[float]]:
    """Thread CPU seconds of each Step request, per PS index."""
    import torch

    torch.set_num_threads(1)
    stores, planes = _stores()
    cpu: dict[int, list[float]] = {0: [], 1: []}
    for index, frames in sent:
        parts = [zmq.Frame(f) for f in frames]
        is_step = _is_step(frames[0])
        t0 = time.thread_time()
        if profile is not None:
            profile.enable()
        planes[index].handle(parts)
        if profile is not None:
            profile.disable()
        if is_step:
            cpu[index].append(time.thread_time() - t0)
        for s in stores:
            for d in s.dense.values():
                d.pins = []  # no ZeroMQ send completes the trackers here
    return cpu


def _is_step(header: bytes) -> bool:
    from protos import ps_pb2

    return ps_pb2.DataRequest.FromString(header).WhichOneof("body") == "step"


def replay(path: Path, repeat: int, profile_out: str | None) -> None:
    sent = pickle.loads(path.read_bytes())
    runs = [replay_once(sent) for _ in range(repeat)]
    for index in (0, 1):
        totals = [sum(r[index]) for r in runs]
        n = len(runs[0][index])
        print(f"PS {index}: {n} Steps, {statistics.median(totals) / max(n, 1) * 1e6:.0f} us per "
              f"Step (median of {repeat}; min {min(totals) / max(n, 1) * 1e6:.0f})")
    both = [sum(r[0]) + sum(r[1]) for r in runs]
    print(f"both PS: {statistics.median(both):.3f} s CPU over the replay")
    if profile_out:
        prof = cProfile.Profile()
        replay_once(sent, prof)
        prof.dump_stats(profile_out)
        print(f"profile of one replay: {profile_out}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("capture")
    c.add_argument("--batch", type=int, default=256)
    c.add_argument("--records", type=int, default=50_000)
    c.add_argument("--epochs", type=int, default=2)
    c.add_argument("--model", choices=("ctr", "criteo"), default="ctr")
    c.add_argument("--correct-own-writes", action="store_true")
    c.add_argument("--out", required=True, type=Path)
    r = sub.add_parser("replay")
    r.add_argument("file", type=Path)
    r.add_argument("--repeat", type=int, default=5)
    r.add_argument("--profile")
    a = p.parse_args(argv)
    if a.cmd == "capture":
        capture(a.batch, a.out, a.records, a.epochs, a.model, a.correct_own_writes)
    else:
        replay(a.file, a.repeat, a.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
