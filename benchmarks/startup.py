"""bench_startup: how long each process takes from its start until it is of use (issue 37).

Each repetition starts, one after the other on an otherwise idle job:

- a master (fresh SQLite file): from the start to its "listening" line, and to the first
  GetStatus it answers ("serving");
- one PS (`--num-ps 1`, empty checkpoint directory): to its "listening" line, and to the
  master listing it with that address ("registered");
- one CTR worker (`examples.ctr.train`, `--log-every 0`): to its first trained batch (its
  first progress line, printed once the batch's push was sent);
- `elastic-ps --help`, `elastic-master --help`, `elastic-ctl --help`: to their exit.

and stops them. Times are from just before the process is spawned (the driver's clock);
logs are polled every 10 ms. With each of the three, the CPU seconds the process used until
then (`cpu s`, from /proc): what a busy machine's wall times hide. Printed: per measure the median, min and max over the
repetitions. `--code-root DIR` times another checkout's processes with this same driver (its
packages on PYTHONPATH, run from DIR); given twice, the repetitions alternate between the two
checkouts and their tables print side by side (the same load for both): the before/after
numbers in docs/benchmarks.md come from one run of one script.

    python scripts/bench_startup.py                       # 5 repetitions of this checkout
    python scripts/bench_startup.py --reps 3 --code-root ../elastic-ps-main --code-root .
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cluster.launch import CODE_ROOT, PS_LISTENING, Launcher, MasterProc, Proc, child_env
from protos import master_pb2 as pb

from .report import git_commit, machine, write_json

POLL_S = 0.01
TIMEOUT_S = 120.0
FIRST_BATCH = r": 1 steps, "
HELPS = {"elastic-ps --help": ["-m", "ps", "--help"],
         "elastic-master --help": ["-m", "master", "--help"],
         "elastic-ctl --help": ["-m", "master.ctl", "--help"]}


class Rep:
    """One repetition's processes, started from `root`'s code, logs in `workdir`."""

    def __init__(self, launcher: Launcher, root: Path, data: Path):
        self.launcher, self.root, self.data = launcher, root, data
        self.env = {"PYTHONPATH": str(root)}

    def _spawn(self, proc: Proc) -> float:
        self.launcher.launch(proc, start=False)
        t0 = time.monotonic()
        proc.start()
        return t0

    def master(self) -> tuple[Proc, dict]:
        log = self.launcher.log_path("master")
        argv = [sys.executable, "-m", "master", "--host", "127.0.0.1", "--port", "0",
                "--db", f"sqlite:///{log.with_suffix('.db')}"]
        proc = MasterProc(argv, log, "", ready=None, cwd=self.root, env=self.env)
        t0 = self._spawn(proc)
        match = _wait_line(proc, r"listening on \S*?:(?P<port>\d+)")
        listening = time.monotonic() - t0
        proc.port = int(match["port"])
        _until(lambda: _answers(proc), proc)
        return proc, {"master listening": listening, "master serving": time.monotonic() - t0,
                      "master serving, cpu s": _cpu_s(proc)}

    def ps(self, master: Proc) -> tuple[Proc, dict]:
        log = self.launcher.log_path("ps0")
        argv = [sys.executable, "-m", "ps", "--host", "127.0.0.1", "--port", "0",
                "--data-port", "0", "--index", "0", "--num-ps", "1", "--checkpoint-dir",
                str(log.with_suffix(".ckpt")), "--master", master.address]
        proc = Proc(argv, log, ready=None, cwd=self.root, env=self.env)
        t0 = self._spawn(proc)
        match = _wait_line(proc, PS_LISTENING)
        listening = time.monotonic() - t0
        _until(lambda: _listed(master, match["grpc"]), proc)
        return proc, {"ps listening": listening, "ps registered": time.monotonic() - t0,
                      "ps registered, cpu s": _cpu_s(proc)}

    def worker(self, master: Proc) -> tuple[Proc, dict]:
        argv = [sys.executable, "-m", "examples.ctr.train", "--master", master.address,
                "--data", str(self.data), "--epochs", "1", "--log-every", "0",
                "--name", "bench-worker"]
        proc = Proc(argv, self.launcher.log_path("worker"), ready=None, cwd=self.root,
                    env=self.env)
        t0 = self._spawn(proc)
        _wait_line(proc, FIRST_BATCH)
        return proc, {"worker first batch": time.monotonic() - t0,
                      "worker first batch, cpu s": _cpu_s(proc)}

    def helps(self) -> dict:
        out = {}
        for name, args in HELPS.items():
            t0 = time.monotonic()
            done = subprocess.run([sys.executable, *args], cwd=self.root, capture_output=True,
                                  env=child_env(**self.env), timeout=TIMEOUT_S)
            out[name] = time.monotonic() - t0
            if done.returncode != 0:
                raise RuntimeError(f"{name} exited {done.returncode}: {done.stderr[-2000:]}")
        return out


def _cpu_s(proc: Proc) -> float:
    """The CPU seconds (user + system, all its threads) `proc` used so far: on a busy machine
    close to what its wall time would be on a quiet one (its start runs mostly on one
    thread), where the wall times above count the waits for a core too."""
    fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wait_line(proc: Proc, pattern: str) -> re.Match:
    regex = re.compile(pattern)
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        exited = not proc.alive
        for line in proc.output().splitlines():
            match = regex.search(line)
            if match:
                return match
        if exited or time.monotonic() > deadline:
            raise RuntimeError(f"{proc.name}: no line matching {pattern!r}:\n"
                               f"{proc.output(tail=3000)}")
        time.sleep(POLL_S)


def _until(predicate, proc: Proc) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not predicate():
        if not proc.alive or time.monotonic() > deadline:
            raise RuntimeError(f"{proc.name} exited or timed out:\n{proc.output(tail=3000)}")
        time.sleep(POLL_S)


def _answers(master) -> bool:
    try:
        master.status(timeout=1.0)
        return True
    except Exception:  # noqa: BLE001 - not serving yet
        return False


def _listed(master, grpc_address: str) -> bool:
    try:
        listed = master.stub().ListPS(pb.ListPSRequest(), timeout=1.0)
    except Exception:  # noqa: BLE001 - the master is busy: ask again
        return False
    return any(p.address == grpc_address for p in [*listed.ps, *listed.joining])


def repetition(workdir: Path, root: Path, data: Path) -> dict:
    with Launcher(workdir) as launcher:
        rep = Rep(launcher, root, data)
        times = rep.helps()
        master, t = rep.master()
        times.update(t)
        ps, t = rep.ps(master)
        times.update(t)
        worker, t = rep.worker(master)
        times.update(t)
    return {k: round(v, 3) for k, v in times.items()}


def summary(reps: list[dict]) -> dict:
    out = {}
    for key in reps[0]:
        values = [r[key] for r in reps]
        out[key] = {"median": round(statistics.median(values), 3),
                    "min": min(values), "max": max(values), "values": values}
    return out


def make_data(root: Path, out: Path, records: int) -> None:
    subprocess.run([sys.executable, "-m", "examples.ctr.data", "--out", str(out),
                    "--records", str(records), "--test-records", "1000"], cwd=root,
                   env=child_env(PYTHONPATH=str(root)), check=True, capture_output=True,
                   timeout=TIMEOUT_S)


def run(args, workdir: Path) -> dict:
    roots = [Path(r).resolve() for r in args.code_root]
    data = workdir / "ctr"
    make_data(roots[0], data, args.records)
    reps: dict[int, list] = {k: [] for k in range(len(roots))}
    for i in range(args.reps):
        for k, root in enumerate(roots):  # alternating: both see the same load
            times = repetition(workdir / f"root{k}-rep{i}", root, data)
            print(f"  {k}: rep {i + 1}: " + ", ".join(f"{n} {v:.2f}s"
                                                     for n, v in times.items()), flush=True)
            reps[k].append(times)
    return {"runs": [{"code_root": str(root), "commit": git_commit_at(root), "reps": reps[k],
                      "summary": summary(reps[k])} for k, root in enumerate(roots)]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=5, help="repetitions (each a fresh job)")
    p.add_argument("--records", type=int, default=20_000, help="CTR records the worker reads")
    p.add_argument("--code-root", action="append", default=[],
                   help="the checkout whose processes are timed (default: this one); twice: "
                        "both, alternating")
    p.add_argument("--workdir", default="", help="keep logs here (default: a temporary dir)")
    p.add_argument("--json", default="", help="also write the results here")
    args = p.parse_args(argv)
    if args.reps < 1:
        p.error("--reps must be >= 1")
    args.code_root = args.code_root or [str(CODE_ROOT)]
    if len(args.code_root) > 2:
        p.error("--code-root: at most two checkouts")
    commits = [git_commit_at(Path(r)) for r in args.code_root]
    print(f"machine: {machine()}; commits {', '.join(commits)}", flush=True)
    if args.workdir:
        results = run(args, Path(args.workdir))
    else:
        with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
            results = run(args, Path(tmp))
    results.update(machine=machine(), reps_n=args.reps)
    print("\n".join(table(results["runs"])))
    if args.json:
        write_json(args.json, results)
    return 0


def table(runs: list[dict]) -> list[str]:
    """Seconds from start, median (min-max), one column per checkout."""
    head = f"{'seconds from start':<24}" + "".join(f" {r['commit'][:20]:>22}" for r in runs)
    lines = [head]
    for key in runs[0]["summary"]:
        cells = []
        for r in runs:
            s = r["summary"][key]
            cells.append(f" {s['median']:>7.2f} ({s['min']:.2f}-{s['max']:.2f})".rjust(23))
        lines.append(f"{key:<24}" + "".join(cells))
    return lines


def git_commit_at(root: Path) -> str:
    if root.resolve() == CODE_ROOT:
        return git_commit("ps")
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, text=True,
                              capture_output=True, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
