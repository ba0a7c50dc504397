"""A whole elastic-ps job on this machine: master, PS and CTR workers as real processes.

Used by the demo and the end-to-end tests: start the master on an SQLite file, N parameter
servers, and training workers (`python -m examples.ctr.train`), scale them, kill them with any
signal, follow the master's status and the model's held-out AUC, and stop everything (always:
also on errors and Ctrl-C, through `close()` / the context manager).
"""
from __future__ import annotations

import time
from pathlib import Path

import grpc

from cluster.launch import Launcher, MasterProc, Proc, PSProc
from protos import master_pb2 as pb


class LocalCluster:
    def __init__(self, workdir: Path, data: Path, num_ps: int = 2, dataset: str = "ctr-train",
                 train_args: tuple[str, ...] = (), master_flags: tuple[str, ...] = ()):
        self.launcher = Launcher(workdir)
        self.workdir = self.launcher.workdir
        self.data = Path(data)
        self.num_ps = num_ps
        self.dataset = dataset
        self.train_args = list(train_args)
        self.db = f"sqlite:///{self.workdir / 'master.db'}"
        self.master_flags = master_flags
        self.master: MasterProc | None = None
        self.ps: list[PSProc] = []
        self.workers: dict[str, Proc] = {}
        self._evaluator = None

    # ---- processes --------------------------------------------------------------------------

    def start(self) -> "LocalCluster":
        self.master = self.launcher.master(*self.master_flags, db=self.db)
        for i in range(self.num_ps):
            self.ps.append(self.launcher.ps(self.master.address, index=i, num_ps=self.num_ps,
                                            checkpoint_dir=f"ps{i}"))
        return self

    def restart_master(self) -> None:
        """SIGKILL the master and start it again on the same database and port."""
        self.master.restart()

    def standby_worker(self, *extra: str) -> tuple[str, Path]:
        """A worker started now that joins only once the returned file is created: its
        interpreter and torch are loaded beforehand, as on a machine of its own."""
        go = self.workdir / f"go-{len(self.workers) + 1}"
        return self.add_worker("--start-when", str(go), *extra), go

    def add_worker(self, *extra: str) -> str:
        name = f"worker-{len(self.workers) + 1}"
        self.workers[name] = self.launcher.python(
            "-m", "examples.ctr.train", "--master", self.master.address, "--data",
            str(self.data), "--dataset", self.dataset, "--name", name, *self.train_args,
            *extra, name=name)
        return name

    def alive(self) -> list[str]:
        return [n for n, p in self.workers.items() if p.alive]

    def signal_worker(self, name: str, sig: int) -> None:
        self.workers[name].signal(sig)

    def wait_workers(self, timeout: float) -> dict[str, int]:
        deadline = time.monotonic() + timeout
        return {n: p.wait(max(0.1, deadline - time.monotonic()))
                for n, p in self.workers.items()}

    def close(self) -> None:
        if self._evaluator is not None:
            self._evaluator[0].close()
            self._evaluator = None
        self.launcher.close()

    def __enter__(self) -> "LocalCluster":
        try:
            return self.start()
        except BaseException:
            self.close()  # a PS that failed to start must not leave the master running
            raise

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- what the master says ---------------------------------------------------------------

    def status(self, timeout: float = 5.0) -> pb.GetStatusResponse | None:
        try:
            return self.master.status(timeout)
        except grpc.RpcError:
            return None  # restarting

    def dataset_status(self) -> pb.DatasetStatus | None:
        status = self.status()
        if status is None:
            return None
        return next((ds for ds in status.datasets if ds.spec.name == self.dataset), None)

    def training(self, name: str) -> bool:
        """Whether worker `name` is registered and holds a lease (it is past its start-up)."""
        status = self.status()
        return bool(status) and any(w.name == name and w.leases for w in status.workers)

    def ledger(self) -> pb.GetLedgerResponse:
        return self.master.stub().GetLedger(pb.GetLedgerRequest(dataset=self.dataset),
                                            timeout=10)

    def events(self) -> list[pb.Event]:
        return self.master.events()

    def evaluate(self) -> float:
        """The held-out AUC of the model as the PS hold it now (call once training started:
        the evaluator only reads the model, it never initialises it)."""
        from examples.ctr.dataset import ClickLog
        from examples.ctr.evaluate import evaluate
        from examples.ctr.model import build_model
        from worker_sdk.ps_client import PSClient

        if self._evaluator is None:
            test = ClickLog(self.data, "test")
            model = build_model(test.meta)
            client = PSClient(master=self.master.address)
            client.attach(model)
            self._evaluator = (client, model, test)
        client, model, test = self._evaluator
        return evaluate(client, model, test)


def records_done(ds: pb.DatasetStatus | None) -> int:
    return sum(e.records_done for e in ds.epochs) if ds else 0

