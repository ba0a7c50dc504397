"""Prometheus metrics over HTTP while a small job runs on a real master and a real PS.

The job is driven from this process with the SDK (ElasticDataset + PSClient), so the test
knows exactly how many shards, records and pushes it caused, and checks that the scraped
counters moved by exactly that much.
"""
from __future__ import annotations

import re
import urllib.request
from pathlib import Path

import pytest
import torch
from prometheus_client.parser import text_string_to_metric_families

from worker_sdk import ElasticDataset, PSClient

RECORDS, SHARD, BATCH = 120, 20, 10


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value} of one scrape."""
    with urllib.request.urlopen(url, timeout=10) as reply:
        text = reply.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def metrics_url(proc) -> str:
    port = re.search(r"metrics (?:on )?http://\S+?:(\d+)/metrics", proc.output()).group(1)
    return f"http://127.0.0.1:{port}/metrics"


def test_counters_move_by_what_the_job_did(launcher, monkeypatch):
    from worker_sdk import metrics as worker_metrics

    monkeypatch.setenv("ELASTIC_PS_METRICS_PORT", "0")  # the SDK's, in this process
    monkeypatch.setattr(worker_metrics, "_served", None)
    master = launcher.master("--metrics-port", "0")
    ps = launcher.ps(master.address, "--metrics-port", "0", "--checkpoint-interval", "0")
    m_url, p_url = metrics_url(master), metrics_url(ps)
    before_m, before_p = scrape(m_url), scrape(p_url)
    assert value(before_m, "elasticps_master_leader") == 1
    assert value(before_p, "elasticps_ps_pushes_total") == 0

    x = torch.arange(RECORDS, dtype=torch.float32).reshape(-1, 1)
    y = 2 * x
    model = torch.nn.Linear(1, 1)
    client = PSClient(master=master.address)
    ds = ElasticDataset((x, y), master=master.address, name="metrics", shard_size=SHARD,
                        num_epochs=1, shuffle=False)
    steps = 0
    try:
        client.init_parameters(model, optimizer="sgd", lr=1e-6)
        mid = None
        for xb, yb in ds.batches(batch_size=BATCH):
            client.pull(model)
            torch.nn.functional.mse_loss(model(xb), yb).backward()
            client.push(model)
            steps += 1
            if steps == 3:  # scraped while the job runs: a lease is out, some work done
                mid = scrape(m_url)
        w_url = f"http://127.0.0.1:{worker_metrics.port}/metrics"
        worker = scrape(w_url)
        ds.close()
    finally:
        client.close()

    assert steps == RECORDS // BATCH
    assert value(mid, "elasticps_live_workers") >= 1
    assert value(mid, "elasticps_dataset_leases", dataset="metrics") >= 1
    assert value(mid, "elasticps_records_done_total", dataset="metrics") < RECORDS

    after_m, after_p = scrape(m_url), scrape(p_url)
    assert value(after_m, "elasticps_shards_done_total", dataset="metrics") == RECORDS // SHARD
    assert value(after_m, "elasticps_shards_handed_out_total", dataset="metrics") \
        == RECORDS // SHARD
    assert value(after_m, "elasticps_records_done_total", dataset="metrics") == RECORDS
    assert value(after_m, "elasticps_duplicates_total", dataset="metrics") == 0
    assert value(after_m, "elasticps_shards_requeued_total", dataset="metrics",
                 cause="lost") == 0
    assert value(after_m, "elasticps_dataset_epoch", dataset="metrics") == 1  # finished
    assert value(after_m, "elasticps_epochs_finished_total", dataset="metrics") == 1
    assert value(after_m, "elasticps_rpc_seconds_count", service="elasticps.v1.Master",
                 method="GetShard", code="OK") >= 1
    assert value(after_m, "elasticps_rpc_seconds_count", service="elasticps.v1.Master",
                 method="CreateDataset", code="OK") == 1
    assert value(after_m, "elasticps_commit_seconds_count") > 0

    # the worker (the SDK in this process)
    assert value(worker, "elasticps_worker_records_trained_total", dataset="metrics") == RECORDS
    assert value(worker, "elasticps_worker_records_delivered_total", dataset="metrics") \
        == RECORDS
    assert value(worker, "elasticps_worker_pushes_total") == steps
    assert value(worker, "elasticps_worker_wait_seconds_total", phase="pull") > 0
    assert value(worker, "elasticps_worker_wait_seconds_total", phase="push") > 0

    # the PS: one push and one pull per step, plus the init's; a push goes as one Step (the
    # dense gradients and the rows' in one message)
    assert value(after_p, "elasticps_ps_pushes_total") == steps
    assert value(after_p, "elasticps_ps_request_seconds_count", kind="step") == steps
    assert value(after_p, "elasticps_ps_request_seconds_count", kind="push") == 0
    assert value(after_p, "elasticps_ps_pulls_total") >= steps
    received = value(after_p, "elasticps_ps_received_bytes_total", kind="step")
    assert received >= steps * 2 * 4  # at least the weight and bias gradients, float32
    assert value(after_p, "elasticps_ps_staleness_count") == steps
    assert value(after_p, "elasticps_ps_staleness_bucket", le="+Inf") == steps
    assert value(after_p, "elasticps_ps_role", role="primary") == 1


    # every series exported is documented (docs/operations.md, "Metrics")
    doc = (Path(__file__).resolve().parents[1] / "docs" / "operations.md").read_text()
    for samples in (after_m, after_p, worker):
        for name, _ in samples:
            base = re.sub(r"_(bucket|count|sum|created)$", "", name)
            if base.startswith("elasticps_"):
                assert f"`{base}`" in doc or f"`{base}_total`" in doc, base


def test_the_ps_times_checkpoints_and_reports_their_age(launcher):
    import grpc

    from protos import ps_pb2, ps_pb2_grpc

    ps = launcher.ps(None, "--metrics-port", "0", "--checkpoint-interval", "0")
    url = metrics_url(ps)
    assert ("elasticps_ps_checkpoint_age_seconds", ()) not in scrape(url)  # none written yet
    with grpc.insecure_channel(ps.grpc_address) as channel:
        ps_pb2_grpc.ParameterServerStub(channel).Checkpoint(ps_pb2.CheckpointRequest(),
                                                            timeout=30)
    samples = scrape(url)
    assert value(samples, "elasticps_ps_checkpoints_total") == 1
    assert value(samples, "elasticps_ps_checkpoint_seconds_count") == 1
    assert 0 <= value(samples, "elasticps_ps_checkpoint_age_seconds") < 600
    assert value(samples, "elasticps_rpc_seconds_count", service="elasticps.v1.ParameterServer",
                 method="Checkpoint", code="OK") == 1


@pytest.mark.parametrize("flag", ["--metrics-port=-2", "--metrics-port=70000"])
def test_a_bad_metrics_port_is_refused(launcher, flag):
    out = launcher.run("-m", "master", "--port", "0", "--db", "sqlite://", flag)
    assert out.returncode == 2 and "--metrics-port" in out.stderr
