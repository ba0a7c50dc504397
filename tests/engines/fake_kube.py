"""An in-process fake Kubernetes API server for the engine's tests: kmock's KubernetesEmulator
(objects kept in memory, served over HTTP with list, get, create, patch, delete and watch) on a
port of 127.0.0.1, its asyncio loop on a thread of its own so the official (synchronous)
client talks to it as to a real API server."""
from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import kmock
import yaml
from kubernetes import client

class FakeApiServer:
    """kmock's emulator on a port of 127.0.0.1, its event loop on a thread of its own."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="fake-k8s",
                                       daemon=True)
        self.thread.start()
        self._call(self._start())

    def _call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)

    async def _start(self):
        self.emulator = kmock.KubernetesEmulator()
        # what a real API server serves from the start (the emulator learns a resource from
        # its first object otherwise, and answers 404 to a listing before it)
        for resource in ("v1/pods", "v1/secrets", "apps/v1/deployments"):
            self.emulator.resources[resource] = kmock.ResourceInfo()
        await self.emulator.__aenter__()
        self.server = kmock.Server(self.emulator)
        await self.server.__aenter__()
        self.url = str(self.server.url).rstrip("/")

    async def _stop(self):
        await self.server.__aexit__(None, None, None)
        await self.emulator.__aexit__(None, None, None)

    def api_client(self) -> client.ApiClient:
        config = client.Configuration()
        config.host = self.url
        return client.ApiClient(config)

    def close(self):
        self._call(self._stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()

    def master_deployment(self, namespace: str, name: str, uid: str) -> dict:
        """Create a job's master Deployment, as `elastic-job manifests` makes it, with the uid
        a real API server would assign (the emulator assigns none); return its body."""
        body = {"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name, "namespace": namespace, "uid": uid},
                "spec": {"selector": {"matchLabels": {"app": "m"}},
                         "template": {"metadata": {"labels": {"app": "m"}},
                                      "spec": {"containers": [{"name": "m", "image": "x"}]}}}}
        client.AppsV1Api(self.api_client()).create_namespaced_deployment(namespace, body)
        return body

    def kubeconfig(self, path: Path) -> Path:
        """A kubeconfig naming this server: what `kubernetes.config.load_kube_config` reads."""
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": "fake"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}]}))
        return path
