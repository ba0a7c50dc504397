"""The Kubernetes engine: a pod per process of a job, through the official `kubernetes` client.

Every pod runs the job's image with the command the master gives, `restartPolicy: Never` (the
master replaces, Kubernetes does not), the node selector of its market
(`engine_options.market_selectors`), an owner reference to the job's root object (the
master's Deployment: deleting the job deletes every pod it launched, and a master pod that
dies takes nothing with it, so a standby adopts them), the job's token Secret mounted where
the master reads its own, and an emptyDir at the job's folder (PS checkpoints, logs).

What the engine reports, from one listing of the job's pods per `poll()`:
- a pod with the `DisruptionTarget` condition (a node drained, spot reclaimed, preempted by
  the scheduler) or with a `deletionTimestamp` it was not asked for (deleted: the container
  gets SIGTERM) -> `preempted`, its deadline the deletion's (or now + its grace period);
- phase `Succeeded` / `Failed` -> `exited` with the container's exit code (137: -9, killed by
  SIGKILL, as the port counts it; the pod is then deleted);
- a pod gone from the listing -> `exited` with the last exit code seen, else `lost`.
A market admits launches while none of its pods is Pending as `Unschedulable`, and for
`hold_s` after the last one was seen (a market with no room would otherwise look free again
the moment its stuck pods are deleted).
"""
from __future__ import annotations

import collections
import logging
import os
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

from .port import EngineEvent, EventKind, Handle, LaunchFailed, Refusal, check_launch

log = logging.getLogger(__name__)

LABEL_JOB = "elastic-ps/job"
LABEL_ROLE = "elastic-ps/role"
LABEL_MARKET = "elastic-ps/market"
TOKEN_DIR = "/var/run/elastic-ps/token"   # the Secret's keys as files; `token` the job's token
TOKEN_KEY = "token"
CONTAINER = "main"
# a PS in a pod listens on every address and advertises the pod's IP (its env: POD_IP)
PS_HOST_FLAGS = ("--host", "0.0.0.0", "--advertise-host", "$(POD_IP)")
POLL_S = 1.0       # one listing per second at most: an API server is shared
HOLD_S = 60.0


def token_secret(job: str) -> str:
    return f"{job}-token"


def master_name(job: str) -> str:
    """The master's Deployment and Service (`elastic-job manifests`)."""
    return f"{job}-master"


def api_client(config_file: str | None = None):
    """A CoreV1Api from the pod's service account, else from a kubeconfig ($KUBECONFIG as it is
    now: the client reads it once, at its import)."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config(config_file or os.environ.get("KUBECONFIG") or None)
    return client.CoreV1Api()


@dataclass
class _Pod:
    handle: Handle
    stopping: bool = False      # we deleted it: its end is ours, not a preemption
    grace_s: int = 0            # the grace period we asked for
    noticed: bool = False       # a preempted event was sent
    code: int | None = None     # the container's exit code, once seen terminated
    unschedulable: bool = False


def _terminated_code(pod) -> int | None:
    """The container's exit code as the port counts it: 128+N (what a runtime reports for a
    process killed by signal N) is -N, as on the local engine."""
    for status in (pod.status.container_statuses or []) if pod.status else []:
        if status.name == CONTAINER and status.state and status.state.terminated:
            code = status.state.terminated.exit_code
            return -(code - 128) if 128 < code < 160 else code
    return None


def _condition(pod, kind: str):
    for cond in (pod.status.conditions or []) if pod.status else []:
        if cond.type == kind and cond.status == "True":
            return cond
    return None


def _unschedulable(pod) -> bool:
    if not pod.status or pod.status.phase != "Pending":
        return False
    for cond in pod.status.conditions or []:
        if cond.type == "PodScheduled" and cond.status == "False" \
                and cond.reason == "Unschedulable":
            return True
    return False


def _ms(stamp) -> int | None:
    if stamp is None:
        return None
    if isinstance(stamp, str):
        stamp = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    return int(stamp.timestamp() * 1000)


class KubernetesEngine:
    """See the module docstring. `api` a kubernetes.client.CoreV1Api; `owner` the owner
    reference every pod gets (`{apiVersion, kind, name, uid}`; None: none); `workdir` the job's
    folder in every pod; `env_base` the environment a launch's env was built on (the master's
    own: what it holds alike is not copied into pods)."""

    def __init__(self, job: str, api, *, namespace: str = "default",
                 image: str = "elastic-ps:latest",
                 market_selectors: Mapping[str, Mapping[str, str]] | None = None,
                 owner: Mapping[str, str] | None = None, workdir: str = "",
                 resources: Mapping[str, Mapping[str, str]] | None = None,
                 service_account: str = "", stop_grace_s: float = 30.0,
                 hold_s: float = HOLD_S, poll_s: float = POLL_S,
                 env_base: Mapping[str, str] | None = None,
                 clock: Callable[[], float] = time.time):
        self.job, self.api, self.namespace, self.image = job, api, namespace, image
        self.selectors = {m: dict(s) for m, s in (market_selectors or {}).items()}
        self.owner = dict(owner) if owner else None
        self.resources = {r: dict(v) for r, v in (resources or {}).items()}
        self.workdir, self.service_account = workdir, service_account
        self.stop_grace_s, self.hold_s, self.poll_s = stop_grace_s, hold_s, poll_s
        self.env_base = dict(os.environ if env_base is None else env_base)
        self.clock = clock
        self._pods: dict[str, _Pod] = {}
        self._unschedulable_at: dict[str, float] = {}
        self._events: collections.deque[EngineEvent] = collections.deque()
        self._lock = threading.RLock()
        self._last_poll = float("-inf")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.ps_host_flags = list(PS_HOST_FLAGS)

    # ---- pods -----------------------------------------------------------------------------------

    def pod(self, role: str, name: str, market: str, command: list[str],
            env: Mapping[str, str]) -> dict:
        """The pod a launch creates (a plain manifest: what `elastic-job manifests` prints
        is built the same way)."""
        labels = {LABEL_JOB: self.job, LABEL_ROLE: str(role), LABEL_MARKET: market}
        metadata: dict[str, Any] = {"name": name, "namespace": self.namespace,
                                    "labels": labels}
        if self.owner:
            metadata["ownerReferences"] = [{**self.owner, "blockOwnerDeletion": True}]
        spec: dict[str, Any] = {
            "restartPolicy": "Never",
            # a PS or a worker never calls the Kubernetes API: no credentials for it
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": int(self.stop_grace_s),
            "containers": [self.container(command, self._pod_env(env),
                                          self.resources.get(str(role)))],
            # the token only: the job's other secrets are not the workers' business
            "volumes": [{"name": "token", "secret": {
                "secretName": token_secret(self.job), "optional": True,
                "items": [{"key": TOKEN_KEY, "path": TOKEN_KEY}]}}],
        }
        if self.workdir:
            spec["volumes"].append({"name": "job", "emptyDir": {}})
        if self.selectors.get(market):
            spec["nodeSelector"] = dict(self.selectors[market])
        if self.service_account:
            spec["serviceAccountName"] = self.service_account
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}

    def container(self, command: list[str], env: list[dict],
                  requests: Mapping[str, str] | None = None) -> dict:
        mounts = [{"name": "token", "mountPath": TOKEN_DIR, "readOnly": True}]
        if self.workdir:
            mounts.append({"name": "job", "mountPath": self.workdir})
        out = {"name": CONTAINER, "image": self.image, "command": list(command),
               "env": env, "volumeMounts": mounts}
        if requests:
            out["resources"] = {"requests": dict(requests)}
        return out

    def _pod_env(self, env: Mapping[str, str]) -> list[dict]:
        """The launch's own variables (what the master's environment does not hold alike: a
        pod has its image's PATH, HOME, ...), and the pod's IP and name from the downward API
        (`$(POD_IP)` in a command is the address a PS advertises)."""
        own = [{"name": k, "value": v} for k, v in sorted(env.items())
               if k.startswith("ELASTIC_PS_") or self.env_base.get(k) != v]
        downward = [{"name": n, "valueFrom": {"fieldRef": {"fieldPath": f}}}
                    for n, f in (("POD_IP", "status.podIP"), ("POD_NAME", "metadata.name"))]
        return downward + [e for e in own if e["name"] not in ("POD_IP", "POD_NAME")]

    # ---- the port -------------------------------------------------------------------------------

    def launch(self, role: str, name: str, market: str, command: list[str],
               env: dict[str, str]) -> Handle:
        from kubernetes.client.rest import ApiException
        from urllib3.exceptions import HTTPError

        with self._lock:
            check_launch(name, command, self._closed, self.admits(market),
                         f"market {market!r} has pods the scheduler cannot place "
                         "(Unschedulable)")
            try:
                self.api.create_namespaced_pod(self.namespace,
                                               self.pod(role, name, market, command, env))
            except ApiException as exc:
                raise LaunchFailed(Refusal.START_FAILED, f"{name}: the API server refused "
                                   f"the pod: {exc.status} {exc.reason}") from exc
            except (OSError, HTTPError) as exc:  # urllib3: refused, timed out, retries spent
                raise LaunchFailed(Refusal.START_FAILED,
                                   f"{name}: the API server is unreachable: {exc}") from exc
            handle = Handle(role=str(role), name=name, market=market, id=name,
                            started_ms=int(self.clock() * 1000))
            self._pods[name] = _Pod(handle)
            self._emit(EventKind.STARTED, handle)
            return handle

    def stop(self, handle: Handle, graceful: bool = True) -> None:
        """Delete the pod (its container gets SIGTERM, SIGKILL after the grace period; 0: now);
        an exit (or lost) event follows once it is gone."""
        grace_s = int(self.stop_grace_s) if graceful else 0
        with self._lock:
            pod = self._pods.get(handle.id)
            if pod is not None:
                pod.stopping, pod.grace_s = True, grace_s
        self._delete(handle.id, grace_s)

    def _delete(self, name: str, grace_s: int) -> None:
        """Ask for the deletion; one that failed is asked again by the next poll that still
        sees the pod without a deletionTimestamp (`_observe`)."""
        from kubernetes.client.rest import ApiException

        try:
            self.api.delete_namespaced_pod(name, self.namespace, grace_period_seconds=grace_s)
        except ApiException as exc:
            if exc.status != 404:
                log.warning("kubernetes engine: deleting pod %s: %s %s", name, exc.status,
                            exc.reason)
        except Exception as exc:  # noqa: BLE001 - unreachable: the next poll asks again
            log.warning("kubernetes engine: deleting pod %s: %s", name, exc)

    def admits(self, market: str) -> bool:
        with self._lock:
            if any(p.unschedulable and p.handle.market == market for p in self._pods.values()):
                return False
            seen = self._unschedulable_at.get(market)
            return seen is None or self.clock() - seen >= self.hold_s

    def adopt(self, handle: Handle) -> bool:
        """Watch a pod another master launched; True when it still exists. One gone meanwhile
        is reported (lost) by the next poll."""
        with self._lock:
            self._pods.setdefault(handle.id, _Pod(handle))
        return self._read(handle.id) is not None

    def find(self, role: str, name: str, market: str) -> Handle | None:
        """The pod launched as `name` (by any master of the job), if it exists: for a launch
        whose id was never recorded."""
        pod = self._read(name)
        if pod is None:
            return None
        return Handle(role=str(role), name=name, market=market, id=name,
                      started_ms=_ms(pod.metadata.creation_timestamp) or
                      int(self.clock() * 1000))

    def _read(self, name: str):
        from kubernetes.client.rest import ApiException

        try:
            return self.api.read_namespaced_pod(name, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def running(self) -> list[Handle]:
        with self._lock:
            return [p.handle for p in self._pods.values()]

    def events(self) -> list[EngineEvent]:
        with self._lock:
            out = list(self._events)
            self._events.clear()
            return out

    # ---- the round ------------------------------------------------------------------------------

    def poll(self, force: bool = False) -> list[EngineEvent]:
        """One listing of the job's pods turned into events (also queued); at most one per
        `poll_s` unless `force`. A failed listing is logged and tried again next time."""
        with self._lock:
            now_mono = time.monotonic()
            if not force and now_mono - self._last_poll < self.poll_s:
                return []
            self._last_poll = now_mono
            try:
                pods = self.api.list_namespaced_pod(
                    self.namespace, label_selector=f"{LABEL_JOB}={self.job}").items
            except Exception as exc:  # noqa: BLE001 - ApiException or a connection error
                log.warning("kubernetes engine: listing pods: %s", exc)
                return []
            before = len(self._events)
            seen = {p.metadata.name: p for p in pods}
            for name, tracked in list(self._pods.items()):
                pod = seen.get(name)
                if pod is None:
                    self._gone(tracked)
                else:
                    self._observe(tracked, pod)
            return list(self._events)[before:]

    def _observe(self, tracked: _Pod, pod) -> None:
        code = _terminated_code(pod)
        if code is not None:
            tracked.code = code
        tracked.unschedulable = _unschedulable(pod)
        if tracked.unschedulable:
            self._unschedulable_at[tracked.handle.market] = self.clock()
        phase = pod.status.phase if pod.status else None
        if phase in ("Succeeded", "Failed"):
            del self._pods[tracked.handle.id]
            if tracked.code is None:
                self._emit(EventKind.LOST, tracked.handle,
                           detail=f"pod {phase} without a container exit code")
            else:
                self._emit(EventKind.EXITED, tracked.handle, code=tracked.code)
            self._delete(tracked.handle.id, 0)  # the record of its end is ours now
            return
        if tracked.stopping and pod.metadata.deletion_timestamp is None:
            self._delete(tracked.handle.id, tracked.grace_s)  # the last ask failed
        if tracked.stopping or tracked.noticed:
            return
        disrupted = _condition(pod, "DisruptionTarget")
        deleted = pod.metadata.deletion_timestamp
        if disrupted is None and deleted is None:
            return
        tracked.noticed = True
        grace = pod.spec.termination_grace_period_seconds if pod.spec else None
        deadline = _ms(deleted) or int((self.clock() + (30 if grace is None else grace)) * 1000)
        why = (f"DisruptionTarget: {disrupted.reason or ''} {disrupted.message or ''}".strip()
               if disrupted is not None else "pod deleted")
        self._emit(EventKind.PREEMPTED, tracked.handle, deadline_ms=deadline, detail=why)

    def _gone(self, tracked: _Pod) -> None:
        del self._pods[tracked.handle.id]
        if tracked.code is not None:
            self._emit(EventKind.EXITED, tracked.handle, code=tracked.code)
        else:
            detail = ("deleted; its exit status was not seen" if tracked.stopping or
                      tracked.noticed else "vanished without notice")
            self._emit(EventKind.LOST, tracked.handle, detail=detail)

    def _emit(self, kind: EventKind, handle: Handle, *, code: int | None = None,
              deadline_ms: int | None = None, detail: str = "") -> None:
        self._events.append(EngineEvent(kind, handle, int(self.clock() * 1000), code,
                                        deadline_ms, detail))

    # ---- lifetime -------------------------------------------------------------------------------

    def start(self, period_s: float = POLL_S) -> "KubernetesEngine":
        """Poll on a thread of its own every `period_s` until `close()`."""
        def run() -> None:
            while not self._stop.wait(period_s):
                self.poll(force=True)
        self._thread = threading.Thread(target=run, name="kubernetes-engine", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop polling and refuse launches; the pods run on (the next master adopts them;
        deleting the job's Deployment deletes them)."""
        with self._lock:
            self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


def in_cluster(job: str, options: Mapping[str, Any], *, workdir: str, stop_grace_s: float,
               hold_s: float) -> KubernetesEngine:
    """The engine a master running in the job's Deployment makes from `engine_options`
    (namespace, image, market_selectors, resources), its pods owned by that Deployment."""
    api = api_client()
    return KubernetesEngine(job, api, namespace=options.get("namespace", "default"),
                            image=options.get("image", "elastic-ps:latest"),
                            market_selectors=options.get("market_selectors") or {},
                            owner=owner_of(api.api_client, options.get("namespace", "default"),
                                           job),
                            resources=options.get("resources") or {},
                            workdir=workdir, stop_grace_s=stop_grace_s, hold_s=hold_s)


def owner_of(api_client_, namespace: str, job: str) -> dict | None:
    """The owner reference to the job's master Deployment, or None when it cannot be read
    (a master run outside the Deployment `elastic-job manifests` makes)."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    try:
        dep = client.AppsV1Api(api_client_).read_namespaced_deployment(master_name(job),
                                                                       namespace)
    except ApiException as exc:
        log.warning("kubernetes engine: no owner for the job's pods (Deployment %s: %s)",
                    master_name(job), exc.status)
        return None
    return {"apiVersion": "apps/v1", "kind": "Deployment", "name": dep.metadata.name,
            "uid": dep.metadata.uid}
