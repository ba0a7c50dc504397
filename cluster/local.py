"""A whole elastic-ps job on this machine: master, PS and training workers as real processes.

Used by the demo and the end-to-end tests: start the master on an SQLite file, N parameter
servers, and training workers (`python -m WORKER_MODULE`, the caller's: the CTR example's is
`examples.ctr.train`), scale them, kill them with any signal, follow the master's status, and
stop everything (always: also on errors and Ctrl-C, through `close()` / the context manager).
This package never imports the examples: what a job trains and how it is scored is the
caller's (the CTR example's held-out AUC is `examples.ctr.evaluate.HeldOutAUC`).

High availability (issue 17): `standbys=S` starts S more masters on the same database (every
client is given the comma-separated list and follows the leader), `ps_replicas=R` asks the
master for R backups per PS index and starts them once the primaries registered.
"""
from __future__ import annotations

import time
from pathlib import Path

import grpc

from cluster.launch import Launcher, MasterProc, Proc, PSProc
from cluster.master_view import MasterView
from protos import master_pb2 as pb
from protos import ps_pb2, ps_pb2_grpc
from rpckit import auth
from rpckit.channels import LeaderStub


class LocalCluster(MasterView):
    """worker_module: what a worker runs (`python -m worker_module --master ADDRESSES --data
    DATA --dataset DATASET --name NAME *train_args`), e.g. "examples.ctr.train"."""

    def __init__(self, workdir: Path, data: Path, *, worker_module: str, num_ps: int = 2,
                 dataset: str = "ctr-train", train_args: tuple[str, ...] = (),
                 master_flags: tuple[str, ...] = (), standbys: int = 0, ps_replicas: int = 0):
        self.launcher = Launcher(workdir)
        self.worker_module = worker_module
        self.workdir = self.launcher.workdir
        self.data = Path(data)
        self.num_ps = num_ps
        self.dataset = dataset
        self.train_args = list(train_args)
        self.db = f"sqlite:///{self.workdir / 'master.db'}"
        self.master_flags = tuple(master_flags) + (
            ("--ps-replicas", str(ps_replicas)) if ps_replicas else ())
        self.standbys = standbys
        self.ps_replicas = ps_replicas
        self.master: MasterProc | None = None  # the first one started (the first leader)
        self.masters: list[MasterProc] = []    # all of them, the standbys after it
        self.ps: list[PSProc] = []             # the first process of each index
        self.backups: list[PSProc] = []        # started as backups (ps_replicas per index)
        self._stub: LeaderStub | None = None
        self.workers: dict[str, Proc] = {}

    # ---- processes --------------------------------------------------------------------------

    def start(self) -> "LocalCluster":
        self.master = self.launcher.master(*self.master_flags, db=self.db)
        self.masters = [self.master] + [
            self.launcher.master(*self.master_flags, db=self.db, name=f"master-standby{n}")
            for n in range(1, self.standbys + 1)]
        for i in range(self.num_ps):
            self.ps.append(self.launcher.ps(self.master_address, index=i, num_ps=self.num_ps,
                                            checkpoint_dir=f"ps{i}"))
        if self.ps_replicas:
            # a PS joins as a backup only when its index's primary is registered and alive
            self._wait(lambda: self.ps_list().complete, 60, "the PS primaries to register")
            for i in range(self.num_ps):
                for r in range(1, self.ps_replicas + 1):
                    self.backups.append(self.launcher.ps(
                        self.master_address, index=i, num_ps=self.num_ps,
                        checkpoint_dir=f"ps{i}-backup{r}"))
            self._wait(lambda: all(len(info.backups) >= self.ps_replicas
                                   for info in self.ps_list().ps), 60, "the PS backups to join")
        return self

    @property
    def master_address(self) -> str:
        """What clients are given: every master's address, comma-separated."""
        return ",".join(m.address for m in self.masters) if self.masters else self.master.address

    def leader(self) -> MasterProc | None:
        """The master that serves now (None while none does: a standby is taking over)."""
        for proc in self.masters:
            if proc.alive:
                try:
                    proc.status(timeout=2)
                    return proc
                except grpc.RpcError:
                    continue  # a standby (UNAVAILABLE, NOT_LEADER) or not up yet
        return None

    def resize_ps(self, num_ps: int) -> pb.ResizePSResponse:
        """`elastic-ctl resize-ps N`: the PS set's new size; the master moves slots live (a
        grow waits for the new indices: `add_ps`)."""
        return self.stub().ResizePS(pb.ResizePSRequest(num_ps=num_ps), timeout=10)

    def add_ps(self, index: int) -> PSProc:
        """Start PS `index`, one a resize adds (no --num-ps: the master's layout says), and,
        once it registered, its `ps_replicas` backups."""
        proc = self.launcher.ps(self.master_address, index=index, num_ps=0,
                                checkpoint_dir=f"ps{index}")
        self.ps.append(proc)
        if self.ps_replicas:
            self._wait(lambda: any(i.index == index for i in self.ps_list().ps)
                       or any(i.index == index for i in self.ps_list().joining), 60,
                       f"PS {index} to register")
            for r in range(1, self.ps_replicas + 1):
                self.backups.append(self.launcher.ps(
                    self.master_address, index=index, num_ps=0,
                    checkpoint_dir=f"ps{index}-backup{r}"))
        return proc

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
            "-m", self.worker_module, "--master", self.master_address, "--data",
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
        self.close_stub()
        self.launcher.close()

    @staticmethod
    def _wait(predicate, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if predicate():
                    return
            except grpc.RpcError:
                pass  # a master taking over, a PS starting: ask again
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
            time.sleep(0.1)

    def __enter__(self) -> "LocalCluster":
        try:
            return self.start()
        except BaseException:
            self.close()  # a PS that failed to start must not leave the master running
            raise

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- what the master says ---------------------------------------------------------------

    def training(self, name: str) -> bool:
        """Whether worker `name` is registered and holds a lease (it is past its start-up)."""
        status = self.status()
        return bool(status) and any(w.name == name and w.leases for w in status.workers)

    def ps_list(self, timeout: float = 5.0) -> pb.ListPSResponse:
        """The PS set as the master lists it: per index the primary, its backups (state
        syncing or in_sync) and the generation."""
        return self.stub().ListPS(pb.ListPSRequest(), timeout=timeout)

    def ps_proc(self, data_address: str) -> PSProc | None:
        """The PS process (primary or backup) serving `data_address`."""
        return next((p for p in self.ps + self.backups
                     if p.match and p.data_address == data_address), None)

    @staticmethod
    def ps_status(proc: PSProc, timeout: float = 2.0) -> ps_pb2.GetPSStatusResponse:
        """GetPSStatus of one PS process (its role, generation, pushes applied)."""
        with auth.channel(proc.grpc_address) as channel:
            return ps_pb2_grpc.ParameterServerStub(channel).GetPSStatus(
                ps_pb2.GetPSStatusRequest(), timeout=timeout)


def records_done(ds: pb.DatasetStatus | None) -> int:
    return sum(e.records_done for e in ds.epochs) if ds else 0

