"""[1+2] Throughput: shards handed out and acknowledged per second with 1, 8 and 32 client
processes against a real master on a fresh SQLite file per run, on the two-calls and the
batched path, alternating with a bare gRPC echo server (and DLRover 0.6.1's master with
--dlrover-python) so that machine noise hits all of them."""
from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.master.load import Clients
from benchmarks.master.servers import create_dataset, start_dlrover, start_echo, start_master
from cluster.launch import Launcher

DLROVER_REF = (800, 1100)  # get+report round trips/s at 32 client processes (docs/benchmarks.md)


def bench_throughput(args, workdir: Path, log) -> dict:
    launcher = Launcher(workdir)
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
                        server = start_echo(launcher, name)
                    elif kind == "dlrover":
                        server = start_dlrover(launcher, name, args.dlrover_python)
                    else:
                        server = start_master(launcher, name)
                    try:
                        if kind not in ("echo", "dlrover"):
                            # 10^6 shards of 10 records, 1,000 epochs: never runs out
                            create_dataset(server.port, "bench", 10_000_000, 10, 1000)
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
        launcher.close()
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

