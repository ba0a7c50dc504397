"""The Kubernetes engine against an in-process fake API server (kmock's KubernetesEmulator: an
in-memory API server over HTTP on 127.0.0.1), driven by the official `kubernetes` client.

The test plays the cluster's other parts through the same API: the kubelet (a pod's phase and
exit code), the scheduler (a pod Unschedulable), the eviction and node lifecycle (the
`DisruptionTarget` condition, a deletion). The spot-reclaim test runs the real policy
(master.scaling decide) over what the engine reports and applies its decisions through it.
"""
from __future__ import annotations

from collections import Counter

import pytest

pytest.importorskip("kmock")
pytest.importorskip("kubernetes")

from kubernetes import client  # noqa: E402

from engines.kubernetes import (LABEL_JOB, LABEL_MARKET, TOKEN_DIR,  # noqa: E402
                                KubernetesEngine, owner_of, token_secret)
from engines.port import EventKind, LaunchFailed, Refusal  # noqa: E402
from master.job.spec import parse_spec  # noqa: E402
from master.scaling.policy import decide  # noqa: E402
from master.scaling.signals import Signals  # noqa: E402
from tests.engines.fake_kube import FakeApiServer  # noqa: E402

NS = "jobs"
JOB = "ctr"
SELECTORS = {"spot": {"node.kubernetes.io/capacity-type": "spot"},
             "on-demand": {"node.kubernetes.io/capacity-type": "on-demand"}}
COMMAND = ["python", "-m", "examples.ctr.train"]


class Clock:
    def __init__(self, t: float = 1_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def fake():
    server = FakeApiServer()
    yield server
    server.close()


@pytest.fixture
def core(fake) -> client.CoreV1Api:
    return client.CoreV1Api(fake.api_client())


@pytest.fixture
def owner(fake) -> dict:
    """The job's master Deployment, as `elastic-job manifests` creates it (the fake assigns
    no uid: the test gives it one, as the API server would)."""
    fake.master_deployment(NS, f"{JOB}-master", "uid-of-the-master")
    found = owner_of(fake.api_client(), NS, JOB)
    assert found is not None
    return found


def engine(core, clock, owner=None, **kw) -> KubernetesEngine:
    return KubernetesEngine(JOB, core, namespace=NS, image="registry/elastic-ps:1",
                            market_selectors=SELECTORS, owner=owner, workdir="/var/lib/job",
                            hold_s=60.0, poll_s=0.0, env_base={"PATH": "/usr/bin"},
                            clock=clock, **kw)


def pods(api, **labels) -> dict[str, client.V1Pod]:
    """The job's pods with these labels (filtered here: the emulator serves every pod of the
    namespace, label selectors aside; the engine looks only at the pods it launched)."""
    want = {LABEL_JOB: JOB, **labels}
    return {p.metadata.name: p for p in api.list_namespaced_pod(NS).items
            if want.items() <= (p.metadata.labels or {}).items()}


def set_status(core, name: str, status: dict) -> None:
    """What the kubelet or the scheduler writes."""
    core.patch_namespaced_pod_status(name, NS, {"status": status})


def kinds(events) -> list[tuple[str, str]]:
    return [(str(e.kind), e.handle.name) for e in events]


def test_a_pod_per_process_with_its_market_selector_owner_and_token(core, owner):
    clock = Clock()
    eng = engine(core, clock, owner, resources={"worker": {"cpu": "2", "memory": "4Gi"}})
    env = {"PATH": "/usr/bin", "ELASTIC_PS_LABELS": "market=spot", "SEED": "7"}
    h1 = eng.launch("worker", f"{JOB}-worker-1", "spot", COMMAND, env)
    h2 = eng.launch("ps", f"{JOB}-ps0-2", "on-demand", ["python", "-m", "ps"], {})
    assert (h1.id, h1.market, h1.started_ms) == (f"{JOB}-worker-1", "spot", int(clock.t * 1000))
    assert kinds(eng.events()) == [("started", h1.name), ("started", h2.name)]
    got = pods(core)
    assert set(got) == {h1.name, h2.name}
    worker = got[h1.name]
    assert worker.spec.node_selector == SELECTORS["spot"]
    assert got[h2.name].spec.node_selector == SELECTORS["on-demand"]
    assert worker.metadata.labels == {LABEL_JOB: JOB, "elastic-ps/role": "worker",
                                      LABEL_MARKET: "spot"}
    (ref,) = worker.metadata.owner_references
    assert (ref.kind, ref.name, ref.uid) == ("Deployment", f"{JOB}-master", "uid-of-the-master")
    assert worker.spec.restart_policy == "Never"  # the master replaces, Kubernetes does not
    assert worker.spec.automount_service_account_token is False
    (c,) = worker.spec.containers
    assert c.image == "registry/elastic-ps:1" and c.command == COMMAND
    assert c.resources.requests == {"cpu": "2", "memory": "4Gi"}
    assert got[h2.name].spec.containers[0].resources is None  # none asked for the PS
    values = {e.name: e.value for e in c.env}
    # the master's own PATH stays out of the pod; the launch's variables and the pod's IP go in
    assert values == {"ELASTIC_PS_LABELS": "market=spot", "SEED": "7", "POD_IP": None,
                      "POD_NAME": None}
    (secret,) = [v for v in worker.spec.volumes if v.secret]
    assert secret.secret.secret_name == token_secret(JOB) == f"{JOB}-token"
    assert {m.mount_path for m in c.volume_mounts} == {TOKEN_DIR, "/var/lib/job"}


def test_launch_refusals_change_nothing(core):
    clock = Clock()
    eng = engine(core, clock)
    eng.launch("worker", f"{JOB}-worker-1", "spot", COMMAND, {})
    with pytest.raises(LaunchFailed) as e:  # the API server says 409: the name is taken
        eng.launch("worker", f"{JOB}-worker-1", "spot", COMMAND, {})
    assert e.value.reason == Refusal.START_FAILED
    with pytest.raises(LaunchFailed) as e:
        eng.launch("worker", f"{JOB}-worker-2", "spot", [], {})
    assert e.value.reason == Refusal.START_FAILED
    eng.close()
    with pytest.raises(LaunchFailed) as e:
        eng.launch("worker", f"{JOB}-worker-3", "spot", COMMAND, {})
    assert e.value.reason == Refusal.CLOSED
    assert set(pods(core)) == {f"{JOB}-worker-1"}
    assert [h.name for h in eng.running()] == [f"{JOB}-worker-1"]


def test_disruption_target_is_a_preemption_with_the_grace_as_deadline(core):
    clock = Clock()
    eng = engine(core, clock)
    h = eng.launch("worker", f"{JOB}-worker-1", "spot", COMMAND, {})
    eng.events()
    set_status(core, h.name, {"phase": "Running"})
    assert eng.poll() == []
    set_status(core, h.name, {"phase": "Running", "conditions": [
        {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
         "message": "node shutdown"}]})
    (ev,) = eng.poll()
    assert ev.kind == EventKind.PREEMPTED and ev.handle == h
    assert ev.deadline_ms == int((clock.t + 30) * 1000)  # terminationGracePeriodSeconds
    assert "TerminationByKubelet" in ev.detail
    assert eng.poll() == []  # one notice
    # the kubelet reports its end: exit 0 (a worker hands its leases back on SIGTERM)
    set_status(core, h.name, {"phase": "Succeeded", "containerStatuses": [
        {"name": "main", "ready": False, "restartCount": 0, "image": "x", "imageID": "",
         "state": {"terminated": {"exitCode": 0}}}]})
    (end,) = eng.poll()
    assert (end.kind, end.code) == (EventKind.EXITED, 0)
    assert pods(core) == {} and eng.running() == []  # an ended pod is deleted


def test_a_deleted_pod_is_a_preemption_its_deadline_the_deletion(core):
    clock = Clock()
    eng = engine(core, clock)
    h = eng.launch("worker", f"{JOB}-worker-1", "spot", COMMAND, {})
    eng.events()
    # a finalizer holds the pod while it terminates, so the deletion is seen as the kubelet
    # would: a deletionTimestamp on a pod that still runs
    core.patch_namespaced_pod(h.name, NS, {"metadata": {"finalizers": ["test/terminating"]}})
    core.delete_namespaced_pod(h.name, NS, grace_period_seconds=30)
    stamp = core.read_namespaced_pod(h.name, NS).metadata.deletion_timestamp
    assert stamp is not None
    (ev,) = eng.poll()
    assert ev.kind == EventKind.PREEMPTED
    assert ev.deadline_ms == int(stamp.timestamp() * 1000) and ev.detail == "pod deleted"


def test_exit_codes_a_vanished_pod_and_a_stop(core):
    clock = Clock()
    eng = engine(core, clock)
    failed = eng.launch("worker", f"{JOB}-worker-1", "spot", COMMAND, {})
    vanished = eng.launch("worker", f"{JOB}-worker-2", "spot", COMMAND, {})
    stopped = eng.launch("worker", f"{JOB}-worker-3", "on-demand", COMMAND, {})
    eng.events()
    set_status(core, failed.name, {"phase": "Failed", "containerStatuses": [
        {"name": "main", "ready": False, "restartCount": 0, "image": "x", "imageID": "",
         "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]})
    core.delete_namespaced_pod(vanished.name, NS, grace_period_seconds=0)
    eng.stop(stopped)
    assert stopped.name not in pods(core)  # deleted through the API
    got = {e.handle.name: e for e in eng.poll()}
    # 137 = 128 + SIGKILL: the port's -9, as the local engine reports a SIGKILLed process
    assert (got[failed.name].kind, got[failed.name].code) == (EventKind.EXITED, -9)
    assert got[vanished.name].kind == EventKind.LOST
    assert got[vanished.name].detail == "vanished without notice"
    assert got[stopped.name].kind == EventKind.LOST  # ours: the driver counts it as stopped
    assert "deleted" in got[stopped.name].detail
    assert eng.running() == [] and pods(core) == {}


def test_an_unschedulable_market_admits_nothing_until_it_held_off(core):
    clock = Clock()
    eng = engine(core, clock)
    h = eng.launch("worker", f"{JOB}-worker-1", "spot", COMMAND, {})
    assert eng.admits("spot")
    set_status(core, h.name, {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/3 nodes are available: 3 node(s) didn't match node selector"}]})
    eng.poll()
    assert not eng.admits("spot") and eng.admits("on-demand")
    with pytest.raises(LaunchFailed) as e:
        eng.launch("worker", f"{JOB}-worker-2", "spot", COMMAND, {})
    assert e.value.reason == Refusal.NO_CAPACITY
    eng.stop(h)
    eng.poll()
    assert not eng.admits("spot")  # its stuck pod is gone, but the market had no room
    clock.t += 60
    assert eng.admits("spot")


def test_a_second_engine_adopts_and_finds_the_pods(core):
    clock = Clock()
    first = engine(core, clock)
    h = first.launch("worker", f"{JOB}-worker-1", "spot", COMMAND, {})
    first.close()
    second = engine(core, clock)
    assert second.adopt(h)
    found = second.find("worker", f"{JOB}-worker-1", "spot")
    assert found is not None and found.id == h.id
    assert second.find("worker", f"{JOB}-worker-9", "spot") is None
    core.delete_namespaced_pod(h.name, NS, grace_period_seconds=0)
    (ev,) = second.poll()
    assert (ev.kind, ev.handle.name) == (EventKind.LOST, h.name)


# ---- spot reclaimed: the real policy over the engine ----------------------------------------

SPEC = {"name": JOB, "engine": "kubernetes",
        "engine_options": {"namespace": NS, "market_selectors": SELECTORS},
        "workers": {"command": COMMAND, "min": 2, "max": 2,
                    "markets": [{"name": "spot", "price": 0.3},
                                {"name": "on-demand", "price": 1.0}]},
        "scaling": {"interval_s": 10, "spot_wait_s": 30}}


class Cluster:
    """The scheduler and the kubelet: a pending pod on a market with room runs, on one
    without room it is Unschedulable."""

    def __init__(self, core):
        self.core = core
        self.full: set[str] = set()

    def schedule(self) -> None:
        for name, pod in pods(self.core).items():
            if pod.status and pod.status.phase:
                continue
            market = pod.metadata.labels[LABEL_MARKET]
            if market in self.full:
                set_status(self.core, name, {"phase": "Pending", "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]})
            else:
                set_status(self.core, name, {"phase": "Running"})


class Harness:
    """The driver's loop in small: the engine's events and the pods' phases as Signals, the
    policy's worker decisions applied through the engine (launch, or stop the newest)."""

    def __init__(self, core, eng: KubernetesEngine):
        self.core, self.eng = core, eng
        self.spec = parse_spec(SPEC)
        self.state = None
        self.launches = 0
        self.preempting: set[str] = set()
        self.reasons: list[str] = []

    def tick(self, now: float) -> None:
        self.eng.poll()
        preempted, lost, failed = Counter(), Counter(), Counter()
        for ev in self.eng.events():
            key = (ev.handle.role, ev.handle.market)
            if ev.kind == EventKind.PREEMPTED:
                preempted[key] += 1
                self.preempting.add(ev.handle.name)
            elif ev.kind in (EventKind.EXITED, EventKind.LOST):
                self.preempting.discard(ev.handle.name)
        running, pending, preempting = Counter(), Counter(), Counter()
        for name, pod in pods(self.core).items():
            key = ("worker", pod.metadata.labels[LABEL_MARKET])
            if name in self.preempting:
                preempting[key] += 1
            elif pod.status and pod.status.phase == "Running":
                running[key] += 1
            else:
                pending[key] += 1
        markets = self.spec.workers.market_names
        signals = Signals(running=running, pending=pending, preempting=preempting,
                          preempted=preempted, lost=lost, failed_launches=failed,
                          admits=frozenset(m for m in markets if self.eng.admits(m)))
        decisions, self.state = decide(self.spec, signals, self.state, now)
        for d in decisions:
            if d.role.value != "worker":
                continue
            self.reasons.append(f"{d.reason.value}:{d.market}:{d.delta:+d}")
            self.apply(d)

    def apply(self, d) -> None:
        if d.delta > 0:
            for _ in range(d.delta):
                self.launches += 1
                self.eng.launch("worker", f"{JOB}-worker-{self.launches}", d.market, COMMAND,
                                {"ELASTIC_PS_LABELS": f"market={d.market}"})
            return
        live = [(p.metadata.creation_timestamp, n) for n, p in
                pods(self.core, **{LABEL_MARKET: d.market}).items() if n not in self.preempting]
        newest = sorted(live, key=lambda t: t[1], reverse=True)
        for _, name in newest[:-d.delta]:
            (h,) = [h for h in self.eng.running() if h.name == name]
            self.eng.stop(h)


def test_a_reclaimed_spot_pod_is_replaced_on_demand_through_the_policy(core, owner):
    clock = Clock()
    eng = engine(core, clock, owner)
    cluster, run = Cluster(core), Harness(core, eng)
    now = 0.0
    run.tick(now)  # below min: two workers, spot first
    cluster.schedule()
    assert {n: p.spec.node_selector for n, p in pods(core).items()} == {
        f"{JOB}-worker-1": SELECTORS["spot"], f"{JOB}-worker-2": SELECTORS["spot"]}
    # spot is reclaimed: the node lifecycle marks a pod disrupted, no spot room is left
    cluster.full.add("spot")
    set_status(core, f"{JOB}-worker-1", {"phase": "Running", "conditions": [
        {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager"}]})
    for _ in range(6):
        now += 10
        clock.t += 10
        run.tick(now)
        cluster.schedule()
        if f"{JOB}-worker-1" in pods(core):  # its grace ends: the pod goes
            core.delete_namespaced_pod(f"{JOB}-worker-1", NS, grace_period_seconds=0)
    live = pods(core)
    markets = Counter(p.metadata.labels[LABEL_MARKET] for p in live.values())
    assert markets == Counter({"spot": 1, "on-demand": 1}), run.reasons
    (replacement,) = [p for p in live.values()
                      if p.metadata.labels[LABEL_MARKET] == "on-demand"]
    assert replacement.spec.node_selector == SELECTORS["on-demand"]
    assert replacement.metadata.owner_references[0].uid == "uid-of-the-master"
    assert any(r.startswith("replace_preempted:") for r in run.reasons), run.reasons
    assert any(r.startswith("market_unavailable:") for r in run.reasons), run.reasons


def test_an_unreachable_api_server_fails_a_launch_and_a_stop_is_asked_again(core, fake):
    clock = Clock()
    eng = engine(core, clock)
    h = eng.launch("worker", f"{JOB}-worker-1", "spot", COMMAND, {})
    config = client.Configuration()
    config.host = "http://127.0.0.1:1"  # nothing listens there
    eng.api = client.CoreV1Api(client.ApiClient(config))
    with pytest.raises(LaunchFailed) as e:
        eng.launch("worker", f"{JOB}-worker-2", "spot", COMMAND, {})
    assert e.value.reason == Refusal.START_FAILED and "unreachable" in str(e.value)
    eng.stop(h)  # its deletion fails: the pod stays
    assert eng.poll() == []  # a failed listing reports nothing
    eng.api = core
    assert set(pods(core)) == {h.name}
    eng.poll()  # it sees the pod not deleted and asks again
    assert pods(core) == {}
    (ev,) = eng.poll()
    assert (ev.kind, ev.handle.name) == (EventKind.LOST, h.name)
