"""PS primary SIGKILLed with a backup in sync -> the first push answered afterwards; and what a
backup costs on push+pull throughput.

Failover: per trial a fresh primary and backup of one PS index on a real master
(`--ps-replicas 1`, default `--ps-failover-timeout`), a client pushing a small tensor in a
loop, the primary SIGKILLed at a random moment; the time from the kill to the first push
answered after it, and whether the parameter still equals the number of answered pushes.
The target (docs/benchmarks.md): at most 3 s, no acknowledged push lost.

Cost: dense push+pull MB/s of one client against one PS (`--ps-replicas 0`) and against a
primary with one in-sync backup (`--ps-replicas 1`), alternating, same tensor sizes.

    python scripts/bench_failover.py --trials 10 --rounds 2
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import threading
import time

import torch

from cluster.launch import Launcher
from protos import master_pb2 as pb
from worker_sdk.ps.data_client import DataClient

from .report import git_commit, machine, write_json


def _primary(master) -> pb.PSInfo:
    listed = master.stub().ListPS(pb.ListPSRequest(), timeout=5).ps
    return listed[0] if listed else pb.PSInfo()


def _wait(what: str, predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _pair(launcher: Launcher, master, n: int, replicas: int):
    """A primary (and with replicas, an in-sync backup) of index 0."""
    before = _primary(master).generation
    primary = launcher.ps(master.address, checkpoint_dir=f"p{n}")
    _wait("the primary", lambda: _primary(master).data_address == primary.data_address
          and _primary(master).generation > before)
    backup = None
    if replicas:
        backup = launcher.ps(master.address, checkpoint_dir=f"b{n}")
        _wait("the backup in sync",
              lambda: [b.state for b in _primary(master).backups] == ["in_sync"])
    return primary, backup


def failover_trial(launcher: Launcher, master, n: int) -> tuple[float, bool]:
    primary, backup = _pair(launcher, master, n, 1)
    answered, after_kill = 0, []
    killed = threading.Event()
    try:
        with DataClient(master=master.address, timeout_s=5, max_attempts=30) as client:
            client.init_parameters({"w": torch.zeros(1)}, "sgd", lr=1.0)
            kill_after = time.monotonic() + 1.0 + random.random()
            kill_time = [0.0]
            while not after_kill or answered < 20:
                if not killed.is_set() and time.monotonic() >= kill_after:
                    primary.kill()
                    kill_time[0] = time.monotonic()
                    killed.set()
                client.push({"w": -torch.ones(1)})
                answered += 1
                if killed.is_set() and not after_kill:
                    after_kill.append(time.monotonic() - kill_time[0])
            exact = client.pull()["w"].item() == answered
        return after_kill[0], exact
    finally:
        primary.kill()
        if backup is not None:
            backup.kill()


def throughput(launcher: Launcher, master, n: int, replicas: int, numel: int,
               seconds: float) -> float:
    """push+pull MB/s of one client for `seconds`."""
    primary, backup = _pair(launcher, master, n, replicas)
    try:
        with DataClient(master=master.address, timeout_s=30) as client:
            client.init_parameters({"w": torch.zeros(numel)}, "sgd", lr=0.01)
            grad = torch.ones(numel)
            client.pull()
            client.push({"w": grad})
            steps, start = 0, time.monotonic()
            while time.monotonic() - start < seconds:
                client.pull()
                client.push({"w": grad})
                steps += 1
            elapsed = time.monotonic() - start
        return 2 * steps * numel * 4 / elapsed / 1e6
    finally:
        primary.kill()
        if backup is not None:
            backup.kill()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=10, help="failover trials")
    p.add_argument("--rounds", type=int, default=2, help="throughput rounds (each: 0 and 1 "
                   "backup, alternating)")
    p.add_argument("--numel", type=int, default=1_000_000, help="parameters pushed and pulled")
    p.add_argument("--seconds", type=float, default=5.0, help="seconds per throughput run")
    p.add_argument("--json", default="", help="also write the results here")
    args = p.parse_args(argv)
    print(f"machine: {machine()}; commit {git_commit('ps')}")
    results: dict = {"machine": machine(), "commit": git_commit("ps")}
    with tempfile.TemporaryDirectory() as tmp, Launcher(tmp) as launcher:
        master = launcher.master("--ps-replicas", "1")
        plain = launcher.master("--ps-replicas", "0", name="master-plain")
        times, exact = [], []
        for n in range(args.trials):
            t, ok = failover_trial(launcher, master, n)
            times.append(t)
            exact.append(ok)
            print(f"  trial {n + 1}: first answered push {t:.2f} s after the kill, "
                  f"parameter == answered pushes: {ok}", flush=True)
        rates: dict[int, list[float]] = {0: [], 1: []}
        for r in range(args.rounds):
            for replicas in (0, 1):
                m = plain if replicas == 0 else master
                rate = throughput(launcher, m, 100 + 2 * r + replicas, replicas, args.numel,
                                  args.seconds)
                rates[replicas].append(rate)
                print(f"  round {r + 1}, {replicas} backup: {rate:.0f} MB/s push+pull",
                      flush=True)
    if times:
        print(f"PS primary SIGKILLed -> first answered push, {len(times)} trials: min "
              f"{min(times):.2f} s, median {statistics.median(times):.2f} s, max "
              f"{max(times):.2f} s (target: at most 3 s); exact in {sum(exact)}/{len(exact)}")
    if rates[0]:
        m0, m1 = statistics.median(rates[0]), statistics.median(rates[1])
        print(f"push+pull of {args.numel} float32, 1 client: {m0:.0f} MB/s without a backup, "
              f"{m1:.0f} MB/s with one (ratio {m1 / m0:.2f})")
    results.update(failover_s=times, exact=exact, mb_s_no_backup=rates[0],
                   mb_s_one_backup=rates[1], numel=args.numel)
    if args.json:
        write_json(args.json, results)
    return 0 if all(exact) else 1


if __name__ == "__main__":
    sys.exit(main())
