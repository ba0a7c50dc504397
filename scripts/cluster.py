"""A whole elastic-ps job on this machine: master, PS and CTR workers as real processes.

Used by the demo and the end-to-end tests: start the master on an SQLite file, N parameter
servers, and training workers (`scripts/train_ctr.py`), scale them, kill them with any signal,
follow the master's status and the model's held-out AUC, and stop everything (always: also
on errors and Ctrl-C, through `close()` / the context manager).
"""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc

from protos import master_pb2 as pb
from protos import master_pb2_grpc as pb_grpc
from scripts.launch import ROOT, Proc, master_args

TRAIN = ROOT / "scripts" / "train_ctr.py"


class LocalCluster:
    def __init__(self, workdir: Path, data: Path, num_ps: int = 2, dataset: str = "ctr-train",
                 train_args: tuple[str, ...] = (), master_flags: tuple[str, ...] = ()):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.data = Path(data)
        self.num_ps = num_ps
        self.dataset = dataset
        self.train_args = list(train_args)
        self.db = f"sqlite:///{self.workdir / 'master.db'}"
        self.master_flags = master_flags
        self.master: Proc | None = None
        self.ps: list[Proc] = []
        self.workers: dict[str, subprocess.Popen] = {}
        self._logs: list = []
        self._n = 0
        self._stub = None
        self._evaluator = None

    # ---- processes --------------------------------------------------------------------------

    def start(self) -> "LocalCluster":
        self.master = Proc(master_args(self.db, *self.master_flags), "elastic-master").start()
        for i in range(self.num_ps):
            self.ps.append(self._ps(i).start())
        self._stub = pb_grpc.MasterStub(grpc.insecure_channel(self.master.address))
        return self

    def _ps(self, index: int) -> Proc:
        return Proc([sys.executable, "-m", "ps", "--master", self.master.address,
                     "--host", "127.0.0.1", "--port", "0", "--data-port", "0",
                     "--index", str(index), "--num-ps", str(self.num_ps),
                     "--checkpoint-dir", str(self.workdir / f"ps{index}")], f"elastic-ps {index}")

    def restart_master(self) -> None:
        port = self.master.port
        self.master.kill()
        self.master = Proc(master_args(self.db, *self.master_flags, port=port),
                           "elastic-master").start()

    def standby_worker(self, *extra: str) -> tuple[str, Path]:
        """A worker started now that joins only once the returned file is created: its
        interpreter and torch are loaded beforehand, as on a machine of its own."""
        go = self.workdir / f"go-{self._n + 1}"
        return self.add_worker("--start-when", str(go), *extra), go

    def add_worker(self, *extra: str) -> str:
        self._n += 1
        name = f"worker-{self._n}"
        log = open(self.workdir / f"{name}.log", "w")
        self._logs.append(log)
        self.workers[name] = subprocess.Popen(
            [sys.executable, str(TRAIN), "--master", self.master.address, "--data",
             str(self.data), "--dataset", self.dataset, "--name", name, *self.train_args,
             *extra],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        )
        return name

    def alive(self) -> list[str]:
        return [n for n, p in self.workers.items() if p.poll() is None]

    def signal_worker(self, name: str, sig: int) -> None:
        proc = self.workers[name]
        if proc.poll() is None:
            proc.send_signal(sig)

    def wait_workers(self, timeout: float) -> dict[str, int]:
        deadline = time.monotonic() + timeout
        for proc in self.workers.values():
            proc.wait(max(0.1, deadline - time.monotonic()))
        return {n: p.returncode for n, p in self.workers.items()}

    def close(self) -> None:
        if self._evaluator is not None:
            self._evaluator[0].close()
            self._evaluator = None
        for proc in self.workers.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        for proc in self.ps:
            proc.kill()
        if self.master:
            self.master.kill()
        for log in self._logs:
            log.close()

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
            return self._stub.GetStatus(pb.GetStatusRequest(), timeout=timeout)
        except grpc.RpcError:
            return None  # restarting

    def dataset_status(self) -> pb.DatasetStatus | None:
        status = self.status()
        if status is None:
            return None
        for ds in status.datasets:
            if ds.spec.name == self.dataset:
                return ds
        return None

    def training(self, name: str) -> bool:
        """Whether worker `name` is registered and holds a lease (it is past its start-up)."""
        status = self.status()
        return bool(status) and any(w.name == name and w.leases for w in status.workers)

    def ledger(self) -> pb.GetLedgerResponse:
        return self._stub.GetLedger(pb.GetLedgerRequest(dataset=self.dataset), timeout=10)

    def events(self) -> list[pb.Event]:
        return list(self._stub.GetEvents(pb.GetEventsRequest(limit=10_000), timeout=10).events)

    def evaluate(self) -> float:
        """The held-out AUC of the model as the PS hold it now (call once training started:
        the evaluator only reads the model, it never initialises it)."""
        from scripts.train_ctr import ClickLog, build_model, evaluate
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


def terminate(cluster: LocalCluster, name: str) -> None:
    cluster.signal_worker(name, signal.SIGTERM)


def kill(cluster: LocalCluster, name: str) -> None:
    cluster.signal_worker(name, signal.SIGKILL)
