#!/usr/bin/env python3
"""Benchmark the PS data plane against raw grpcio and a torch.distributed.rpc PS, side by side.

    python scripts/bench_ps.py                       # the full table (a few minutes)
    python scripts/bench_ps.py --seconds 1 --rounds 1 --sizes 1M --workers 1   # a quick look

Dense: each worker process loops `pull` all parameters + `push` a gradient of the same size
(one round trip moves 2 x 4 bytes x parameters) against one server process, for a 1 M and a
10 M parameter model (4 weight matrices + 4 biases) with 1 and 2 workers. For each
configuration the systems run one after another, and the rounds alternate them again, so they
share the machine's conditions:

- `elastic-ps`: the real `python -m ps --standalone`, and `worker_sdk.ps_data.DataClient` (SGD applied
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

Each process is a fresh interpreter (`--role ...`); workers warm up, meet at a file barrier,
run for `--seconds`, and print their count as JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CHUNK = 1 << 20
DENSE_SYSTEMS = ["elastic-ps", "elastic-ps-tcp", "grpc-raw", "rpc-default", "rpc-tcp"]
RATIOS = [("elastic-ps", "grpc-raw"), ("elastic-ps", "rpc-tcp"), ("elastic-ps", "rpc-default"),
          ("elastic-ps-tcp", "grpc-raw"), ("elastic-ps-tcp", "rpc-tcp"),
          ("elastic-ps-tcp", "rpc-tcp-basic")]
FLOORS = [("elastic-ps", "grpc-raw", 2.0), ("elastic-ps", "rpc-tcp", 0.8)]
LR = 1e-9


def model_shapes(params: int) -> list[tuple[str, tuple[int, ...]]]:
    """4 square-ish weight matrices and 4 biases, `params` elements in all (about)."""
    per = params // 4
    side = int(per ** 0.5)
    shapes = []
    for i in range(4):
        rows = side
        cols = (per - side) // side
        shapes.append((f"layer{i}.weight", (rows, cols)))
        shapes.append((f"layer{i}.bias", (side,)))
    return shapes


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _parse_size(text: str) -> int:
    text = text.strip().upper()
    mult = {"K": 10**3, "M": 10**6}.get(text[-1], 1)
    return int(float(text.rstrip("KM")) * mult)


# ---------------------------------------------------------------------------------------------
# barrier between the orchestrator and the workers


def _barrier(run_dir: Path, rank: int) -> float:
    """Say ready, wait for go; returns the end time the orchestrator wrote."""
    (run_dir / f"ready-{rank}").touch()
    go = run_dir / "go"
    deadline = time.time() + 300
    while not go.exists():
        if time.time() > deadline:
            raise SystemExit("no go signal")
        time.sleep(0.005)
    while True:
        text = go.read_text()
        if text:
            return float(text)
        time.sleep(0.001)


def _loop(run_dir: Path, rank: int, step, warmup: int = 3) -> None:
    for _ in range(warmup):
        step()
    end = _barrier(run_dir, rank)
    count = 0
    start = time.time()
    while time.time() < end:
        step()
        count += 1
    print(json.dumps({"rank": rank, "count": count, "seconds": time.time() - start}), flush=True)


# ---------------------------------------------------------------------------------------------
# elastic-ps


def worker_elastic(args) -> None:
    import torch

    from worker_sdk.ps_data import DataClient

    shapes = model_shapes(args.params)
    grads = {n: torch.full(s, 1.0) for n, s in shapes}
    c = DataClient([args.endpoint], timeout_s=120)
    c.set_layout({n: _numel(s) * 4 for n, s in shapes})
    names = [n for n, _ in shapes]

    def step():
        c.pull(names)
        c.push(grads)

    _loop(Path(args.run_dir), args.rank, step)
    c.close()


def worker_embedding(args) -> None:
    import torch

    from worker_sdk.ps_data import DataClient

    c = DataClient([args.endpoint], timeout_s=120)
    g = torch.Generator().manual_seed(args.rank)
    batch, dim = args.batch, args.dim
    grads = torch.full((batch, dim), 0.01)
    state = {"ids": torch.randint(0, 10**6, (batch,), generator=g)}

    def step():
        ids = state["ids"]
        c.pull_rows("emb", ids)
        c.push_rows("emb", ids, grads)
        state["ids"] = torch.randint(0, 10**6, (batch,), generator=g)

    _loop(Path(args.run_dir), args.rank, step)
    c.close()


# ---------------------------------------------------------------------------------------------
# raw grpcio


def server_grpc(args) -> None:
    from concurrent import futures

    import grpc
    import numpy as np

    size = sum(_numel(s) for _, s in model_shapes(args.params)) * 4
    params = np.zeros(size, dtype=np.uint8)
    inbox = np.zeros(size, dtype=np.uint8)
    lock = threading.Lock()

    def push(request_iterator, context):
        offset = 0
        with lock:
            for chunk in request_iterator:
                n = len(chunk)
                inbox[offset:offset + n] = np.frombuffer(chunk, dtype=np.uint8)
                offset += n
        return b""

    def pull(request, context):
        view = memoryview(params)
        for start in range(0, size, args.chunk):
            yield bytes(view[start:start + args.chunk])

    handler = grpc.method_handlers_generic_handler("bench.Raw", {
        "Push": grpc.stream_unary_rpc_method_handler(push),
        "Pull": grpc.unary_stream_rpc_method_handler(pull),
    })
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8),
                         options=[("grpc.max_receive_message_length", 64 << 20),
                                  ("grpc.max_send_message_length", 64 << 20),
                                  ("grpc.so_reuseport", 0)])
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"grpc listening on 127.0.0.1:{port}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    server.stop(0)


def worker_grpc(args) -> None:
    import grpc
    import numpy as np
    import torch

    shapes = model_shapes(args.params)
    size = sum(_numel(s) for _, s in shapes) * 4
    grad = np.ones(size // 4, dtype=np.float32).view(np.uint8)
    channel = grpc.insecure_channel(args.endpoint,
                                    options=[("grpc.max_receive_message_length", 64 << 20),
                                             ("grpc.max_send_message_length", 64 << 20)])
    push = channel.stream_unary("/bench.Raw/Push")
    pull = channel.unary_stream("/bench.Raw/Pull")

    def chunks():
        view = memoryview(grad)
        for start in range(0, size, args.chunk):
            yield bytes(view[start:start + args.chunk])

    def step():
        buf = bytearray(size)
        offset = 0
        for chunk in pull(b""):
            buf[offset:offset + len(chunk)] = chunk
            offset += len(chunk)
        flat = torch.frombuffer(buf, dtype=torch.float32)
        tensors, at = {}, 0
        for name, shape in shapes:  # the same tensors a PS client would hand back
            n = _numel(shape)
            tensors[name] = flat[at:at + n].view(shape)
            at += n
        push(chunks())

    _loop(Path(args.run_dir), args.rank, step)
    channel.close()


# ---------------------------------------------------------------------------------------------
# torch.distributed.rpc, in the style of the parameter-server tutorial


class ParameterServer:
    """Holds the parameters; workers call pull/push through an RRef to it."""

    def __init__(self, shapes):
        import torch

        self.lock = threading.Lock()
        self.params = [torch.zeros(s) for _, s in shapes]
        self.optimizer = torch.optim.SGD(self.params, lr=LR)

    def pull(self):
        return self.params

    def push(self, grads):
        with self.lock:
            for p, g in zip(self.params, grads):
                p.grad = g
            self.optimizer.step()


_PS = None


def get_parameter_server(params: int):
    global _PS
    if _PS is None:
        _PS = ParameterServer(model_shapes(params))
    return _PS


def _rpc_options(args):
    from torch.distributed import rpc

    kw = {}
    if args.transport in ("tcp", "tcp-basic"):
        kw["_transports"] = ["uv"]
    if args.transport == "tcp-basic":
        kw["_channels"] = ["basic"]
    return rpc.TensorPipeRpcBackendOptions(num_worker_threads=16, rpc_timeout=120,
                                           init_method=f"tcp://127.0.0.1:{args.rpc_port}", **kw)


def server_rpc(args) -> None:
    from torch.distributed import rpc

    rpc.init_rpc("ps", rank=0, world_size=args.world, rpc_backend_options=_rpc_options(args))
    print("rpc ps ready", flush=True)
    rpc.shutdown()  # waits for every worker to finish


def worker_rpc(args) -> None:
    import torch
    from torch.distributed import rpc

    rpc.init_rpc(f"worker{args.rank}", rank=args.rank + 1, world_size=args.world,
                 rpc_backend_options=_rpc_options(args))
    ps_rref = rpc.remote("ps", get_parameter_server, args=(args.params,))
    grads = [torch.full(s, 1.0) for _, s in model_shapes(args.params)]

    def step():
        ps_rref.rpc_sync().pull()
        ps_rref.rpc_sync().push(grads)

    _loop(Path(args.run_dir), args.rank, step)
    rpc.shutdown()


# ---------------------------------------------------------------------------------------------
# orchestration


def _spawn(role: str, extra: list[str], log: Path) -> subprocess.Popen:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--role", role, *extra]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=open(log, "ab"),
                            text=True)


def _read_line(proc: subprocess.Popen, needle: str, timeout: float = 120) -> str:
    result: list[str] = []

    def reader():
        for line in proc.stdout:
            if needle in line:
                result.append(line.strip())
                return

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    t.join(timeout)
    if not result:
        raise RuntimeError(f"no {needle!r} from {proc.args} (exit {proc.poll()})")
    return result[0]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen, sig=signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


class Run:
    """One measurement: a server, some workers, a barrier, counts."""

    def __init__(self, work: Path, seconds: float):
        self.work = work
        self.seconds = seconds
        self.dir = Path(tempfile.mkdtemp(dir=work))

    def measure(self, workers: list[subprocess.Popen], timeout: float = 300) -> float:
        deadline = time.time() + timeout
        while len(list(self.dir.glob("ready-*"))) < len(workers):
            if any(w.poll() not in (None, 0) for w in workers) or time.time() > deadline:
                raise RuntimeError(f"workers did not get ready (see logs in {self.work})")
            time.sleep(0.01)
        tmp = self.dir / "go.tmp"
        tmp.write_text(repr(time.time() + self.seconds))
        tmp.rename(self.dir / "go")
        total = 0.0
        for w in workers:
            out, _ = w.communicate(timeout=self.seconds + 120)
            rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
            if not rows:
                raise RuntimeError(f"a worker printed no count (exit {w.returncode}; logs in "
                                   f"{self.work})")
            total += rows[-1]["count"] / rows[-1]["seconds"]
        return total


def run_elastic(work: Path, params: int, workers: int, seconds: float, role: str = "elastic",
                extra_worker: list[str] = (), ps_flags: list[str] = (), ipc: bool = True) -> float:
    ck = Path(tempfile.mkdtemp(dir=work))
    if not ipc:  # TCP only: no same-host socket
        ps_flags = [*ps_flags, "--data-ipc", "off"]
    server = subprocess.Popen(
        [sys.executable, "-m", "ps", "--standalone", "--host", "127.0.0.1",
         "--checkpoint-dir", str(ck), "--checkpoint-interval", "0", *ps_flags],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=open(work / "elastic-ps.log", "ab"), text=True)
    try:
        line = _read_line(server, "listening on")
        endpoint = line.split(" data ")[1].split()[0]
        _init_elastic(endpoint, params, role)
        run = Run(work, seconds)
        procs = [_spawn(role, ["--endpoint", endpoint, "--params", str(params), "--rank",
                               str(r), "--run-dir", str(run.dir), *extra_worker],
                        work / f"{role}-worker.log") for r in range(workers)]
        try:
            return run.measure(procs)
        finally:
            for p in procs:
                _stop(p, signal.SIGKILL)
    finally:
        _stop(server)
        shutil.rmtree(ck, ignore_errors=True)


def _init_elastic(endpoint: str, params: int, role: str) -> None:
    import torch

    from worker_sdk.ps_data import DataClient
    from ps.embedding import TableSpec

    with DataClient([endpoint], timeout_s=120) as c:
        if role == "embedding":
            c.init_parameters({}, "sgd", tables=[(TableSpec("emb", 64, "normal", 0.0, 0.01),
                                                  {"name": "adagrad", "lr": 0.01})])
        else:
            c.init_parameters({n: torch.zeros(s) for n, s in model_shapes(params)}, "sgd", lr=LR)


def run_grpc(work: Path, params: int, workers: int, seconds: float, chunk: int = CHUNK) -> float:
    server = _spawn("grpc-server", ["--params", str(params), "--chunk", str(chunk)],
                    work / "grpc-server.log")
    try:
        endpoint = _read_line(server, "grpc listening on").split()[-1]
        run = Run(work, seconds)
        procs = [_spawn("grpc", ["--endpoint", endpoint, "--params", str(params), "--rank",
                                 str(r), "--run-dir", str(run.dir), "--chunk", str(chunk)],
                        work / "grpc-worker.log")
                 for r in range(workers)]
        try:
            return run.measure(procs)
        finally:
            for p in procs:
                _stop(p, signal.SIGKILL)
    finally:
        _stop(server, signal.SIGKILL)


def run_rpc(work: Path, params: int, workers: int, seconds: float, transport: str) -> float:
    port = _free_port()
    common = ["--params", str(params), "--world", str(workers + 1), "--rpc-port", str(port),
              "--transport", transport]
    server = _spawn("rpc-server", common, work / f"rpc-{transport}-server.log")
    run = Run(work, seconds)
    procs = [_spawn("rpc", [*common, "--rank", str(r), "--run-dir", str(run.dir)],
                    work / f"rpc-{transport}-worker.log") for r in range(workers)]
    try:
        return run.measure(procs)
    finally:
        for p in procs:
            _stop(p, signal.SIGKILL)
        _stop(server, signal.SIGKILL)


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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--role", default="main", help=argparse.SUPPRESS)
    p.add_argument("--endpoint", help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--run-dir", help=argparse.SUPPRESS)
    p.add_argument("--world", type=int, default=2, help=argparse.SUPPRESS)
    p.add_argument("--rpc-port", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--transport", default="default", help=argparse.SUPPRESS)
    p.add_argument("--params", type=int, default=10**6, help=argparse.SUPPRESS)
    p.add_argument("--chunk", type=int, default=CHUNK, help=argparse.SUPPRESS)
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
    args = p.parse_args()

    roles = {"elastic": worker_elastic, "embedding": worker_embedding, "grpc": worker_grpc,
             "grpc-server": server_grpc, "rpc": worker_rpc, "rpc-server": server_rpc}
    if args.role != "main":
        roles[args.role](args)
        return

    systems = [s for s in args.systems.split(",") if s]
    if args.strict_tcp and "rpc-tcp-basic" not in systems:
        systems.append("rpc-tcp-basic")
    sizes = [_parse_size(s) for s in args.sizes.split(",") if s]
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
        nbytes = sum(_numel(s) for _, s in shapes) * 4
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
        Path(args.json).write_text(json.dumps(results, indent=1))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
