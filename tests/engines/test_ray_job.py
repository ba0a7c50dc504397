"""A job on Ray, end to end: `elastic-job run` with `engine: ray` on a local multi-node Ray (a
head with no CPUs, an on-demand node, a spot node). The masters, the PS and the workers run as
Ray actors on their markets' nodes; workers min 2 / max 2, spot first. The spot node is
drained for preemption mid-training and then removed: its workers get the notice and hand
their leases back exactly (preempted, no failure spent), replacements run on on-demand, every
record is trained once, and nothing is left running in Ray or outside it."""
from __future__ import annotations

import json
import time

import pytest

from tests.master.job.jobs import events, start_run, trained, wait_until, write_spec

from .test_ray import ray, ray_cluster

pytestmark = pytest.mark.slow

RECORDS = 600


def drain_for_preemption(cluster, node, deadline_s: float) -> int:
    from ray.core.generated import autoscaler_pb2

    deadline_ms = int((time.time() + deadline_s) * 1000)
    gcs = ray._raylet.GcsClient(address=cluster.address)
    accepted, why = gcs.drain_node(
        node.node_id, autoscaler_pb2.DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION"),
        "spot reclaimed", deadline_ms)
    assert accepted, why
    return deadline_ms


def ray_spec(tmp_path, address: str):
    import yaml

    path = write_spec(tmp_path, records=RECORDS, workers=(2, 2), slow_until=tmp_path / "go")
    spec = yaml.safe_load(path.read_text())
    spec["engine"] = "ray"
    spec["engine_options"] = {"address": address}
    path.write_text(yaml.safe_dump(spec))
    return path


def test_a_job_on_ray_survives_its_spot_node_drained_mid_training(tmp_path, launcher,
                                                                   monkeypatch):
    # on-demand: the master, the PS and two replacement workers; spot: two workers
    with ray_cluster({"on-demand": 4, "spot": 2}) as cluster:
        monkeypatch.setenv("RAY_ADDRESS", cluster.address)
        run = start_run(launcher, ray_spec(tmp_path, cluster.address),
                        tmp_path / "summary.json")
        spot_workers = wait_until(
            lambda: [e for e in events(tmp_path, "node_launched")
                     if e["role"] == "worker" and e["market"] == "spot"][:2]
            if len(trained(tmp_path)) >= 10 else None,
            "two spot workers training", timeout=240, proc=run)
        assert len(spot_workers) == 2
        before_drain = len(trained(tmp_path))

        deadline_ms = drain_for_preemption(cluster, cluster.nodes_by_market["spot"], 60)
        notices = wait_until(lambda: [e for e in events(tmp_path, "node_preempted")
                                      if e["market"] == "spot"][:2]
                             if len(events(tmp_path, "node_preempted")) >= 2 else None,
                             "both spot workers' notices", timeout=120, proc=run)
        assert all(e["deadline_ms"] == deadline_ms for e in notices), notices
        wait_until(lambda: len([e for e in events(tmp_path, "node_exited")
                                if e["cause"] == "preempted"]) >= 2,
                   "the spot workers handing back", timeout=120, proc=run)
        cluster.remove_node(cluster.nodes_by_market["spot"])
        wait_until(lambda: len([e for e in events(tmp_path, "node_launched")
                                if e["role"] == "worker" and e["market"] == "on-demand"]) >= 2,
                   "two on-demand replacements", timeout=120, proc=run)
        (tmp_path / "go").touch()
        assert run.wait(300) == 0, run.output(4000)

    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["epochs_exact"] and summary["records"] == RECORDS
    # every record trained exactly once: the drained workers handed their leases back
    assert sorted(trained(tmp_path)) == list(range(RECORDS))
    assert before_drain >= 10
    ends = events(tmp_path, "node_exited")
    preempted = [e for e in ends if e["cause"] == "preempted"]
    assert len(preempted) == 2 and all(e["market"] == "spot" for e in preempted), ends
    assert not [e for e in ends if e["cause"] in ("crashed", "lost")], ends
    # the replacements ran on on-demand and trained there
    ondemand = {e["name"] for e in events(tmp_path, "node_launched")
                if e["role"] == "worker" and e["market"] == "on-demand"}
    names = {p.stem for p in (tmp_path / "trained").glob("*.records")}
    assert len(ondemand) >= 2 and ondemand <= names
