"""A worker's CPU per `DataClient.step` against one real standalone PS, over TCP and over the
same-host socket: the cost of the worker's request path (split, RoutedCall, CallRetry, the
exchange, the transport) without training or data around it (issue 41).

    python -m benchmarks.ps.request_path [--steps 1500] [--json out.json]

One `python -m ps --standalone` in another process; in this process a DataClient sends Steps of
a 64x64 + 64 dense push and pull and 1,024 row ids pushed and pulled. Printed per transport:
the calling thread's CPU (`time.thread_time()`) and wall time per step, over `--steps` steps
after 100 warm-up steps. Run it alternately with another checkout (PYTHONPATH) to compare two
commits on a busy machine.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from cluster.launch import Launcher
from worker_sdk.ps.data_client import DataClient

WARM_UP = 100


def measure(address: str, same_host: bool, steps: int) -> dict:
    with DataClient([address], timeout_s=30, same_host=same_host) as c:
        model = {"w": torch.zeros(64, 64), "b": torch.zeros(64)}
        c.init_parameters(model, "sgd", lr=0.0, tables=[{"name": "t", "dim": 8}])
        grads = {n: torch.full_like(t, 1e-6) for n, t in model.items()}
        ids = torch.randint(0, 5000, (1024,))
        rows = [("t", ids, torch.ones(1024, 8))]

        def step() -> None:
            c.step(grads, rows=rows, pull=["w", "b"], pull_rows={"t": ids})

        for _ in range(WARM_UP):
            step()
        cpu, wall = time.thread_time(), time.perf_counter()
        for _ in range(steps):
            step()
        return {"worker_us_per_step": 1e6 * (time.thread_time() - cpu) / steps,
                "wall_us_per_step": 1e6 * (time.perf_counter() - wall) / steps,
                "transport": c.transports[0]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--json", help="also write the results here")
    a = p.parse_args(argv)
    out = {}
    with tempfile.TemporaryDirectory(prefix="request-path-") as tmp, Launcher(Path(tmp)) as launcher:
        ps = launcher.ps(None, "--checkpoint-interval", "0")
        for name, same_host in (("tcp", False), ("same-host", True)):
            out[name] = got = measure(ps.data_address, same_host, a.steps)
            print(f"{name:10s} worker CPU {got['worker_us_per_step']:6.0f} us/step, wall "
                  f"{got['wall_us_per_step']:6.0f} us/step ({got['transport']})", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
