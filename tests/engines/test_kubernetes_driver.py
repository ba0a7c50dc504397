"""The master's job driver on the kubernetes engine, against the fake API server: the engine is
the one `make_engine` picks for `engine: kubernetes` (the client configured from a kubeconfig,
the owner read from the job's Deployment), the driver is the real one with a real database,
core and committer. Its first steps launch the PS and the workers as pods; a spot worker's pod
marked disrupted is a `node_preempted`, the policy replaces it on spot, and once spot pods are
Unschedulable the workers move to on-demand (`market_unavailable`)."""
from __future__ import annotations

import json
from collections import Counter

import pytest

pytest.importorskip("kmock")
pytest.importorskip("kubernetes")

from kubernetes import client  # noqa: E402

from engines.kubernetes import LABEL_JOB, LABEL_MARKET, LABEL_ROLE, KubernetesEngine  # noqa: E402
from master.job.book import JobBook, ProcState  # noqa: E402
from master.job.driver import JobDriver  # noqa: E402
from master.job.leading import make_engine  # noqa: E402
from master.job.spec import parse_spec  # noqa: E402
from tests.engines.fake_kube import FakeApiServer  # noqa: E402

NS = "train"
JOB = "j"
SELECTORS = {"spot": {"karpenter.sh/capacity-type": "spot"},
             "on-demand": {"karpenter.sh/capacity-type": "on-demand"}}
SPEC = {"name": "j", "engine": "kubernetes",
        "engine_options": {"namespace": NS, "image": "reg/elastic-ps:2",
                           "market_selectors": SELECTORS},
        "workers": {"command": ["python", "-m", "examples.ctr.train"], "min": 2, "max": 2,
                    "markets": [{"name": "spot", "price": 0.3},
                                {"name": "on-demand", "price": 1.0}]},
        "scaling": {"interval_s": 10, "spot_wait_s": 30}}


class Clock:
    def __init__(self, t: float):
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def fake(tmp_path, monkeypatch):
    server = FakeApiServer()
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)  # not in a pod: kubeconfig
    monkeypatch.setenv("KUBECONFIG", str(server.kubeconfig(tmp_path / "kubeconfig")))
    server.master_deployment(NS, "j-master", "uid-j-master")
    yield server
    server.close()


def pods(api, **labels) -> dict[str, client.V1Pod]:
    """The job's pods with these labels (filtered here: the emulator serves every pod of the
    namespace, label selectors aside; the engine looks only at the pods it launched)."""
    want = {LABEL_JOB: JOB, **labels}
    return {p.metadata.name: p for p in api.list_namespaced_pod(NS).items
            if want.items() <= (p.metadata.labels or {}).items()}


def status(api, name: str, value: dict) -> None:
    api.patch_namespaced_pod_status(name, NS, {"status": value})


def test_the_driver_runs_a_job_as_pods_and_moves_reclaimed_spot_to_on_demand(
        tmp_path, fake, leader_parts):
    store, core, committer = leader_parts
    api = client.CoreV1Api(fake.api_client())
    spec = parse_spec(SPEC)
    book = committer.call(lambda: JobBook(core.journal))
    committer.call(lambda: book.begin("j", "{}", "j-master:50051"))
    engine = make_engine(spec, tmp_path / "job", book.started_ms / 1000)
    assert isinstance(engine, KubernetesEngine)
    engine.poll_s = 0  # every step lists the pods (the default spares a real API server)
    clock = Clock(1_000_000.0)
    driver = JobDriver(spec, core, committer, book, engine, masters="j-master:50051",
                       workdir=tmp_path / "job", clock=clock)

    def step():
        driver.step()
        clock.t += spec.scaling.interval_s

    step()  # the PS set and workers.min workers, spot first
    ps = pods(api, **{LABEL_ROLE: "ps"})
    workers = pods(api, **{LABEL_ROLE: "worker"})
    assert len(ps) == 1 and len(workers) == 2
    (ps_pod,) = ps.values()
    assert ps_pod.spec.node_selector == SELECTORS["on-demand"]  # the PS market: the last
    argv = ps_pod.spec.containers[0].command
    assert argv[argv.index("--host") + 1] == "0.0.0.0"
    assert argv[argv.index("--advertise-host") + 1] == "$(POD_IP)"
    for pod in workers.values():
        assert pod.spec.node_selector == SELECTORS["spot"]
        assert pod.metadata.owner_references[0].uid == "uid-j-master"
        (c,) = pod.spec.containers
        env = {e.name: e.value for e in c.env}
        assert c.image == "reg/elastic-ps:2"
        assert env["ELASTIC_PS_MASTER"] == "j-master:50051"
        assert env["ELASTIC_PS_LABELS"] == "market=spot"
        assert env["ELASTIC_PS_WORKER_NAME"] == pod.metadata.name
    for name in [*ps, *workers]:
        status(api, name, {"phase": "Running"})
    for name in workers:  # what the SDK in each worker's pod does first
        committer.call(lambda n=name: core.register_worker(n, {"market": "spot"}))

    # spot is reclaimed: one worker's pod is marked disrupted, and no spot node is left
    victim = sorted(workers)[0]
    status(api, victim, {"phase": "Running", "conditions": [
        {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager"}]})
    step()
    assert book.procs[victim].state == ProcState.PREEMPTING
    (notice,) = [json.loads(e["detail"]) for e in store.events_of_kind("node_preempted")]
    assert notice["name"] == victim and notice["market"] == "spot" and notice["deadline_ms"]
    api.delete_namespaced_pod(victim, NS, grace_period_seconds=0)  # its grace ended
    for _ in range(6):
        step()
        for name, pod in pods(api).items():  # the scheduler: no spot room, on-demand runs
            if pod.status and pod.status.phase:
                continue
            if pod.metadata.labels[LABEL_MARKET] == "spot":
                status(api, name, {"phase": "Pending", "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]})
            else:
                status(api, name, {"phase": "Running"})
    reasons = Counter(json.loads(e["detail"])["reason"]
                      for e in store.events_of_kind("scale_decided"))
    assert reasons["below_min"] >= 1 and reasons["replace_preempted"] >= 1, reasons
    assert reasons["market_unavailable"] >= 1, reasons
    live = pods(api, **{LABEL_ROLE: "worker"})
    markets = {n: p.metadata.labels[LABEL_MARKET] for n, p in live.items()}
    # the survivor runs on; the replacement that found no spot room went to on-demand
    assert sorted(markets.values()) == ["on-demand", "spot"], markets
    assert markets[sorted(workers)[1]] == "spot"
    (on_demand,) = [p for p in live.values() if p.metadata.labels[LABEL_MARKET] == "on-demand"]
    assert on_demand.spec.node_selector == SELECTORS["on-demand"]
    assert not engine.admits("spot")
    ended = {r["name"]: (r["state"], r["cause"]) for r in store.job()[1]}
    assert ended[victim] == (ProcState.LOST, "preempted")  # not a crash, not a loss to replace
    engine.close()
