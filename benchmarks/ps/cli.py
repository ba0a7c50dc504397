"""Benchmark the PS data plane against raw grpcio and a torch.distributed.rpc PS, side by side.

    python scripts/bench_ps.py                       # the full table (a few minutes)
    python scripts/bench_ps.py --seconds 1 --rounds 1 --sizes 1M --workers 1   # a quick look

Dense: each worker process loops `pull` all parameters + `push` a gradient of the same size
(one round trip moves 2 x 4 bytes x parameters) against one server process, for a 1 M and a
10 M parameter model (4 weight matrices + 4 biases) with 1 and 2 workers. For each
configuration the systems run one after another, and the rounds alternate them again, so they
share the machine's conditions:

- `elastic-ps`: the real `python -m ps --standalone`, and `worker_sdk.ps.data_client.DataClient` (SGD applied
  per push with torch.optim under per-tensor locks, zero-copy ZeroMQ frames);
- `grpc-raw`: grpcio moving the same bytes, raw bytes methods (no protobuf), 1 MiB chunks
  streamed both ways; the server keeps the pushed bytes in a buffer and applies nothing;
- `rpc-default`, `rpc-tcp`: a `torch.distributed.rpc` PS in the style of PyTorch's
  parameter-server tutorial (an RRef to a ParameterServer object, `rpc_sync` pull and push,
  SGD applied with torch.optim under a lock), with TensorPipe's default transports and
  channels, and with `_transports=["uv"]` (TCP);
- `rpc-tcp-basic` (with --strict-tcp): also `_channels=["basic"]`, so tensor bytes travel
  through the TCP transport too rather than a same-machine channel.

Embedding: one worker loops `pull_rows` + `push_rows` at batch 4096, dim 64, ids uniform in
[0, 10^6), against elastic-ps with row-wise Adagrad; rows/s counts each row once per pair.

Each process is a fresh interpreter (`python -m benchmarks.ps.role --role ...`); workers warm up, meet at a file barrier,
run for `--seconds`, and print their count as JSON.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
from pathlib import Path

from benchmarks.ps.elastic import run_elastic
from benchmarks.ps.grpc_raw import run_grpc
from benchmarks.ps.model import CHUNK, model_shapes, numel, parse_size
from benchmarks.ps.rpc import run_rpc
from benchmarks.report import write_json

DENSE_SYSTEMS = ["elastic-ps", "elastic-ps-tcp", "grpc-raw", "rpc-default", "rpc-tcp"]
RATIOS = [("elastic-ps", "grpc-raw"), ("elastic-ps", "rpc-tcp"), ("elastic-ps", "rpc-default"),
          ("elastic-ps-tcp", "grpc-raw"), ("elastic-ps-tcp", "rpc-tcp"),
          ("elastic-ps-tcp", "rpc-tcp-basic")]
FLOORS = [("elastic-ps", "grpc-raw", 2.0), ("elastic-ps", "rpc-tcp", 0.8)]


def dense_round(system: str, work: Path, params: int, workers: int, seconds: float) -> float:
    if system.startswith("elastic-ps"):
        # "elastic-ps+threads=0+torch-threads=2" runs the PS with those flags (A/B runs)
        flags = [f"--{f.replace('=', ' ', 1)}".split(" ") for f in system.split("+")[1:]]
        return run_elastic(work, params, workers, seconds,
                           ps_flags=[x for pair in flags for x in pair],
                           ipc=not system.startswith("elastic-ps-tcp"))
    if system.startswith("grpc-raw"):
        chunk = system.split("+chunk=")[1] if "+chunk=" in system else str(CHUNK)
        return run_grpc(work, params, workers, seconds, int(chunk))
    transport = {"rpc-default": "default", "rpc-tcp": "tcp", "rpc-tcp-basic": "tcp-basic"}[system]
    return run_rpc(work, params, workers, seconds, transport)



def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--batch", type=int, default=4096, help="embedding batch (ids per call)")
    p.add_argument("--dim", type=int, default=64, help="embedding dimension")
    p.add_argument("--seconds", type=float, default=2.0, help="measured seconds per run")
    p.add_argument("--rounds", type=int, default=2, help="rounds alternating the systems")
    p.add_argument("--sizes", default="1M,10M", help="dense model sizes (parameters)")
    p.add_argument("--workers", default="1,2", help="worker process counts")
    p.add_argument("--systems", default=",".join(DENSE_SYSTEMS), help="dense systems to run")
    p.add_argument("--strict-tcp", action="store_true",
                   help="also run rpc-tcp-basic (TCP transport and the basic channel only)")
    p.add_argument("--no-embedding", action="store_true", help="skip the embedding benchmark")
    p.add_argument("--json", help="write all measurements to this file")
    args = p.parse_args(argv)

    systems = [s for s in args.systems.split(",") if s]
    if args.strict_tcp and "rpc-tcp-basic" not in systems:
        systems.append("rpc-tcp-basic")
    sizes = [parse_size(s) for s in args.sizes.split(",") if s]
    worker_counts = [int(w) for w in args.workers.split(",") if w]
    work = Path(tempfile.mkdtemp(prefix="bench_ps-"))
    print(f"# bench_ps: {os.cpu_count()} cpus, {args.seconds}s x {args.rounds} rounds per "
          f"system and configuration; logs in {work}", flush=True)
    results: dict = {"dense": [], "embedding": []}
    floors: list[tuple] = []
    header = f"{'model':>6} {'workers':>7} {'system':<14} {'rt/s':>9} {'MB/s':>9}  rounds (rt/s)"
    print(header)
    for params in sizes:
        shapes = model_shapes(params)
        nbytes = sum(numel(s) for _, s in shapes) * 4
        for workers in worker_counts:
            per_system: dict[str, list[float]] = {s: [] for s in systems}
            for r in range(args.rounds):
                order = systems if r % 2 == 0 else list(reversed(systems))
                for system in order:
                    try:
                        rate = dense_round(system, work, params, workers, args.seconds)
                    except Exception as exc:  # noqa: BLE001 - report and go on
                        print(f"# {system} {params} x{workers} failed: {exc}", flush=True)
                        rate = float("nan")
                    per_system[system].append(rate)
            for system in systems:
                rates = per_system[system]
                mean = statistics.fmean(rates)
                mbs = mean * 2 * nbytes / 1e6
                label = f"{params / 1e6:g}M"
                print(f"{label:>6} {workers:>7} {system:<14} {mean:>9.1f} {mbs:>9.0f}  "
                      f"{' '.join(f'{x:.1f}' for x in rates)}", flush=True)
                results["dense"].append({"params": params, "bytes": nbytes, "workers": workers,
                                         "system": system, "rt_per_s": rates, "mean": mean,
                                         "MB_per_s": mbs})
            mean = {k: statistics.fmean(v) for k, v in per_system.items()}
            ratios = [f"{a}/{b} {mean[a] / mean[b]:.2f}x" for a, b in RATIOS
                      if a in mean and b in mean]
            if ratios:
                print(f"{'':>6} {'':>7} {', '.join(ratios)}", flush=True)
            for a, b, floor in FLOORS:
                if a in mean and b in mean:
                    ratio = mean[a] / mean[b]
                    floors.append((f"{params / 1e6:g}M x{workers}", a, b, ratio, floor))

    if floors:
        print("\n# floors (ratios of the means measured side by side above)")
        for config, a, b, ratio, floor in floors:
            verdict = "ok" if ratio >= floor else "BELOW"
            print(f"{config:>9} {a}/{b} = {ratio:.2f}x (floor {floor}x) {verdict}")

    if not args.no_embedding:
        print(f"\n# embedding PullRows+PushRows, batch {args.batch}, dim {args.dim}, "
              "row-wise adagrad")
        for workers in (1, 2):
            rates = []
            for _ in range(args.rounds):
                calls = run_elastic(work, 0, workers, args.seconds, role="embedding",
                                    extra_worker=["--batch", str(args.batch),
                                                  "--dim", str(args.dim)])
                rates.append(calls * args.batch)
            mean = statistics.fmean(rates)
            print(f"embedding workers={workers}: {mean:,.0f} rows/s "
                  f"({mean / args.batch:.0f} pull+push pairs/s; rounds "
                  f"{', '.join(f'{x:,.0f}' for x in rates)})", flush=True)
            results["embedding"].append({"workers": workers, "rows_per_s": rates, "mean": mean})
    if args.json:
        write_json(args.json, results)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
