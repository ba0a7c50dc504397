"""`elastic-job manifests job.yaml`: the Kubernetes objects that start a job on the kubernetes
engine, as YAML (`kubectl apply -f -`).

The master's Deployment (1 + `master.standbys` pods: one leads, the others stand by on the
same database) and its Service; the ServiceAccount, Role and RoleBinding the master needs to
launch the job's pods (create, list, watch, delete pods; read its own Deployment, the owner of
every pod it launches; read the job's token Secret); the Secret (the job's token and the
database URL); a ConfigMap holding the spec itself (the master's `--job`). The leader then
launches the PS set and the workers as pods (engines/kubernetes.py). Deleting the Deployment
deletes every pod the job launched (their owner reference). Names are the job's name with a
suffix, in `engine_options.namespace`.
"""
from __future__ import annotations

import secrets
from typing import Any

import yaml

from engines.kubernetes import (LABEL_JOB, LABEL_ROLE, TOKEN_DIR, TOKEN_KEY, master_name,
                                token_secret)

from .errors import SpecError
from .spec import JobSpec

DEFAULT_PORT = 50051     # master.port 0 (any free port) means nothing in a pod: the usual one
METRICS_PORT = 9100
SPEC_DIR = "/etc/elastic-ps"
JOB_DIR = "/var/lib/elastic-ps"
DB_KEY = "db"
LEADER_LEASE_S = 5       # a standby takes over within it (docs/master.md)
GRACE_S = 20             # SIGTERM: finish calls, commit, free the leader lease
# what the engine does with pods, and the two objects it reads
POD_VERBS = ["create", "get", "list", "watch", "delete"]
MASTER_REQUESTS = {"cpu": "1", "memory": "512Mi"}  # unless engine_options.resources.master


def spec_config(spec: JobSpec) -> str:
    return f"{spec.name}-spec"


def _meta(spec: JobSpec, name: str, **extra) -> dict:
    return {"name": name, "namespace": spec.engine_options["namespace"],
            "labels": {LABEL_JOB: spec.name}, **extra}


def rbac(spec: JobSpec) -> list[dict]:
    name = master_name(spec.name)
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": _meta(spec, name),
            "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": POD_VERBS},
                {"apiGroups": [""], "resources": ["secrets"],
                 "resourceNames": [token_secret(spec.name)], "verbs": ["get"]},
                {"apiGroups": ["apps"], "resources": ["deployments"],
                 "resourceNames": [name], "verbs": ["get"]},
            ]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": _meta(spec, name),
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                           "name": name},
               "subjects": [{"kind": "ServiceAccount", "name": name,
                             "namespace": spec.engine_options["namespace"]}]}
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(spec, name)}
    return [account, role, binding]


def db_secret(spec: JobSpec) -> str:
    return f"{spec.name}-db"


def secrets_and_spec(spec: JobSpec, spec_text: str, token: str) -> list[dict]:
    """The token (mounted into every pod of the job) apart from the database URL (the
    masters' only: it may hold a password)."""
    token_ = {"apiVersion": "v1", "kind": "Secret",
              "metadata": _meta(spec, token_secret(spec.name)), "type": "Opaque",
              "stringData": {TOKEN_KEY: token}}
    db = {"apiVersion": "v1", "kind": "Secret", "metadata": _meta(spec, db_secret(spec)),
          "type": "Opaque", "stringData": {DB_KEY: spec.master.db}}
    config = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": _meta(spec, spec_config(spec)), "data": {"job.yaml": spec_text}}
    return [token_, db, config]


def master_command(spec: JobSpec) -> list[str]:
    port = spec.master.port or DEFAULT_PORT
    argv = ["elastic-master", "--host=0.0.0.0", f"--port={port}",
            f"--advertise=$(POD_IP):{port}", f"--job={SPEC_DIR}/job.yaml",
            f"--job-dir={JOB_DIR}/{spec.name}",
            f"--job-masters={master_name(spec.name)}:{port}",
            f"--auth-token-file={TOKEN_DIR}/{TOKEN_KEY}", f"--metrics-port={METRICS_PORT}"]
    if spec.master.standbys:
        argv.append(f"--leader-lease-s={LEADER_LEASE_S}")
    if spec.ps.replicas:
        argv.append(f"--ps-replicas={spec.ps.replicas}")
    return argv


def _container(spec: JobSpec) -> dict:
    port = spec.master.port or DEFAULT_PORT
    env = [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
           {"name": "ELASTIC_PS_DB", "valueFrom": {"secretKeyRef": {
               "name": db_secret(spec), "key": DB_KEY}}}]
    return {
        "name": "master", "image": spec.engine_options["image"],
        "command": master_command(spec), "env": env,
        "ports": [{"name": "grpc", "containerPort": port},
                  {"name": "metrics", "containerPort": METRICS_PORT}],
        # SERVING on the leader only; a standby is alive while not ready (TCP, not gRPC)
        "readinessProbe": {"grpc": {"port": port}, "periodSeconds": 2, "failureThreshold": 1},
        "livenessProbe": {"tcpSocket": {"port": port}, "initialDelaySeconds": 10,
                          "periodSeconds": 10},
        "volumeMounts": [{"name": "spec", "mountPath": SPEC_DIR, "readOnly": True},
                         {"name": "token", "mountPath": TOKEN_DIR, "readOnly": True},
                         {"name": "job", "mountPath": JOB_DIR}],
        "resources": {"requests": dict(spec.engine_options["resources"].get(
            "master", MASTER_REQUESTS))},
    }


def master(spec: JobSpec) -> list[dict]:
    name, port = master_name(spec.name), spec.master.port or DEFAULT_PORT
    labels = {LABEL_JOB: spec.name, LABEL_ROLE: "master"}
    pod: dict[str, Any] = {
        "serviceAccountName": name,
        "terminationGracePeriodSeconds": GRACE_S,
        "containers": [_container(spec)],
        "volumes": [{"name": "spec", "configMap": {"name": spec_config(spec)}},
                    {"name": "token", "secret": {"secretName": token_secret(spec.name)}},
                    {"name": "job", "emptyDir": {}}],
    }
    selector = spec.engine_options["market_selectors"].get(spec.ps.market)
    if selector:
        pod["nodeSelector"] = dict(selector)
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(spec, name),
        "spec": {"replicas": 1 + spec.master.standbys,
                 "selector": {"matchLabels": dict(labels)},
                 "strategy": {"type": "RollingUpdate",
                              "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
                 "template": {"metadata": {"labels": labels, "annotations": {
                     "prometheus.io/scrape": "true", "prometheus.io/port": str(METRICS_PORT),
                     "prometheus.io/path": "/metrics"}}, "spec": pod}}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": _meta(spec, name),
               "spec": {"selector": dict(labels),
                        "ports": [{"name": "grpc", "port": port, "targetPort": port}]}}
    return [service, deployment]


def manifests(spec: JobSpec, spec_text: str, token: str | None = None) -> list[dict]:
    """The objects, in the order `kubectl apply` wants them (what a pod mounts first).
    `token`: the job's token (default: a new random one)."""
    if spec.engine != "kubernetes":
        raise SpecError("engine", f"is {spec.engine!r}; manifests are for engine: kubernetes")
    if spec.master.db.startswith("sqlite"):
        raise SpecError("master.db", "is SQLite: in a pod it is a file of that pod alone (a "
                                     "standby could not share it, a restart would lose the job); "
                                     "give a database URL every master pod reaches (PostgreSQL)")
    token = token if token is not None else secrets.token_urlsafe(32)
    return [*rbac(spec), *secrets_and_spec(spec, spec_text, token), *master(spec)]


class _Dumper(yaml.SafeDumper):
    """Plain YAML for people: no anchors, multi-line strings (the spec) as blocks."""

    def ignore_aliases(self, data) -> bool:
        return True


def _text(dumper: yaml.SafeDumper, value: str):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def render(objects: list[dict]) -> str:
    header = "# elastic-job manifests: the objects that start the job; apply with kubectl\n"
    return header + yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False,
                                  default_flow_style=False, width=100)
