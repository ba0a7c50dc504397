"""elastic-ps in the PS benchmark: the real `python -m ps --standalone` and
`worker_sdk.ps.data_client.DataClient` workers, dense (pull all + push a gradient) and embedding
(pull_rows + push_rows)."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from benchmarks.ps.harness import Run, loop
from benchmarks.ps.model import LR, model_shapes, numel
from cluster.launch import Launcher


def worker_elastic(args) -> None:
    import torch

    from worker_sdk.ps.data_client import DataClient

    shapes = model_shapes(args.params)
    grads = {n: torch.full(s, 1.0) for n, s in shapes}
    c = DataClient([args.endpoint], timeout_s=120)
    c.set_layout({n: numel(s) * 4 for n, s in shapes})
    names = [n for n, _ in shapes]

    def step():
        c.pull(names)
        c.push(grads)

    loop(Path(args.run_dir), args.rank, step)
    c.close()


def worker_embedding(args) -> None:
    import torch

    from worker_sdk.ps.data_client import DataClient

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

    loop(Path(args.run_dir), args.rank, step)
    c.close()



def run_elastic(work: Path, params: int, workers: int, seconds: float, role: str = "elastic",
                extra_worker: list[str] = (), ps_flags: list[str] = (), ipc: bool = True) -> float:
    ck = Path(tempfile.mkdtemp(dir=work))
    if not ipc:  # TCP only: no same-host socket
        ps_flags = [*ps_flags, "--data-ipc", "off"]
    try:
        with Launcher(work) as launcher:
            server = launcher.ps(None, "--checkpoint-interval", "0", *ps_flags,
                                 checkpoint_dir=ck, timeout=120)
            endpoint = server.data_address
            _init_elastic(endpoint, params, role)
            run = Run(launcher, seconds)
            procs = run.workers(role, workers, "--endpoint", endpoint, "--params", str(params),
                                *extra_worker)
            try:
                return run.measure(procs)
            finally:
                for p in procs:
                    p.kill()
                server.terminate()
    finally:
        shutil.rmtree(ck, ignore_errors=True)


def _init_elastic(endpoint: str, params: int, role: str) -> None:
    import torch

    from worker_sdk.ps.data_client import DataClient
    from pswire.tables import TableSpec

    with DataClient([endpoint], timeout_s=120) as c:
        if role == "embedding":
            c.init_parameters({}, "sgd", tables=[(TableSpec("emb", 64, "normal", 0.0, 0.01),
                                                  {"name": "adagrad", "lr": 0.01})])
        else:
            c.init_parameters({n: torch.zeros(s) for n, s in model_shapes(params)}, "sgd", lr=LR)
