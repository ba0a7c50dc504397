"""Clients branch on machine-readable reasons, never on message text: with every error message
reworded, re-registration, dataset creation and the stale-gradient re-pull still work."""
from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn

import rpckit.errors
from master.core import MasterCore, Settings
from master.persistence.committer import Committer
from master.persistence.store import Store
from master.server import build_server
from protos import master_pb2 as pb
from ps.dataplane import data_plane
from ps.store.params import ParamStore
from rpckit.errors import Reason
from worker_sdk import DatasetSpecMismatch, ElasticDataset, PSClient
from worker_sdk.data.master_client import MasterClient

_counter = itertools.count()


@pytest.fixture
def reworded(monkeypatch):
    """Every ServiceError raised from here on carries a meaningless message."""
    original = rpckit.errors.ServiceError.__init__

    def reword(self, code, reason, message):
        original(self, code, reason, f"zz{next(_counter)}")

    monkeypatch.setattr(rpckit.errors.ServiceError, "__init__", reword)


@pytest.fixture
def master(tmp_path, reworded):
    """An in-process master (so the rewording applies to it) on a SQLite file."""
    store = Store(f"sqlite:///{tmp_path / 'm.db'}")
    store.upgrade()
    core = MasterCore(Settings(), snapshot=store.load())
    committer = Committer(core, store, on_fatal=lambda exc: None)
    committer.start()
    server, port, _ = build_server(core, committer, store, "127.0.0.1", 0, 8)
    server.start()
    yield f"127.0.0.1:{port}", core, committer
    server.stop(0).wait()
    committer.stop()
    store.close()


def test_messages_are_reworded(master):
    address, _, _ = master
    client = MasterClient(address, heartbeat=False)
    try:
        with pytest.raises(Exception) as info:
            client.get_shard("no-such-dataset", 1)
        assert info.value.reason == Reason.UNKNOWN_DATASET
        assert info.value.message.startswith("zz")  # the fixture really rewords
    finally:
        client.close()


def test_reregistration_follows_the_reason(master):
    address, core, committer = master
    client = MasterClient(address, heartbeat=False)
    try:
        first = client.register()
        committer.call(lambda: core.leave_worker(first, "test", []))  # the master forgets it
        client.heartbeat()  # NOT_FOUND with reason WORKER_GONE -> registers again
        assert client.registrations == 2
        assert client.worker_id != first
    finally:
        client.close()


def test_dataset_creation_follows_the_reason(master):
    address, _, _ = master
    records = list(range(20))
    ds = ElasticDataset(records, master=address, name="d", shard_size=5)
    assert sorted(ds) == records
    ds.close()
    with pytest.raises(DatasetSpecMismatch) as info:
        ElasticDataset(records, master=address, name="d", shard_size=4)
    assert info.value.reason == Reason.DATASET_EXISTS


def test_stale_gradient_repull_follows_the_reason(master):
    address, core, committer = master
    plane = data_plane(ParamStore(max_staleness=0), host="127.0.0.1", port=0, threads=1,
                      max_frame_bytes=1 << 20)
    port = plane.bind()
    plane.start()
    try:
        committer.call(lambda: core.register_ps("127.0.0.1:1", f"tcp://127.0.0.1:{port}", 0, 1))
        a_model, b_model = nn.Linear(2, 1), nn.Linear(2, 1)
        a, b = PSClient(address), PSClient(address)
        a.init_parameters(a_model, optimizer="sgd", lr=0.1)
        b.init_parameters(b_model, optimizer="sgd", lr=0.1)
        for client, model in ((a, a_model), (b, b_model)):
            client.pull(model)
        for client, model in ((b, b_model), (a, a_model)):  # a's gradient is now one stale
            model(torch.ones(1, 2)).sum().backward()
            client.push(model)
        assert (a.stale_refusals, b.stale_refusals) == (1, 0)
        a.close()
        b.close()
    finally:
        plane.stop()
