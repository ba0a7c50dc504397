"""deploy/: every manifest validates against the Kubernetes schemas (kubernetes-validate,
strict: no unknown fields), and what they ask of our binaries is what the binaries accept.
deploy/ctr-job.yaml is `elastic-job manifests deploy/job.yaml` (regenerated and compared
here); deploy/by-hand/ is the layout a person scales (masters, PS StatefulSets, workers)."""
from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml

kubernetes_validate = pytest.importorskip("kubernetes_validate")

from master import settings as master_settings  # noqa: E402
from ps import settings as ps_settings  # noqa: E402

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
JOB_SPEC = DEPLOY / "job.yaml"          # a job spec, not a Kubernetes object
GENERATED = DEPLOY / "ctr-job.yaml"     # elastic-job manifests deploy/job.yaml --token TOKEN
TOKEN = "change-me-to-a-long-random-token"
MANIFESTS = sorted(p for p in DEPLOY.rglob("*.yaml") if p != JOB_SPEC)
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
    assert {"master", "ps-a", "ps-b", "worker", "postgres", "ctr-master"} <= names
    assert len(MANIFESTS) >= 6


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: str(p.relative_to(DEPLOY)))
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


# ---- elastic-job manifests --------------------------------------------------------------------

def _manifests(capsys, *argv: str) -> tuple[int, str, str]:
    from master.job.cli import main

    with pytest.raises(SystemExit) as e:
        main(["manifests", *argv])
    out, err = capsys.readouterr()
    return e.value.code, out, err


def generated(name: str, kind: str) -> dict:
    (found,) = [d for d in yaml.safe_load_all(GENERATED.read_text())
                if d["metadata"]["name"] == name and d["kind"] == kind]
    return found


def test_deploy_is_what_elastic_job_manifests_prints(capsys):
    code, out, err = _manifests(capsys, str(JOB_SPEC), "--token", TOKEN)
    assert code == 0, err
    assert out == GENERATED.read_text(), ("deploy/ctr-job.yaml is stale: regenerate it with "
                                          "elastic-job manifests deploy/job.yaml --token " + TOKEN)


def test_without_a_token_each_run_makes_a_new_one_and_stays_valid(capsys):
    tokens = []
    for _ in range(2):
        code, out, err = _manifests(capsys, str(JOB_SPEC))
        assert code == 0, err
        docs = list(yaml.safe_load_all(out))
        for doc in docs:
            kubernetes_validate.validate(doc, VERSIONS[-1], strict=True)
        (secret,) = [d for d in docs if d["metadata"]["name"] == "ctr-token"]
        tokens.append(secret["stringData"]["token"])
    assert tokens[0] != tokens[1] and min(map(len, tokens)) >= 32


def test_manifests_refuse_another_engine_sqlite_and_a_bad_token(tmp_path, capsys):
    local = tmp_path / "job.yaml"
    spec = yaml.safe_load(JOB_SPEC.read_text())
    local.write_text(yaml.safe_dump({**spec, "engine": "local", "engine_options": {}}))
    code, out, err = _manifests(capsys, str(local))
    assert code == 2 and out == "" and "engine: " in err and "kubernetes" in err
    sqlite = tmp_path / "sqlite.yaml"
    sqlite.write_text(yaml.safe_dump({**spec, "master": {"db": "sqlite:///m.db"}}))
    code, out, err = _manifests(capsys, str(sqlite))
    assert code == 2 and out == "" and "master.db: is SQLite" in err
    code, out, err = _manifests(capsys, str(JOB_SPEC), "--token", "short")
    assert code == 2 and out == "" and "--token" in err


def _pod_files(pod: dict, container: dict, root: Path) -> dict[str, str]:
    """The container's volumes as folders under `root` (a ConfigMap's data and a Secret's
    strings as files, an emptyDir empty): mount path -> folder."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    where = {}
    for mount in container["volumeMounts"]:
        volume, folder = volumes[mount["name"]], root / mount["name"]
        folder.mkdir()
        if "configMap" in volume:
            files = generated(volume["configMap"]["name"], "ConfigMap")["data"]
        elif "secret" in volume:
            files = generated(volume["secret"]["secretName"], "Secret")["stringData"]
        else:
            files = {}
        for key, text in files.items():
            (folder / key).write_text(text)
        where[mount["mountPath"]] = str(folder)
    return where


def test_the_generated_master_runs_the_job_with_flags_the_master_accepts(tmp_path):
    from engines.kubernetes import token_secret

    spec = yaml.safe_load(JOB_SPEC.read_text())
    master = generated("ctr-master", "Deployment")
    assert master["spec"]["replicas"] == 1 + spec["master"]["standbys"]
    pod = master["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    where = _pod_files(pod, c, tmp_path)
    argv = _expand(c["command"], {"POD_IP": "10.0.0.1"})
    for mount, folder in where.items():
        argv = [a.replace(f"={mount}/", f"={folder}/") for a in argv]
    assert argv[0] == "elastic-master"
    s = master_settings.parse(argv[1:])  # it reads the token and the spec: they are there
    assert s.advertise == "10.0.0.1:50051" and s.job_masters == "ctr-master:50051"
    assert s.leader_lease_s == 5 and c["readinessProbe"]["grpc"]["port"] == s.port
    assert yaml.safe_load(Path(s.job).read_text()) == spec
    assert Path(s.auth_token_file).read_text() == TOKEN
    assert Path(s.job_dir).parent == Path(where["/var/lib/elastic-ps"])
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["token"]["secret"]["secretName"] == token_secret("ctr")
    (db,) = [e for e in c["env"] if e["name"] == "ELASTIC_PS_DB"]
    ref = db["valueFrom"]["secretKeyRef"]
    assert generated(ref["name"], "Secret")["stringData"][ref["key"]] == spec["master"]["db"]
    # the masters run on the PS market's nodes (on-demand)
    assert pod["nodeSelector"] == spec["engine_options"]["market_selectors"]["on-demand"]
    service = generated("ctr-master", "Service")
    assert service["spec"]["selector"].items() <= master["spec"]["template"]["metadata"][
        "labels"].items()


def test_the_role_grants_what_the_engine_calls():
    master = generated("ctr-master", "Deployment")
    account = master["spec"]["template"]["spec"]["serviceAccountName"]
    binding = generated("ctr-master", "RoleBinding")
    assert [s["name"] for s in binding["subjects"]] == [account]
    generated(account, "ServiceAccount")
    rules = generated(binding["roleRef"]["name"], "Role")["rules"]

    def allowed(group: str, resource: str, verb: str, name: str | None = None) -> bool:
        return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"]
                   and (name is None and "resourceNames" not in r
                        or name is not None and name in r.get("resourceNames", [name]))
                   for r in rules)

    # engines/kubernetes.py: create_/list_/read_/delete_namespaced_pod, the owner Deployment
    for verb in ("create", "list", "get", "delete"):
        assert allowed("", "pods", verb)
    assert allowed("apps", "deployments", "get", "ctr-master")
    assert allowed("", "secrets", "get", "ctr-token")
    assert not allowed("", "secrets", "get", "ctr-db")  # the database URL: not through the API
    assert not allowed("apps", "deployments", "delete", "ctr-master")


def test_a_pod_the_engine_creates_is_valid_for_kubernetes():
    from engines.kubernetes import KubernetesEngine

    spec = yaml.safe_load(JOB_SPEC.read_text())
    options = spec["engine_options"]
    eng = KubernetesEngine("ctr", None, namespace=options["namespace"], image=options["image"],
                           market_selectors=options["market_selectors"],
                           owner={"apiVersion": "apps/v1", "kind": "Deployment",
                                  "name": "ctr-master", "uid": "0000"},
                           resources=options["resources"],
                           workdir="/var/lib/elastic-ps/ctr", env_base={})
    pod = eng.pod("worker", "ctr-worker-1", "spot", spec["workers"]["command"],
                  {"ELASTIC_PS_MASTER": "ctr-master:50051"})
    for version in VERSIONS:
        kubernetes_validate.validate(pod, version, strict=True)
    assert pod["spec"]["nodeSelector"] == options["market_selectors"]["spot"]
    (c,) = pod["spec"]["containers"]
    assert c["resources"]["requests"] == options["resources"]["worker"]
    master = generated("ctr-master", "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert master["resources"]["requests"] == options["resources"]["master"]


@pytest.mark.parametrize("resources, field", [
    ({"gpu-box": {"cpu": "1"}}, "engine_options.resources.gpu-box"),
    ({"worker": {"cpu": "four"}}, "engine_options.resources.worker.cpu"),
    ({"worker": {"CPU!": "1"}}, "engine_options.resources.worker.CPU!"),
    ({"ps": {"memory": True}}, "engine_options.resources.ps.memory"),
])
def test_a_bad_resource_request_is_refused_naming_its_field(resources, field):
    from master.job.errors import SpecError
    from master.job.spec import parse_spec

    spec = yaml.safe_load(JOB_SPEC.read_text())
    spec["engine_options"] = {**spec["engine_options"], "resources": resources}
    with pytest.raises(SpecError) as e:
        parse_spec(spec)
    assert e.value.field == field


def test_run_points_a_kubernetes_spec_at_manifests(capsys):
    from master.job.cli import main

    with pytest.raises(SystemExit) as e:
        main(["run", str(JOB_SPEC)])
    out, err = capsys.readouterr()
    assert e.value.code == 2 and "elastic-job manifests" in err and "kubectl apply" in err
