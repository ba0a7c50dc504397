"""elastic-ps runs of bench_train: a master, 2 PS and 1 or 2 worker processes on this machine.

Each run starts its own master and PS (a fresh model), starts the workers, waits until each
has loaded torch, the data and the model, starts them together, and measures records/s as all
records over the span from the first worker's start to the last one's end. The step timeline
is summed over the workers. The AUC is the held-out AUC of the model the PS hold at the end.

CPU time: each worker measures its own over its training loop (all its threads); the master's
and each PS's (primaries and backups) are read from the OS (psutil: user + system) when the
workers are started and once they all finished, before the AUC is evaluated. `trainer_cpus`
and `server_cpus` pin the workers, and the master and PS, to those CPUs (`--pin`).
"""
from __future__ import annotations

import json
import secrets
import time
from pathlib import Path

import psutil

from cluster.certs import make_tls_files
from cluster.launch import Launcher
from rpckit.auth import ENV_TLS_CA, ENV_TOKEN

PHASES = ("read", "embedding", "pull", "compute", "push")  # benchmarks/train/worker.py
START_S = 300.0  # a server's start on a busy machine, pinned to one shared core


def run(data: str, workdir: Path, batch: int, epochs: int, lr: float, workers: int = 1,
        num_ps: int = 2, max_inflight: int = 1, shard_size: int = 8192,
        plain: bool = False, backups: int = 0, prefetch_ahead: int = 1, secure: bool = False,
        trainer_cpus: set[int] | None = None, server_cpus: set[int] | None = None,
        read_own_writes: bool = False, correct_own_writes: bool | None = None) -> dict:
    """`backups` per PS index (--ps-replicas): every push is answered only after they applied
    it too, so this measures what a backup costs training. `secure`: TLS and a token on every
    call (gRPC over TLS, the data plane under CURVE, so no plain same-host socket).
    `read_own_writes`, `correct_own_writes`: the workers' PSClient options of those names
    (correct_own_writes None: PSClient's default)."""
    workdir.mkdir(parents=True, exist_ok=True)
    go = workdir / "go"
    flags, client = _security(workdir) if secure else ((), {})
    env = {ENV_TLS_CA: client["tls_ca"], ENV_TOKEN: client["token"]} if secure else None
    with Launcher(workdir) as launcher:
        master = launcher.master(*(["--ps-replicas", str(backups)] if backups else []), *flags,
                                 cpus=server_cpus, timeout=START_S, **client)
        servers = [launcher.ps(master.address, *flags, index=i, num_ps=num_ps,
                               checkpoint_dir=f"ps{i}", cpus=server_cpus, timeout=START_S)
                   for i in range(num_ps)]
        for i in range(num_ps):
            for b in range(backups):
                servers.append(launcher.ps(master.address, *flags, index=i, num_ps=num_ps,
                                           checkpoint_dir=f"ps{i}-backup{b}", cpus=server_cpus,
                                           timeout=START_S))
        if backups:
            _wait_in_sync(master, num_ps, backups)
        outs = [workdir / f"worker{w}.json" for w in range(workers)]
        procs = [launcher.python(
            "-m", "benchmarks.train.worker", "--master", master.address, "--data", data,
            "--batch", str(batch), "--epochs", str(epochs), "--lr", str(lr),
            "--shard-size", str(shard_size), "--max-inflight", str(max_inflight),
            "--prefetch-ahead", str(prefetch_ahead),
            "--name", f"w{w}", "--start-when", str(go), "--out", str(out),
            *(["--plain"] if plain else []),
            *(["--read-own-writes"] if read_own_writes else []),
            "--correct-own-writes", {None: "auto", True: "on", False: "off"}[correct_own_writes],
            name=f"w{w}", cpus=trainer_cpus, env=env)
            for w, out in enumerate(outs)]
        deadline = time.monotonic() + 300
        while not all(Path(str(o) + ".ready").exists() for o in outs):
            for proc in procs:
                if not proc.alive:
                    raise RuntimeError(f"a bench worker exited early:\n{proc.output(tail=3000)}")
            if time.monotonic() > deadline:
                raise RuntimeError("bench workers did not get ready within 300 s")
            time.sleep(0.05)
        watched = [psutil.Process(p.pid) for p in (master, *servers)]
        cpu_before = [_cpu(p) for p in watched]
        go.touch()
        for proc in procs:
            if proc.wait(600) != 0:
                raise RuntimeError(f"a bench worker failed:\n{proc.output(tail=3000)}")
        server_cpu = [_cpu(p) - c for p, c in zip(watched, cpu_before)]
        results = [json.loads(o.read_text()) for o in outs]
        auc = _auc(master.address, data, client)
    records = sum(r["records"] for r in results)
    span = max(r["end"] for r in results) - min(r["start"] for r in results)
    wall = sum(r["wall_s"] for r in results)
    timeline = {k: sum(r[f"{k}_s"] for r in results) / wall for k in PHASES}
    return {"records_per_s": records / span, "wall_s": span, "auc": auc, "records": records,
            "timeline": timeline, "stale": sum(r["stale"] for r in results),
            # correct_own_writes: pushes added to a step's read, pushes not added, rows a push
            # met in a read without their state (not corrected), and reads answered after the
            # next push left that the versions showed served before it (added)
            "own_writes": [sum(r["own_writes"][i] for r in results) for i in (0, 1, 2, 3)],
            "worker_cpu_s": sum(r["cpu_s"] for r in results), "master_cpu_s": server_cpu[0],
            "ps_cpu_s": server_cpu[1:]}


def _security(workdir: Path) -> tuple[tuple[str, ...], dict]:
    """A CA, a server certificate and a token of this run's own: the servers' flags, and
    what a client is given (tls_ca, token)."""
    tls = make_tls_files(workdir / "tls")
    token = secrets.token_hex(16)
    token_file = workdir / "token"
    token_file.write_text(token + "\n")
    return tls.server_flags(token_file), {"tls_ca": tls.ca, "token": token}


def _cpu(proc: psutil.Process) -> float:
    """The process's CPU seconds so far (user + system, all its threads)."""
    times = proc.cpu_times()
    return times.user + times.system


def _wait_in_sync(master, num_ps: int, backups: int, timeout_s: float = 120.0) -> None:
    from protos import master_pb2 as pb

    deadline = time.monotonic() + timeout_s
    while True:
        listed = master.stub().ListPS(pb.ListPSRequest(), timeout=5)
        synced = [sum(b.state == "in_sync" for b in p.backups) for p in listed.ps]
        if listed.complete and len(synced) == num_ps and min(synced) >= backups:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"backups not in sync within {timeout_s:.0f} s: {synced}")
        time.sleep(0.1)


def _auc(master: str, data: str, client: dict) -> float:
    from examples.ctr.dataset import ClickLog
    from examples.ctr.evaluate import evaluate
    from benchmarks.train.models import elastic_model
    from worker_sdk.ps.client import PSClient

    test = ClickLog(data, "test")
    model = elastic_model(test.meta)
    with PSClient(master=master, tls_ca=client.get("tls_ca"),
                  auth_token=client.get("token")) as ps:
        ps.attach(model)
        return evaluate(ps, model, test)
