"""torch.distributed.rpc in the PS benchmark, in the style of PyTorch's parameter-server
tutorial: an RRef to a ParameterServer object, `rpc_sync` pull and push, SGD applied with
torch.optim under a lock; TensorPipe's default transports and channels, TCP only
(`_transports=["uv"]`), or also the basic channel (bytes through the TCP transport too)."""
from __future__ import annotations

import socket
import threading
from pathlib import Path

from benchmarks.ps.harness import Run, loop, spawn
from benchmarks.ps.model import LR, model_shapes
from cluster.launch import Launcher


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

    loop(Path(args.run_dir), args.rank, step)
    rpc.shutdown()



def run_rpc(work: Path, params: int, workers: int, seconds: float, transport: str) -> float:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    common = ["--params", str(params), "--world", str(workers + 1), "--rpc-port", str(port),
              "--transport", transport]
    with Launcher(work) as launcher:
        spawn(launcher, "rpc-server", *common)
        run = Run(launcher, seconds)
        return run.measure(run.workers("rpc", workers, *common))
