"""deploy/*.yaml: every manifest validates against the Kubernetes schemas (kubernetes-validate,
strict: no unknown fields), and what they ask of our binaries is what the binaries accept."""
from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml

kubernetes_validate = pytest.importorskip("kubernetes_validate")

from master import settings as master_settings  # noqa: E402
from ps import settings as ps_settings  # noqa: E402

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
MANIFESTS = sorted(DEPLOY.glob("*.yaml"))
# Kubernetes versions the manifests must be valid for: the oldest with every field we use
# (gRPC probes are GA since 1.27) and the newest the validator knows
VERSIONS = ("1.27.0", kubernetes_validate.latest_version())
# the slowest SIGTERM hand-back of a worker measured under load (docs/operations.md)
WORKER_SIGTERM_MAX_S = 8  # 7.76 s, 3 other workers on 2 cores


def resources() -> list[dict]:
    return [doc for path in MANIFESTS for doc in yaml.safe_load_all(path.read_text()) if doc]


def by_kind(kind: str) -> list[dict]:
    return [r for r in resources() if r["kind"] == kind]


def containers(workload: dict) -> list[dict]:
    return workload["spec"]["template"]["spec"]["containers"]


def workload(name: str) -> dict:
    (found,) = [r for r in resources() if r["metadata"]["name"] == name
                and r["kind"] in ("Deployment", "StatefulSet")]
    return found


def test_there_are_manifests_for_every_role():
    names = {r["metadata"]["name"] for r in resources()}
    assert {"master", "ps-a", "ps-b", "worker", "postgres"} <= names
    assert len(MANIFESTS) >= 5


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_every_manifest_validates_against_the_kubernetes_schemas(path, version):
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert docs, f"{path.name} holds no resource"
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)  # raises on a problem


def test_the_validator_catches_a_broken_manifest():
    broken = workload("master")
    broken["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["grpc"]["port"] = "x"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, VERSIONS[-1], strict=True)


def _expand(argv: list[str], env: dict[str, str]) -> list[str]:
    out = []
    for arg in argv:
        for name, value in env.items():
            arg = arg.replace(f"$({name})", value).replace(f'"${name}"', value)
            arg = arg.replace(f"${name}", value)
        out.append(arg)
    return out


def test_the_masters_are_a_leader_and_a_standby_with_flags_the_master_accepts():
    master = workload("master")
    assert master["spec"]["replicas"] == 2
    (c,) = containers(master)
    argv = _expand(c["command"], {"POD_IP": "10.0.0.1"})
    assert argv[0] == "elastic-master"
    s = master_settings.parse(argv[1:])  # exits 2 on a flag it does not know
    assert s.advertise == "10.0.0.1:50051" and s.ps_replicas == 1 and s.leader_lease_s == 5
    assert c["readinessProbe"]["grpc"]["port"] == s.port
    assert "tcpSocket" in c["livenessProbe"]  # a standby is alive while NOT_SERVING
    annotations = master["spec"]["template"]["metadata"]["annotations"]
    assert int(annotations["prometheus.io/port"]) == s.metrics_port
    env = {e["name"] for e in c["env"]}
    assert "ELASTIC_PS_DB" in env  # from the secret: PostgreSQL, shared by both


def test_each_ps_index_runs_twice_with_checkpoint_volumes(tmp_path):
    counts = []
    for name in ("ps-a", "ps-b"):
        ps = workload(name)
        (c,) = containers(ps)
        script = c["command"][-1]
        argv = _expand(shlex.split(script), {"POD_IP": "10.0.0.2",
                                             "{HOSTNAME##*-}": "1"})
        assert argv[:2] == ["exec", "elastic-ps"]
        flags = argv[2:]
        ckpt = flags.index("--checkpoint-dir") + 1
        mount = flags[ckpt]
        flags[ckpt] = str(tmp_path / name)  # parse() creates the directory
        s = ps_settings.parse(flags)
        assert s.index == 1 and s.master == "master:50051"
        assert ps["spec"]["replicas"] == s.num_ps
        counts.append(s.num_ps)
        assert {v["mountPath"] for v in c["volumeMounts"]} == {mount}
        assert ps["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "ckpt"
        assert c["readinessProbe"]["grpc"]["port"] == s.port
        annotations = ps["spec"]["template"]["metadata"]["annotations"]
        assert int(annotations["prometheus.io/port"]) == s.metrics_port
    assert counts[0] == counts[1]


def test_workers_scale_and_their_grace_period_covers_the_sigterm_hand_back():
    worker = workload("worker")
    assert worker["kind"] == "Deployment"
    spec = worker["spec"]["template"]["spec"]
    assert spec["terminationGracePeriodSeconds"] >= 2 * WORKER_SIGTERM_MAX_S
    (c,) = containers(worker)
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["ELASTIC_PS_MASTER"] == "master:50051"
    annotations = worker["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == env["ELASTIC_PS_METRICS_PORT"]


def test_services_select_pods_that_exist():
    labels = [w["spec"]["template"]["metadata"]["labels"]
              for w in by_kind("Deployment") + by_kind("StatefulSet")]
    for service in by_kind("Service"):
        selector = service["spec"]["selector"]
        assert any(selector.items() <= pod.items() for pod in labels), service["metadata"]
