"""Where the orchestrator and the role processes meet. A role is a fresh interpreter
(`python -m benchmarks.ps.role --role ...`, started by the launcher); a worker role warms up,
says ready and waits at a file barrier, loops its step until the end time the orchestrator
wrote, and prints its count as JSON. `Run` is the orchestrator's side of one measurement."""
from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from cluster.launch import Launcher, Proc


def spawn(launcher: Launcher, role: str, *args: str, ready: str | None = None) -> Proc:
    """Start role `role` (see benchmarks.ps.role) with its flags; killed when `launcher`
    closes."""
    return launcher.python("-m", "benchmarks.ps.role", "--role", role, *args, name=role,
                           ready=ready)


def barrier(run_dir: Path, rank: int) -> float:
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


def loop(run_dir: Path, rank: int, step, warmup: int = 3) -> None:
    for _ in range(warmup):
        step()
    end = barrier(run_dir, rank)
    count = 0
    start = time.time()
    while time.time() < end:
        step()
        count += 1
    print(json.dumps({"rank": rank, "count": count, "seconds": time.time() - start}), flush=True)



class Run:
    """One measurement: workers, a barrier, their summed rate (steps per second)."""

    def __init__(self, launcher: Launcher, seconds: float):
        self.launcher = launcher
        self.seconds = seconds
        self.dir = Path(tempfile.mkdtemp(dir=launcher.workdir))

    def workers(self, role: str, count: int, *args: str) -> list[Proc]:
        return [spawn(self.launcher, role, *args, "--rank", str(r), "--run-dir", str(self.dir))
                for r in range(count)]

    def measure(self, workers: list[Proc], timeout: float = 300) -> float:
        deadline = time.time() + timeout
        while len(list(self.dir.glob("ready-*"))) < len(workers):
            if any(w.returncode not in (None, 0) for w in workers) or time.time() > deadline:
                raise RuntimeError("workers did not get ready (see logs in "
                                   f"{self.launcher.workdir})")
            time.sleep(0.01)
        tmp = self.dir / "go.tmp"
        tmp.write_text(repr(time.time() + self.seconds))
        tmp.rename(self.dir / "go")
        total = 0.0
        for w in workers:
            w.wait(self.seconds + 120)
            rows = [json.loads(line) for line in w.output().splitlines() if line.startswith("{")]
            if not rows:
                raise RuntimeError(f"a worker printed no count (exit {w.returncode}; logs in "
                                   f"{self.launcher.workdir})")
            total += rows[-1]["count"] / rows[-1]["seconds"]
        return total
