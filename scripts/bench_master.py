#!/usr/bin/env python3
"""Benchmark the master against DESIGN.md's performance targets, on 127.0.0.1 only.

Six measures, each bounded in time and count:

1. Throughput: shards handed out and acknowledged per second with 1, 8 and 32 client
   processes (each its own gRPC channel and registered worker), against a real
   `python -m master` subprocess on a fresh SQLite file per run (durable: WAL,
   synchronous=FULL), on the two-calls path (GetShard(max_shards=0) then ReportShard(DONE))
   and on the batched path (GetShard(max_shards=4, reports=DONE of the previous 4 leases)).
2. In the same run, alternating with our master (echo, ours, echo, ours, ...) so that machine
   noise hits both, a bare gRPC echo server of a tiny payload with the same server setup
   (grpc.server, ThreadPoolExecutor of 64 threads, generic bytes handler, no .proto) driven
   by the same client processes: the ceiling of any Python gRPC master on this machine. Our
   calls/s are reported as a % of echo's; batched shards/s against DLRover 0.6.1's master:
   its reference from DESIGN.md (800-1,100 get+report round trips/s at 32 client processes)
   and, with --dlrover-python (a separate venv holding dlrover==0.6.1, never this project's),
   its local-mode master measured side by side with its own client (get_task then
   report_task_result). DLRover keeps shards in memory only; ours commits every change.
3. Cost of one shard operation (get + report) at 10^3, 10^5 and 10^6 shards, in-process on
   MasterCore: the pure core (journal batch discarded) and the core with a real Store (SQLite
   file) behind the Committer. Must stay flat; also the time to create a 10^6-shard dataset.
4. Master RSS (psutil) of the real master process with a 10^6-shard dataset, 1,000
   registered workers holding 2 leases each, and 70,000 shards already done (so the bounded
   cache of recently ended leases is full).
5. The cost of progress reports: at the largest client count, batched-path shards/s without
   and with PROGRESS reports (half-way into each lease), alternating run by run on fresh
   masters: "progress-heartbeat" sends a Heartbeat with PROGRESS for every held lease before
   every GetShard (the stress case; the SDK heartbeats once a second), "progress-piggyback"
   holds two generations of leases and each GetShard carries DONE for the older and PROGRESS
   for the newer (as the SDK asks for leases once it has read all it holds, carrying DONE for
   the trained ones and PROGRESS for those still in training). Reported as a ratio to batched.
6. Appending and reading 10^5 events: in-process, Journal.event + Store.apply on a SQLite
   file (100 events a commit; also 1 a commit on fewer events), read back with Store.events
   in pages of 10,000 (GetEvents' cap); then GetEvents over gRPC from a real master started
   on that database (limit 10,000 and the default 1,000).

Options for digging: --py-spy FILE profiles the master during the largest batched run;
--master-src DIR benchmarks a patched copy of the `master` package (DIR/master) instead.

Usage:
    python scripts/bench_master.py                 # full run, about 6 minutes
    python scripts/bench_master.py --quick         # about 1 minute
    python scripts/bench_master.py --json out.json --only throughput --clients 32
    python scripts/bench_master.py --py-spy prof.txt   # profile the master under the
                                                       # largest batched load (py-spy needed)
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
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
if str(ROOT) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(ROOT))

HOST = "127.0.0.1"
ECHO_METHOD = "/bench.Echo/Echo"
ECHO_PAYLOAD = b"x" * 16
SERVER_THREADS = 64  # the master's default --threads
DLROVER_REF = (800, 1100)  # get+report round trips/s at 32 client processes, DESIGN.md
TARGET_X_DLROVER = 3.0
TARGET_PCT_ECHO = 70.0
TARGET_FLAT = 1.5
TARGET_RSS_MB = 300.0
BATCH = 4
# calls a client makes per step, by kind (the others make one)
CALLS_PER_STEP = {"two-calls": 2, "dlrover": 2, "progress-heartbeat": 2}
PROGRESS_KINDS = ("batched", "progress-heartbeat", "progress-piggyback")
EVENTS_PAGE = 10_000  # GetEvents' cap on `limit` (master/server.py MAX_EVENTS)


# ---- the bare echo server (a child process of this script) ---------------------------------


def serve_echo(threads: int) -> None:
    """A bare gRPC server set up like the master's, answering bytes with the same bytes."""
    from concurrent import futures

    import grpc

    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="grpc"),
        options=[("grpc.so_reuseport", 0)],
    )
    handler = grpc.unary_unary_rpc_method_handler(lambda request, context: request)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("bench.Echo", {"Echo": handler}),)
    )
    port = server.add_insecure_port(f"{HOST}:0")
    server.start()
    print(f"echo listening on {HOST}:{port} (pid {os.getpid()})", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.stop(grace=1).wait()


# ---- server processes -----------------------------------------------------------------------


class Server:
    """A server subprocess that prints 'listening on HOST:PORT (pid N)' on its first line.

    With `port` and `ready_text`: a server told its port, ready once `ready_text` shows up in
    its output (stdout and stderr both go to the .err file then).
    """

    def __init__(self, argv: list[str], workdir: Path, name: str, cwd: Path = ROOT,
                 port: int | None = None, ready_text: str = ""):
        self.name = name
        self.out_path = workdir / f"{name}.out"
        self.err_path = workdir / f"{name}.err"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            # `python -m` puts cwd first on sys.path: --master-src's copy wins over ours
            self.proc = subprocess.Popen(argv, stdout=err if port else out, stderr=err,
                                         cwd=cwd)
        self.port = self._wait_port(port, ready_text)

    def _wait_port(self, port: int | None, ready_text: str, timeout: float = 60.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if port:
                if ready_text in self.err_path.read_text(errors="replace"):
                    return port
            else:
                text = self.out_path.read_text() if self.out_path.exists() else ""
                if "listening on" in text:
                    address = text.split("listening on", 1)[1].split()[0]
                    return int(address.rsplit(":", 1)[1])
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(
            f"{self.name} did not start (exit {self.proc.returncode}): "
            f"{self.err_path.read_text()[-2000:]}"
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        return self.proc.returncode


MASTER_SRC: Path | None = None  # --master-src: run a patched copy of the master package


def start_master(workdir: Path, name: str, extra: tuple[str, ...] = ()) -> Server:
    db = workdir / f"{name}.db"
    argv = [sys.executable, "-m", "master", "--host", HOST, "--port", "0",
            "--db", f"sqlite:///{db}", *extra]
    return Server(argv, workdir, name, cwd=MASTER_SRC or ROOT)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def start_dlrover(workdir: Path, name: str, python: str) -> Server:
    """DLRover 0.6.1's master in local mode (in-memory shards), from a separate venv."""
    argv = [python, "-m", "dlrover.python.master.main", "--platform", "local", "--port",
            str(_free_port()), "--job_name", "bench", "--node_num", "32"]
    port = int(argv[argv.index("--port") + 1])
    return Server(argv, workdir, name, cwd=workdir, port=port,
                  ready_text="Master grpc server started")


def start_echo(workdir: Path, name: str) -> Server:
    argv = [sys.executable, str(Path(__file__).resolve()), "--serve-echo",
            "--threads", str(SERVER_THREADS)]
    return Server(argv, workdir, name)


# ---- client processes -----------------------------------------------------------------------


def _client_loop(idx: int, cmd_q, res_q, go, start_at) -> None:
    """A persistent client process: one run per command, own channel per run."""
    if os.environ.get("BENCH_DLROVER_CLIENT"):
        import sysconfig

        # spawn hands the child our sys.path: put its own venv's packages first
        sys.path.insert(0, sysconfig.get_paths()["purelib"])
    import grpc

    if not os.environ.get("BENCH_DLROVER_CLIENT"):
        from protos import master_pb2 as pb
        from protos import master_pb2_grpc as pb_grpc

    while True:
        cmd = cmd_q.get()
        if cmd is None:
            return
        kind, port, dataset, duration = cmd
        stats = {"calls": 0, "shards": 0, "leased": 0, "refused": 0, "errors": 0,
                 "lat": [], "error": ""}
        channel = grpc.insecure_channel(f"{HOST}:{port}")
        ready = False
        try:
            grpc.channel_ready_future(channel).result(timeout=30)
            if kind == "echo":
                echo = channel.unary_unary(ECHO_METHOD)
                echo(ECHO_PAYLOAD, timeout=30)
                step = _echo_step(echo)
            elif kind == "dlrover":
                step = _dlrover_step(port, dataset, idx)
            else:
                stub = pb_grpc.MasterStub(channel)
                step = _master_step(stub, pb, kind, dataset, idx)
            res_q.put(("ready", idx))
            ready = True
            go.wait()
            t0 = start_at.value
            while time.monotonic() < t0:
                time.sleep(0.001)
            deadline = t0 + duration
            lat = stats["lat"]
            while True:
                begin = time.monotonic()
                if begin >= deadline:
                    break
                try:
                    shards, leased, refused = step()
                except grpc.RpcError as exc:
                    stats["errors"] += 1
                    stats["error"] = f"{exc.code()}: {exc.details()}"
                    time.sleep(0.01)
                    continue
                end = time.monotonic()
                if end > deadline:
                    break  # finished after the window: not counted
                stats["calls"] += CALLS_PER_STEP.get(kind, 1)
                stats["shards"] += shards
                stats["leased"] += leased
                stats["refused"] += refused
                lat.append(end - begin)
        except Exception as exc:  # noqa: BLE001 - reported to the parent with the numbers
            stats["error"] = f"{type(exc).__name__}: {exc}"
            if not ready:
                res_q.put(("ready", idx))
        finally:
            channel.close()
        res_q.put(("done", idx, stats))


def _dlrover_step(port: int, dataset: str, idx: int):
    """DLRover 0.6.1's own client: get_task then report_task_result, one shard each."""
    os.environ.setdefault("DLROVER_LOG_LEVEL", "ERROR")  # the client's logs only, not its master's
    from dlrover.python.elastic_agent.master_client import GrpcMasterClient

    client = GrpcMasterClient(f"{HOST}:{port}", idx, "worker", timeout=30)
    # the first report creates the dataset; DLRover ignores the same one again
    client.report_dataset_shard_params(batch_size=10, num_epochs=1000, dataset_size=10_000_000,
                                       shuffle=False, num_minibatches_per_shard=1,
                                       dataset_name=dataset)

    def step():
        ok, task = client.get_task(dataset)
        if not ok or task.task_id < 0:
            return 0, 0, 0
        res = client.report_task_result(dataset, task.task_id, "")
        return (1, 1, 0) if res.success else (0, 1, 1)

    return step


def _echo_step(echo):
    def step():
        echo(ECHO_PAYLOAD, timeout=30)
        return 0, 0, 0

    return step


def _master_step(stub, pb, kind: str, dataset: str, idx: int):
    """One unit of client work against the master; returns (acked, leased, refused)."""
    worker_id = stub.RegisterWorker(
        pb.RegisterWorkerRequest(name=f"bench-{idx}", labels={"bench": "1"}), timeout=30
    ).worker_id
    done = pb.ShardReport.DONE

    if kind == "two-calls":
        def step():
            got = stub.GetShard(pb.GetShardRequest(worker_id=worker_id, dataset=dataset,
                                                   max_shards=0), timeout=30)
            if not got.leases:
                return 0, 0, 0
            lease = got.leases[0]
            res = stub.ReportShard(pb.ReportShardRequest(worker_id=worker_id, reports=[
                pb.ShardReport(lease_id=lease.lease_id, outcome=done,
                               records_done=lease.shard.end - lease.shard.start)]), timeout=30)
            ok = sum(1 for r in res.results if r.accepted)
            return ok, 1, len(res.results) - ok

        return step

    progress = pb.ShardReport.PROGRESS

    def half(leases) -> list:
        """PROGRESS half-way into each lease, as the SDK reports trained offsets."""
        return [pb.ShardReport(lease_id=x.lease_id, outcome=progress,
                               records_done=(x.shard.end - x.shard.start) // 2) for x in leases]

    if kind == "progress-heartbeat":
        # the stress case: a Heartbeat with PROGRESS for every held lease before every
        # GetShard (the SDK heartbeats once a second), then DONE piggybacked on GetShard
        held_hb: list = []

        def step():
            hb = stub.Heartbeat(pb.HeartbeatRequest(worker_id=worker_id,
                                                    progress=half(held_hb)), timeout=30)
            refused = sum(1 for r in hb.results if not r.accepted)
            reports = [pb.ShardReport(lease_id=x.lease_id, outcome=done,
                                      records_done=x.shard.end - x.shard.start) for x in held_hb]
            got = stub.GetShard(pb.GetShardRequest(worker_id=worker_id, dataset=dataset,
                                                   max_shards=BATCH, reports=reports),
                                timeout=30)
            held_hb[:] = got.leases
            ok = sum(1 for r in got.results if r.accepted)
            return ok, len(got.leases), refused + len(got.results) - ok

        return step

    if kind == "progress-piggyback":
        # SDK-like: two generations of leases held; each GetShard carries DONE for the
        # older one and PROGRESS (half-way) for the newer one, still in training
        older: list = []
        newer: list = []

        def step():
            reports = [pb.ShardReport(lease_id=x.lease_id, outcome=done,
                                      records_done=x.shard.end - x.shard.start)
                       for x in older] + half(newer)
            got = stub.GetShard(pb.GetShardRequest(worker_id=worker_id, dataset=dataset,
                                                   max_shards=BATCH, reports=reports),
                                timeout=30)
            n_done = len(older)
            ok = sum(1 for r in got.results[:n_done] if r.accepted)  # DONE acked: shards
            refused = sum(1 for r in got.results if not r.accepted)
            older[:] = newer
            newer[:] = got.leases
            return ok, len(got.leases), refused

        return step

    held: list = []

    def step():
        reports = [pb.ShardReport(lease_id=x.lease_id, outcome=done,
                                  records_done=x.shard.end - x.shard.start) for x in held]
        got = stub.GetShard(pb.GetShardRequest(worker_id=worker_id, dataset=dataset,
                                               max_shards=BATCH, reports=reports), timeout=30)
        held[:] = got.leases
        ok = sum(1 for r in got.results if r.accepted)
        return ok, len(got.leases), len(got.results) - ok

    return step


class Clients:
    """N persistent client processes (spawned once, reused for every run)."""

    def __init__(self, n: int, python: str | None = None):
        ctx = mp.get_context("spawn")
        self.res_q = ctx.Queue()
        self.go = ctx.Event()
        self.start_at = ctx.Value("d", 0.0)
        self.cmd_qs = [ctx.Queue() for _ in range(n)]
        self.procs = [
            ctx.Process(target=_client_loop, daemon=True,
                        args=(i, self.cmd_qs[i], self.res_q, self.go, self.start_at))
            for i in range(n)
        ]
        if python:  # clients of another venv (DLRover's): its interpreter, told so by env
            os.environ["BENCH_DLROVER_CLIENT"] = "1"
            ctx.set_executable(python)
        try:
            for p in self.procs:
                p.start()
        finally:
            if python:
                ctx.set_executable(sys.executable)
                del os.environ["BENCH_DLROVER_CLIENT"]

    def run(self, k: int, kind: str, port: int, dataset: str, duration: float,
            server_pid: int | None = None) -> dict:
        import psutil

        self.go.clear()
        for q in self.cmd_qs[:k]:
            q.put((kind, port, dataset, duration))
        for _ in range(k):
            msg = self._get(k, 120)
            assert msg[0] == "ready", msg
        server = psutil.Process(server_pid) if server_pid else None
        self.start_at.value = time.monotonic() + 0.2
        self.go.set()
        time.sleep(0.2)
        cpu0 = server.cpu_times()[:2] if server else (0.0, 0.0)
        switches0 = _switches(server_pid)
        time.sleep(duration)
        cpu1 = server.cpu_times()[:2] if server else (0.0, 0.0)
        switches1 = _switches(server_pid)
        results = [self._get(k, duration + 120) for _ in range(k)]
        stats = [r[2] for r in results]
        lat = sorted(x for s in stats for x in s["lat"])
        total = {key: sum(s[key] for s in stats)
                 for key in ("calls", "shards", "leased", "refused", "errors")}
        errors = [s["error"] for s in stats if s["error"]]
        return dict(
            kind=kind, clients=k, duration_s=duration,
            calls_per_s=total["calls"] / duration, shards_per_s=total["shards"] / duration,
            leased_per_s=total["leased"] / duration, refused=total["refused"],
            errors=total["errors"], first_error=errors[0] if errors else "",
            p50_ms=_pct(lat, 50) * 1e3, p99_ms=_pct(lat, 99) * 1e3,
            # cores the server process kept busy; its CPU and thread switches per call
            server_cpu=(sum(cpu1) - sum(cpu0)) / duration,
            server_user_us=_per_call(cpu1[0] - cpu0[0], total["calls"]) * 1e6,
            server_sys_us=_per_call(cpu1[1] - cpu0[1], total["calls"]) * 1e6,
            server_switches=_per_call(switches1 - switches0, total["calls"]),
        )

    def _get(self, k: int, timeout: float):
        """The next message from the first k clients; fails fast if one of them died."""
        import queue

        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.res_q.get(timeout=0.5)
            except queue.Empty:
                dead = [p.pid for p in self.procs[:k] if not p.is_alive()]
                if dead:
                    raise RuntimeError(f"client processes {dead} died during the run") from None
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no answer from the clients in {timeout:.0f} s") from None

    def close(self) -> None:
        for q in self.cmd_qs:
            q.put(None)
        for p in self.procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()


def _per_call(amount: float, calls: int) -> float:
    return amount / calls if calls else float("nan")


def _switches(pid: int | None) -> int:
    """Voluntary context switches of all of a process's threads so far (Linux; else 0)."""
    total = 0
    if pid is None:
        return 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        try:
            for line in status.read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches"):
                    total += int(line.split()[1])
        except OSError:
            pass  # a thread that ended meanwhile
    return total


def _pct(sorted_values: list[float], pct: float) -> float:
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, int(len(sorted_values) * pct / 100))
    return sorted_values[i]


def _create_dataset(port: int, name: str, num_records: int, shard_size: int,
                    num_epochs: int) -> float:
    import grpc

    from protos import master_pb2 as pb
    from protos import master_pb2_grpc as pb_grpc

    with grpc.insecure_channel(f"{HOST}:{port}") as channel:
        stub = pb_grpc.MasterStub(channel)
        t = time.perf_counter()
        stub.CreateDataset(pb.DatasetSpec(name=name, num_records=num_records,
                                          shard_size=shard_size, num_epochs=num_epochs,
                                          shuffle=True, seed=7), timeout=60)
        return time.perf_counter() - t


# ---- 1 + 2: throughput, alternating with the echo ----------------------------------------


def bench_throughput(args, workdir: Path, log) -> dict:
    clients = Clients(max(args.clients))
    dl_clients = Clients(max(args.clients), args.dlrover_python) if args.dlrover_python else None
    kinds = ("echo", "two-calls", "echo", "batched") + (("echo", "dlrover") if dl_clients else ())
    runs = []
    profile = None
    try:
        for k in args.clients:
            for rnd in range(args.rounds):
                for kind in kinds:
                    name = f"{kind}-{k}c-r{rnd}"
                    if kind == "echo":
                        server = start_echo(workdir, name)
                    elif kind == "dlrover":
                        server = start_dlrover(workdir, name, args.dlrover_python)
                    else:
                        server = start_master(workdir, name)
                    try:
                        if kind not in ("echo", "dlrover"):
                            # 10^6 shards of 10 records, 1,000 epochs: never runs out
                            _create_dataset(server.port, "bench", 10_000_000, 10, 1000)
                        spy = None
                        if (args.py_spy and kind == "batched" and k == max(args.clients)
                                and rnd == 0):
                            spy = _start_py_spy(args.py_spy, server.pid, args.duration,
                                                args.py_spy_gil)
                        pool = dl_clients if kind == "dlrover" else clients
                        r = pool.run(k, kind, server.port, "bench", args.duration, server.pid)
                        if spy is not None:
                            profile = _finish_py_spy(spy, args.py_spy)
                            r["profiled"] = True
                    finally:
                        code = server.stop()
                    r["round"] = rnd
                    r["server_exit"] = code
                    runs.append(r)
                    log(f"  {kind:9s} {k:2d} clients: {r['calls_per_s']:7.0f} calls/s "
                        f"{r['shards_per_s']:7.0f} shards/s p50 {r['p50_ms']:.2f} ms "
                        f"p99 {r['p99_ms']:.2f} ms server CPU {r['server_cpu']:.2f} cores, "
                        f"{r['server_user_us'] + r['server_sys_us']:.0f} us and "
                        f"{r['server_switches']:.1f} switches a call, errors {r['errors']}"
                        + (f" ({r['first_error']})" if r["first_error"] else "")
                        + (" [py-spy attached]" if r.get("profiled") else ""))
    finally:
        clients.close()
        if dl_clients:
            dl_clients.close()
    return {"runs": runs, "summary": _summarise(runs, args.clients), "profile": profile}


def _summarise(runs: list[dict], client_counts) -> list[dict]:
    rows = []
    for k in client_counts:
        # a profiled run is slowed by py-spy on this small machine: kept out of the summary
        mine = [r for r in runs if r["clients"] == k and not r.get("profiled")]
        echo = [r["calls_per_s"] for r in mine if r["kind"] == "echo"]
        echo_mean = statistics.mean(echo) if echo else float("nan")
        echo_cpu = [r["server_cpu"] for r in mine if r["kind"] == "echo"]
        dl = [r["shards_per_s"] for r in mine if r["kind"] == "dlrover"]
        dl_mean = statistics.mean(dl) if dl else None
        for kind in ("two-calls", "batched", "dlrover"):
            ours = [r for r in mine if r["kind"] == kind]
            if not ours:
                continue
            calls = statistics.mean(r["calls_per_s"] for r in ours)
            shards = statistics.mean(r["shards_per_s"] for r in ours)
            rows.append(dict(
                clients=k, path=kind, shards_per_s=shards, calls_per_s=calls,
                p50_ms=statistics.mean(r["p50_ms"] for r in ours),
                p99_ms=statistics.mean(r["p99_ms"] for r in ours),
                server_cpu=statistics.mean(r["server_cpu"] for r in ours),
                server_us=statistics.mean(r["server_user_us"] + r["server_sys_us"]
                                          for r in ours),
                server_switches=statistics.mean(r["server_switches"] for r in ours),
                echo_us=_mean_of(mine, "echo", lambda r: r["server_user_us"]
                                 + r["server_sys_us"]),
                echo_switches=_mean_of(mine, "echo", lambda r: r["server_switches"]),
                echo_cpu=statistics.mean(echo_cpu) if echo_cpu else float("nan"),
                echo_calls_per_s=echo_mean, pct_of_echo=100 * calls / echo_mean,
                x_dlrover=(shards / DLROVER_REF[0], shards / DLROVER_REF[1]),
                x_dlrover_measured=shards / dl_mean if dl_mean else None,
                errors=sum(r["errors"] for r in ours),
                refused=sum(r["refused"] for r in ours),
            ))
    return rows


def _mean_of(runs: list[dict], kind: str, value) -> float:
    values = [value(r) for r in runs if r["kind"] == kind]
    return statistics.mean(values) if values else float("nan")


def _start_py_spy(out: str, pid: int, duration: float, gil: bool):
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(exe).exists():
        print("  (py-spy not found: no profile)", file=sys.stderr)
        return None
    fmt = "raw" if out.endswith(".txt") else "speedscope" if out.endswith(".json") else "flamegraph"
    argv = [exe, "record", "--pid", str(pid), "--rate", "200", "--duration",
            str(max(1, int(duration + 1))), "--format", fmt, "--output", out, "--nonblocking",
            "--threads"] + (["--gil"] if gil else [])
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(0.5)
    return proc


def _finish_py_spy(proc, out: str):
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None
    if proc.returncode != 0:
        print(f"  (py-spy failed: {err.decode()[-500:]})", file=sys.stderr)
        return None
    return out


# ---- 3: cost per shard operation ------------------------------------------------------------


def bench_cost(args, workdir: Path, log) -> dict:
    from master.committer import Committer
    from master.core import MasterCore, Report, Settings
    from master.spec import DatasetSpec
    from master.store import Store

    def fresh(n_shards: int, durable: bool, tag: str, count: int):
        # enough epochs never to run out; small datasets roll over epochs on the way
        spec = DatasetSpec(name="cost", num_records=n_shards * 10, shard_size=10,
                           num_epochs=2 + 2 * count // n_shards, shuffle=True, seed=3)
        if durable:
            store = Store(f"sqlite:///{workdir / f'cost-{tag}.db'}")
            store.upgrade()
            core = MasterCore(Settings(), snapshot=store.load(), lookup_lease=store.lookup_lease)
            committer = Committer(core, store, on_fatal=lambda exc: None)
            committer.start()
            call = committer.call
        else:
            store = committer = None
            core = MasterCore(Settings())

            def call(fn):
                result = fn()
                core.journal.swap()  # what a commit would take away
                return result

        t = time.perf_counter()
        call(lambda: core.create_dataset(spec))
        created = time.perf_counter() - t
        worker = call(lambda: core.register_worker("cost", {})).worker_id
        return core, call, created, worker, (committer, store)

    def ops(core, call, worker, count: int) -> float:
        t = time.perf_counter()
        for _ in range(count):
            grant = call(lambda: core.get_shard(worker, "cost", 0, []))
            lease = grant.leases[0]
            call(lambda: core.report(worker, [Report(lease.lease_id, "DONE", lease.size)]))
        return (time.perf_counter() - t) / count

    rows = []
    for durable, count in ((False, args.cost_ops_core), (True, args.cost_ops_durable)):
        rounds = args.cost_rounds[not durable]  # the cheap in-memory runs get more rounds
        samples: dict[int, list[float]] = {n: [] for n in args.cost_sizes}
        created: dict[int, list[float]] = {n: [] for n in args.cost_sizes}
        for rnd in range(rounds):  # interleaved, so noise spreads over all sizes
            for n in args.cost_sizes:
                core, call, made, worker, (committer, store) = fresh(
                    n, durable, f"{n}-{rnd}-{int(durable)}", count)
                try:
                    ops(core, call, worker, min(count // 10, 200))  # warm-up
                    samples[n].append(ops(core, call, worker, count))
                    created[n].append(made)
                finally:
                    if committer is not None:
                        committer.stop()
                        store.close()
        for n in args.cost_sizes:
            row = dict(mode="core+store+committer (SQLite)" if durable else "core only",
                       shards=n, ops=count, rounds=rounds,
                       us_per_op=min(samples[n]) * 1e6,
                       us_per_op_median=statistics.median(samples[n]) * 1e6,
                       create_ms=min(created[n]) * 1e3)
            rows.append(row)
            log(f"  {row['mode']:30s} {n:>9,d} shards: {row['us_per_op']:8.1f} us/op "
                f"(median {row['us_per_op_median']:.1f}), create {row['create_ms']:.1f} ms")
    ratios = {}
    for mode in {r["mode"] for r in rows}:
        mine = {r["shards"]: r for r in rows if r["mode"] == mode}
        lo, hi = min(mine), max(mine)
        ratios[mode] = mine[hi]["us_per_op"] / mine[lo]["us_per_op"]
    return {"rows": rows, "ratio_max_vs_min": ratios}


# ---- 4: master RSS ----------------------------------------------------------------------------


def bench_rss(args, workdir: Path, log) -> dict:
    import grpc
    import psutil

    from protos import master_pb2 as pb
    from protos import master_pb2_grpc as pb_grpc

    # workers stay registered while we measure: they make no call after registering
    server = start_master(workdir, "rss", ("--worker-timeout", "3600"))
    try:
        proc = psutil.Process(server.pid)
        mb = lambda: proc.memory_info().rss / 2**20  # noqa: E731
        out = {"rss_start_mb": mb()}
        out["create_s"] = _create_dataset(server.port, "rss", args.rss_shards * 10, 10, 3)
        out["rss_dataset_mb"] = mb()
        with grpc.insecure_channel(f"{HOST}:{server.port}") as channel:
            stub = pb_grpc.MasterStub(channel)
            register = stub.RegisterWorker.future
            ids = []
            for start in range(0, args.rss_workers, 100):
                futs = [register(pb.RegisterWorkerRequest(
                    name=f"rss-{i}", labels={"host": f"node-{i % 50}", "zone": "a"}))
                    for i in range(start, min(start + 100, args.rss_workers))]
                ids += [f.result(timeout=60).worker_id for f in futs]
            out["rss_workers_mb"] = mb()
            # steady-state churn: one worker finishes shards through the batched path, so
            # the master's bounded cache of recently ended leases fills up
            done, held = 0, []
            while done < args.rss_churn:
                reports = [pb.ShardReport(lease_id=x.lease_id, outcome=pb.ShardReport.DONE,
                                          records_done=x.shard.end - x.shard.start)
                           for x in held]
                got = stub.GetShard(pb.GetShardRequest(worker_id=ids[0], dataset="rss",
                                                       max_shards=256, reports=reports),
                                    timeout=60)
                done += sum(1 for r in got.results if r.accepted)
                held = list(got.leases)
            # then leave leases held: 2 by each registered worker
            holders = ids[: args.rss_holders]
            futs = [stub.GetShard.future(pb.GetShardRequest(worker_id=w, dataset="rss",
                                                            max_shards=2)) for w in holders]
            held_now = sum(len(f.result(timeout=60).leases) for f in futs)
            status = stub.GetStatus(pb.GetStatusRequest(), timeout=60)
            time.sleep(0.5)
        out.update(rss_final_mb=mb(), workers=len(ids), shards=args.rss_shards,
                   churned_shards=done, leases_held=held_now + len(held),
                   workers_alive=sum(1 for w in status.workers if w.state == "alive"))
        log(f"  start {out['rss_start_mb']:.0f} MB, +{args.rss_shards:,} shards "
            f"{out['rss_dataset_mb']:.0f} MB (created in {out['create_s'] * 1e3:.0f} ms), "
            f"+{len(ids)} workers {out['rss_workers_mb']:.0f} MB, +{done:,} shards done and "
            f"{out['leases_held']} leases held: {out['rss_final_mb']:.0f} MB")
    finally:
        server.stop()
    return out


# ---- 5: the cost of progress reports --------------------------------------------------------


def bench_progress(args, workdir: Path, log) -> dict:
    """Batched path at the largest client count, with and without PROGRESS reports, alternating
    run by run (batched, with heartbeats, piggybacked, batched, ...), each on a fresh master."""
    k = max(args.clients)
    clients = Clients(k)
    runs = []
    try:
        for rnd in range(args.progress_rounds):
            for kind in PROGRESS_KINDS:
                server = start_master(workdir, f"progress-{kind}-r{rnd}")
                try:
                    _create_dataset(server.port, "bench", 10_000_000, 10, 1000)
                    r = clients.run(k, kind, server.port, "bench", args.duration, server.pid)
                finally:
                    code = server.stop()
                r.update(round=rnd, server_exit=code)
                runs.append(r)
                log(f"  {kind:18s} {k:2d} clients: {r['shards_per_s']:7.0f} shards/s "
                    f"{r['calls_per_s']:7.0f} calls/s p50 {r['p50_ms']:.2f} ms p99 "
                    f"{r['p99_ms']:.2f} ms server CPU {r['server_cpu']:.2f} cores, "
                    f"refused {r['refused']}, errors {r['errors']}"
                    + (f" ({r['first_error']})" if r["first_error"] else ""))
    finally:
        clients.close()
    rows = []
    base = [r for r in runs if r["kind"] == "batched"]
    for kind in PROGRESS_KINDS:
        mine = [r for r in runs if r["kind"] == kind]
        shards = statistics.mean(r["shards_per_s"] for r in mine)
        # per round against the batched run of the same round (run just before it)
        per_round = [r["shards_per_s"] / b["shards_per_s"] for r, b in zip(mine, base)
                     if b["shards_per_s"]]
        rows.append(dict(
            kind=kind, clients=k, rounds=len(mine), shards_per_s=shards,
            shards_per_s_runs=[r["shards_per_s"] for r in mine],
            calls_per_s=statistics.mean(r["calls_per_s"] for r in mine),
            p50_ms=statistics.mean(r["p50_ms"] for r in mine),
            p99_ms=statistics.mean(r["p99_ms"] for r in mine),
            server_cpu=statistics.mean(r["server_cpu"] for r in mine),
            # server CPU per shard acknowledged: what the progress reports add
            server_us_per_shard=statistics.mean(
                r["server_cpu"] * 1e6 / r["shards_per_s"] for r in mine if r["shards_per_s"]),
            ratio=shards / statistics.mean(b["shards_per_s"] for b in base),
            ratio_rounds=per_round,
            refused=sum(r["refused"] for r in mine), errors=sum(r["errors"] for r in mine),
        ))
    return {"runs": runs, "summary": rows}


# ---- 6: appending and reading 10^5 events ----------------------------------------------------


def bench_events(args, workdir: Path, log) -> dict:
    """Append events through Journal.event + Store.apply (SQLite file, durable commits), read
    them back through Store.events in pages of 10,000 (as GetEvents does), then over gRPC
    with GetEvents from a real master started on that database."""
    import grpc

    from master.journal import Journal
    from master.store import Store
    from protos import master_pb2 as pb
    from protos import master_pb2_grpc as pb_grpc

    n, per_commit = args.events, args.events_per_commit

    def append(db: Path, count: int, per: int) -> float:
        store = Store(f"sqlite:///{db}")
        store.upgrade()
        journal = Journal()
        try:
            t = time.perf_counter()
            for first in range(0, count, per):
                for i in range(first, min(first + per, count)):
                    # the commonest event under churn, with a detail of its usual size
                    start = (i % 100_000) * 10
                    journal.event("lease_requeued", worker_id=f"w{i % 1000:06d}",
                                  dataset="bench", epoch=i // 100_000, shard_index=i % 100_000,
                                  cause=("lost", "preempted", "timeout")[i % 3],
                                  detail=f"lease {i + 1} offset 5: [{start}, {start + 5}) "
                                  f"done, [{start + 5}, {start + 10}) back")
                store.apply(journal.swap())
            return time.perf_counter() - t
        finally:
            store.close()

    def read_store(db: Path) -> tuple[float, int]:
        store = Store(f"sqlite:///{db}")
        try:
            t = time.perf_counter()
            since, got, pages = 0, 0, 0
            while True:
                rows = store.events(since, EVENTS_PAGE)
                pages += 1
                if not rows:
                    break
                assert rows[0]["seq"] == since + 1, (since, rows[0]["seq"])
                got += len(rows)
                since = rows[-1]["seq"]
            return time.perf_counter() - t, got
        finally:
            store.close()

    def read_grpc(port: int, limit: int) -> tuple[float, int, int]:
        with grpc.insecure_channel(f"{HOST}:{port}") as channel:
            stub = pb_grpc.MasterStub(channel)
            stub.GetEvents(pb.GetEventsRequest(since=0, limit=1), timeout=60)  # connected
            t = time.perf_counter()
            since, got, calls = 0, 0, 0
            while True:
                res = stub.GetEvents(pb.GetEventsRequest(since=since, limit=limit), timeout=60)
                calls += 1
                if not res.events:
                    break
                got += len(res.events)
                since = res.next
            return time.perf_counter() - t, got, calls

    out: dict = {"events": n, "per_commit": per_commit, "append": [], "read_store": [],
                 "append_single": [], "read_grpc": {}}
    for rnd in range(args.events_rounds):
        # round 0's database is kept for the master below (start_master opens NAME.db)
        path = workdir / ("events.db" if rnd == 0 else f"events-{rnd}.db")
        out["append"].append(append(path, n, per_commit))
        seconds, got = read_store(path)
        assert got == n, (got, n)
        out["read_store"].append(seconds)
        log(f"  round {rnd}: append {n:,} events, {per_commit} a commit: "
            f"{out['append'][-1]:.2f} s; read back in pages of {EVENTS_PAGE:,}: {seconds:.2f} s")
        if rnd:
            path.unlink()
    # one event a commit (a lone registration, say): the per-commit floor, on fewer events
    single = args.events_single
    out["append_single"].append(append(workdir / "events-single.db", single, 1))
    out["single"] = single
    log(f"  append {single:,} events, 1 a commit: {out['append_single'][-1]:.2f} s")
    # over gRPC, from a real master on the first database
    t = time.perf_counter()
    server = start_master(workdir, "events", ())
    out["master_start_s"] = time.perf_counter() - t  # includes the interpreter's start
    try:
        for limit in (EVENTS_PAGE, 1000):
            runs = []
            for _ in range(args.events_rounds):
                seconds, got, calls = read_grpc(server.port, limit)
                assert got >= n, (got, n)  # plus the master's own master_started event
                runs.append(seconds)
            out["read_grpc"][limit] = dict(seconds=runs, events=got, calls=calls)
            log(f"  GetEvents, limit {limit:,}: {got:,} events in {calls} calls, "
                f"{min(runs):.2f} s (min of {len(runs)}; median {statistics.median(runs):.2f})")
    finally:
        server.stop()
    return out


# ---- report -----------------------------------------------------------------------------------


def render(results: dict, args) -> str:
    lines = []
    th = results.get("throughput")
    if th:
        lines += [
            f"Throughput: durable SQLite (fresh file per run), 10^6 shards of 10 records, "
            f"shuffled, {args.duration:g} s per run, {args.rounds} round(s); "
            f"echo = bare gRPC echo, {SERVER_THREADS} threads, same run, alternating",
            "",
            "| clients | path | shards/s | calls/s | p50 ms | p99 ms | echo calls/s "
            "| % of echo | x DLRover ref (800-1,100/s) | x DLRover measured "
            "| server CPU (cores) / echo's | server CPU us a call / echo's "
            "| thread switches a call / echo's |",
            "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
            "| ---: |",
        ]
        for r in th["summary"]:
            measured = r.get("x_dlrover_measured")
            lines.append(
                f"| {r['clients']} | {r['path']} | {r['shards_per_s']:,.0f} | "
                f"{r['calls_per_s']:,.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
                f"{r['echo_calls_per_s']:,.0f} | {r['pct_of_echo']:.0f} % | "
                f"{r['x_dlrover'][1]:.1f}-{r['x_dlrover'][0]:.1f}x | "
                + (f"{measured:.1f}x" if measured else "-")
                + f" | {r['server_cpu']:.2f} / {r['echo_cpu']:.2f} | {r['server_us']:.0f} / "
                f"{r['echo_us']:.0f} | {r['server_switches']:.1f} / {r['echo_switches']:.1f} |"
            )
        lines.append("")
    cost = results.get("cost")
    if cost:
        lines += ["Cost per shard operation (GetShard + ReportShard DONE), in-process, "
                  "min over rounds:", "",
                  "| mode | shards | us/op (min) | us/op (median) | create dataset ms |",
                  "| --- | ---: | ---: | ---: | ---: |"]
        for r in cost["rows"]:
            lines.append(f"| {r['mode']} | {r['shards']:,} | {r['us_per_op']:.1f} | "
                         f"{r['us_per_op_median']:.1f} | {r['create_ms']:.1f} |")
        lines.append("")
        for mode, ratio in sorted(cost["ratio_max_vs_min"].items()):
            lines.append(f"ratio largest/smallest, {mode}: {ratio:.2f}")
        lines.append("")
    rss = results.get("rss")
    if rss:
        lines += [
            f"Master RSS: {rss['rss_final_mb']:.0f} MB with {rss['shards']:,} shards, "
            f"{rss['workers']:,} workers registered, {rss['leases_held']:,} leases held, "
            f"{rss['churned_shards']:,} shards done (start {rss['rss_start_mb']:.0f} MB, "
            f"after the dataset {rss['rss_dataset_mb']:.0f} MB, after the workers "
            f"{rss['rss_workers_mb']:.0f} MB; CreateDataset of {rss['shards']:,} shards took "
            f"{rss['create_s'] * 1e3:.0f} ms)", ""]
    prog = results.get("progress")
    if prog:
        rows = prog["summary"]
        lines += [
            f"Cost of progress reports: {rows[0]['clients']} clients, batched path "
            f"(GetShard max_shards={BATCH} carrying DONE), {args.duration:g} s per run, "
            f"{rows[0]['rounds']} round(s), alternating batched / with heartbeats / "
            "piggybacked, fresh master each run; PROGRESS = half of each lease",
            "",
            "| variant | shards/s (mean) | shards/s per run | x batched (mean) "
            "| x batched per round | calls/s | p50 ms | p99 ms | server CPU us a shard "
            "| refused | errors |",
            "| --- | ---: | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for r in rows:
            lines.append(
                f"| {r['kind']} | {r['shards_per_s']:,.0f} | "
                + ", ".join(f"{x:,.0f}" for x in r["shards_per_s_runs"])
                + f" | {r['ratio']:.2f} | " + ", ".join(f"{x:.2f}" for x in r["ratio_rounds"])
                + f" | {r['calls_per_s']:,.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
                f"{r['server_us_per_shard']:.0f} | {r['refused']} | {r['errors']} |")
        lines.append("")
    ev = results.get("events")
    if ev:
        n = ev["events"]
        lines += [
            f"Events: append through Journal.event + Store.apply (SQLite file, WAL, "
            f"synchronous=FULL), read back in pages; min (median) of {len(ev['append'])} "
            "run(s)", "",
            "| measure | events | seconds (min) | seconds (median) | events/s |",
            "| --- | ---: | ---: | ---: | ---: |",
        ]

        def row(label: str, count: int, runs: list[float]) -> str:
            return (f"| {label} | {count:,} | {min(runs):.2f} | {statistics.median(runs):.2f} "
                    f"| {count / min(runs):,.0f} |")

        lines.append(row(f"append, {ev['per_commit']} a commit", n, ev["append"]))
        lines.append(row("append, 1 a commit", ev["single"], ev["append_single"]))
        lines.append(row(f"read, Store.events pages of {EVENTS_PAGE:,}", n, ev["read_store"]))
        for limit, g in sorted(ev["read_grpc"].items(), key=lambda kv: -int(kv[0])):
            lines.append(row(f"read, GetEvents over gRPC, limit {int(limit):,} "
                             f"({g['calls']} calls)", g["events"], g["seconds"]))
        lines += ["", f"(the master started on the {n:,}-event database in "
                  f"{ev['master_start_s']:.2f} s, interpreter start included)", ""]
    lines += ["Targets (DESIGN.md):"] + ([f"  {t}" for t in targets(results)]
                                         or ["  (none for the parts run)"])
    return "\n".join(lines)


def targets(results: dict) -> list[str]:
    out = []

    def verdict(ok: bool) -> str:
        return "PASS" if ok else "MISS"

    th = results.get("throughput")
    if th:
        top = max(r["clients"] for r in th["summary"])
        for r in th["summary"]:
            if r["clients"] != top:
                continue
            if r["path"] == "dlrover":
                continue
            if r["path"] == "batched":
                need = TARGET_X_DLROVER * DLROVER_REF[1]
                out.append(f"{verdict(r['shards_per_s'] >= need)} batched shards/s at {top} "
                           f"clients {r['shards_per_s']:,.0f} >= {need:,.0f} "
                           f"(3x DLRover 0.6.1's reference 1,100/s from DESIGN.md)")
                measured = r.get("x_dlrover_measured")
                if measured:
                    out.append(f"{verdict(measured >= TARGET_X_DLROVER)} batched shards/s at "
                               f"{top} clients {measured:.1f}x DLRover 0.6.1 measured in this "
                               f"run (>= {TARGET_X_DLROVER:g}x)")
            out.append(f"{verdict(r['pct_of_echo'] >= TARGET_PCT_ECHO)} {r['path']} calls/s "
                       f"at {top} clients {r['pct_of_echo']:.0f} % of echo (>= 70 %)")
    cost = results.get("cost")
    if cost:
        for mode, ratio in sorted(cost["ratio_max_vs_min"].items()):
            out.append(f"{verdict(ratio <= TARGET_FLAT)} cost per op flat, {mode}: "
                       f"ratio {ratio:.2f} <= {TARGET_FLAT}")
    rss = results.get("rss")
    if rss:
        out.append(f"{verdict(rss['rss_final_mb'] <= TARGET_RSS_MB)} master RSS "
                   f"{rss['rss_final_mb']:.0f} MB <= {TARGET_RSS_MB:.0f} MB")
    return out


def _git_commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                              capture_output=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "master"], cwd=ROOT, text=True,
                               capture_output=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + (" (master/ modified)" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="about a minute: short runs, fewer ops")
    p.add_argument("--duration", type=float, help="seconds per throughput run (default 5)")
    p.add_argument("--rounds", type=int,
                   help="echo/two-calls/echo/batched rounds per client count "
                   "(default 2, 1 with --quick)")
    p.add_argument("--clients", type=lambda s: [int(x) for x in s.split(",")],
                   default=[1, 8, 32], help="client process counts (default 1,8,32)")
    p.add_argument("--only", choices=["throughput", "cost", "rss", "progress", "events"],
                   action="append",
                   help="run only these parts (repeatable)")
    p.add_argument("--json", help="also write the results as JSON to this path")
    p.add_argument("--py-spy", help="profile the master during the largest batched run into "
                   "this file (.txt raw stacks, .json speedscope, else flamegraph .svg)")
    p.add_argument("--py-spy-gil", action="store_true",
                   help="with --py-spy: sample only the thread holding the GIL")
    p.add_argument("--dlrover-python", help="python of a separate venv with dlrover==0.6.1 "
                   "(pip install --no-deps dlrover==0.6.1 grpcio protobuf psutil requests "
                   "kubernetes): also run DLRover's local master, side by side")
    p.add_argument("--master-src", help="a directory holding a (patched) copy of the "
                   "`master` package to benchmark instead of this checkout's")
    p.add_argument("--serve-echo", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=SERVER_THREADS, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve_echo:
        serve_echo(args.threads)
        return 0
    # SIGTERM unwinds like an exception, so every server started is stopped on the way out
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.master_src:
        global MASTER_SRC
        MASTER_SRC = Path(args.master_src).resolve()
        if not (MASTER_SRC / "master" / "__main__.py").exists():
            p.error(f"--master-src {args.master_src}: no master/__main__.py there")
    if args.duration is None:
        args.duration = 2.0 if args.quick else 5.0
    if args.rounds is None:
        args.rounds = 1 if args.quick else 2
    args.cost_sizes = [10**3, 10**5, 10**6]
    args.cost_rounds = {False: 2 if args.quick else 3, True: 5 if args.quick else 9}
    args.cost_ops_core = 2000 if args.quick else 5000
    args.cost_ops_durable = 200 if args.quick else 500
    args.rss_shards = 10**6
    args.rss_workers = 1000
    args.rss_holders = 1000
    args.rss_churn = 70_000
    args.progress_rounds = args.rounds + 1  # 3 by default: the ratio is the point here
    args.events = 100_000
    args.events_per_commit = 100
    args.events_single = 2_000 if args.quick else 10_000
    args.events_rounds = 1 if args.quick else 3
    parts = args.only or ["throughput", "progress", "events", "cost", "rss"]

    def log(msg: str) -> None:
        print(msg, flush=True)

    machine = (f"{platform.machine()} {os.cpu_count()} CPUs, {platform.python_version()}, "
               f"load average {os.getloadavg()[0]:.2f} at start")
    results: dict = {"machine": machine, "argv": sys.argv[1:], "started": time.time(),
                     "commit": _git_commit()}
    log(f"bench_master: {machine}; commit {results['commit']}"
        + (f"; master from {MASTER_SRC}" if MASTER_SRC else ""))
    began = time.monotonic()
    results["load_average"] = {}

    def part(name: str, title: str) -> None:
        load = os.getloadavg()
        results["load_average"][name] = load
        log(f"{title} (load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f})")

    with tempfile.TemporaryDirectory(prefix="bench-master-") as tmp:
        workdir = Path(tmp)
        if "throughput" in parts:
            part("throughput", "[1+2] throughput, alternating echo / ours:")
            results["throughput"] = bench_throughput(args, workdir, log)
        if "progress" in parts:
            part("progress", f"[5] cost of progress reports, {max(args.clients)} clients, "
                 "alternating:")
            results["progress"] = bench_progress(args, workdir, log)
        if "events" in parts:
            part("events", f"[6] append and read {args.events:,} events:")
            results["events"] = bench_events(args, workdir, log)
        if "cost" in parts:
            part("cost", "[3] cost per shard operation:")
            results["cost"] = bench_cost(args, workdir, log)
        if "rss" in parts:
            part("rss", "[4] master RSS:")
            results["rss"] = bench_rss(args, workdir, log)
    results["elapsed_s"] = time.monotonic() - began
    results["load_average_end"] = os.getloadavg()[0]
    log("")
    log(render(results, args))
    log(f"\n(total {results['elapsed_s']:.0f} s, load average at end "
        f"{results['load_average_end']:.2f})")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
