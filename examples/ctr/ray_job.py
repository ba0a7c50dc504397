"""The Ray demo's cluster and job: a local multi-node Ray (`ray.cluster_utils.Cluster`: a head
with no CPUs, an `on-demand` node and a `spot` node, each labelled `market=NAME`, every Ray
process on 127.0.0.1), and the CTR job handed to it through `elastic-job run` (engine ray):
the masters, the PS and the workers are Ray actors on their markets' nodes, started and
replaced by the master.

`RayJob` also reads what the master says (the parts of cluster.local.LocalCluster the demo's
loop and steps use: `status`, `stub`, `alive`, `dataset`), drains a node for preemption the
way a cloud's spot notice reaches Ray (DrainNode, reason preemption, with a deadline), removes
it, adds a node, and stops everything on every way out (`close`): elastic-job first (it stops
the job's processes), then the cluster, then by pid whatever of it is still running.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # before ray: loopback only

import grpc  # noqa: E402
import psutil  # noqa: E402
import yaml  # noqa: E402

from cluster.launch import CODE_ROOT, child_env  # noqa: E402
from cluster.master_view import MasterView  # noqa: E402
from protos import master_pb2 as pb  # noqa: E402
from rpckit.channels import LeaderStub  # noqa: E402

MARKETS = [{"name": "spot", "price": 0.12}, {"name": "on-demand", "price": 0.40}]
# logical CPUs per node, one per process: on-demand holds the master, the PS and two
# replacement workers; a spot node two workers
CPUS = {"on-demand": 4, "spot": 2}
# the GCS sees a node that died without a word within seconds, not the default minute
HEALTH_CHECK = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 1000,
                "health_check_failure_threshold": 3}
STOP_S = 90.0  # elastic-job stopping the job (workers hand back, the PS checkpoints)


class RayJob(MasterView):
    """`workdir`: the job's folder (spec, database, logs); `train`: the worker's command line
    after `python -m examples.ctr.train` (data, pace file, sizes)."""

    dataset = "ctr-train"

    def __init__(self, workdir: Path, train: list[str], *, interval_s: float = 2.0):
        self.workdir = Path(workdir)
        self.train, self.interval_s = list(train), interval_s
        self.cluster = None
        self.address = ""         # the cluster's GCS address, kept: Cluster forgets it at shutdown
        self.spot = None          # the spot node now
        self.drained: list = []   # spot nodes drained (and removed)
        self.proc: subprocess.Popen | None = None
        self._stub: LeaderStub | None = None
        self._before = {p.pid for p in psutil.Process().children(recursive=True)}
        self.log = self.workdir / "elastic-job.log"

    # ---- the cluster ------------------------------------------------------------------------

    def start_cluster(self) -> list[str]:
        """Head and nodes up, this process connected; the nodes' addresses (all 127.0.0.1)."""
        import ray
        from ray.cluster_utils import Cluster

        self.cluster = Cluster(initialize_head=True,
                               head_node_args={"num_cpus": 0, "include_dashboard": False,
                                               "_system_config": HEALTH_CHECK})
        self.ondemand = self.cluster.add_node(num_cpus=CPUS["on-demand"],
                                              labels={"market": "on-demand"})
        self.spot = self.add_spot()
        self.address = self.cluster.address
        self.cluster.wait_for_nodes()
        self.cluster.connect(namespace="elastic-ps-demo")
        return sorted({n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]})

    def add_spot(self):
        node = self.cluster.add_node(num_cpus=CPUS["spot"], labels={"market": "spot"})
        self.spot = node
        return node

    def drain_spot(self, deadline_s: float) -> int:
        """Drain the spot node for preemption with a deadline `deadline_s` from now (Unix ms,
        returned); RuntimeError when Ray refuses it."""
        import ray
        from ray.core.generated import autoscaler_pb2

        deadline_ms = int((time.time() + deadline_s) * 1000)
        gcs = ray._raylet.GcsClient(address=self.address)
        accepted, why = gcs.drain_node(
            self.spot.node_id,
            autoscaler_pb2.DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION"),
            "demo: spot capacity reclaimed", deadline_ms)
        if not accepted:
            raise RuntimeError(f"Ray refused the drain: {why}")
        self.drained.append(self.spot)
        return deadline_ms

    def remove_drained(self) -> None:
        node, self.spot = self.drained[-1], None
        self.cluster.remove_node(node)

    @staticmethod
    def node_alive(node_id: str) -> bool:
        import ray

        return any(n["NodeID"] == node_id and n["Alive"] for n in ray.nodes())

    # ---- the job ----------------------------------------------------------------------------

    def write_spec(self) -> Path:
        with socket.socket() as s:  # a free port, said to the master up front: we call it
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        spec = {
            "name": "ctr-ray",
            "engine": "ray",
            "engine_options": {"address": self.address},
            "master": {"db": f"sqlite:///{self.workdir / 'master.db'}", "port": port,
                       "standbys": 0},
            "ps": {"count": 1},
            "workers": {"command": [sys.executable, "-m", "examples.ctr.train", *self.train],
                        "min": 2, "max": 2, "markets": MARKETS},
            # spot_wait_s above a worker's start-up here: spot is left only when it refuses
            "scaling": {"interval_s": self.interval_s, "spot_wait_s": 300},
        }
        path = self.workdir / "job.yaml"
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        self.master_address = f"127.0.0.1:{port}"
        return path

    def start_job(self, summary_json: Path) -> None:
        """`elastic-job run` in a session of its own: Ctrl-C reaches it only through us, once
        (a second signal would stop its masters at once)."""
        spec = self.write_spec()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "master.job.cli", "run", str(spec), "--json",
             str(summary_json)], cwd=CODE_ROOT, env={**child_env(), "RAY_ADDRESS": self.address},
            stdout=open(self.log, "wb"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)

    def job_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def alive(self) -> list[str]:
        """What can still train: the master replaces workers (between a drain and the
        replacements none may run), so the job lives as long as elastic-job runs."""
        return ["elastic-job"] if self.proc is not None and self.proc.poll() is None else []

    def wait_job(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    # ---- what the master says ---------------------------------------------------------------

    def plan(self, timeout: float = 5.0) -> pb.GetPlanResponse | None:
        try:
            return self.stub().GetPlan(pb.GetPlanRequest(ended=True), timeout=timeout)
        except grpc.RpcError:
            return None

    # ---- what is left -----------------------------------------------------------------------

    def left_in_ray(self, timeout: float = 30.0) -> list[str]:
        """Once elastic-job exited: the job's actors still named in Ray, and logical CPUs
        still held ([] when none, within `timeout`)."""
        import ray

        deadline = time.monotonic() + timeout
        while True:
            actors = ray.util.list_named_actors(all_namespaces=True)
            held = ray.cluster_resources().get("CPU", 0) - ray.available_resources().get("CPU", 0)
            left = [f"actor {a['namespace']}/{a['name']}" for a in actors] + \
                ([f"{held:g} CPU held"] if held > 0 else [])
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.5)

    def left_outside(self, timeout: float = 30.0) -> list[str]:
        """Once the cluster stopped: every process this demo started (Ray's, elastic-job) and
        every command the engine launched on the cluster ([] when none, within `timeout`)."""
        deadline = time.monotonic() + timeout
        while True:
            left = [_describe(p) for p in self._ours()]
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.5)

    def _ours(self) -> list[psutil.Process]:
        found = {p.pid: p for p in psutil.Process().children(recursive=True)
                 if p.pid not in self._before and _running(p)}
        if self.address.startswith("127.0.0.1:"):  # a command launched on this cluster
            for p in psutil.process_iter():
                try:
                    if p.environ().get("RAY_ADDRESS") == self.address and _running(p) \
                            and p.pid != os.getpid():
                        found[p.pid] = p
                except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
                    continue
        return list(found.values())

    # ---- the end ----------------------------------------------------------------------------

    def stop_job(self) -> None:
        """elastic-job stops the job as a preemption would (SIGTERM: StopJob), then exits."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        if self.wait_job(STOP_S) is None:
            self.proc.kill()
            self.proc.wait(10)

    def close(self) -> None:
        """Every way out: the job, the cluster, then (by pid) whatever of it still runs. A
        second Ctrl-C or SIGTERM meanwhile is ignored: it would leave the cluster running."""
        import ray

        previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            self.stop_job()
        finally:
            self.close_stub()
            ray.shutdown()
            if self.cluster is not None:
                self.cluster.shutdown()
            for p in self._ours():
                try:
                    p.kill()
                except psutil.Error:
                    pass
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _running(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _describe(p: psutil.Process) -> str:
    try:
        return f"{p.pid} {' '.join(p.cmdline())[:100]}"
    except psutil.Error:
        return str(p.pid)
