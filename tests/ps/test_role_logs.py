"""How a PS says its role (ps.replication.ReplicaNode.on_role): the first role of a normal
start is INFO; a promotion, or a role regained after being deposed, is a WARNING (issue 37:
every normal start printed a WARNING)."""
from __future__ import annotations

import logging

import pytest
import zmq

from protos import master_pb2
from ps.dataplane import Handlers
from ps.store.params import ParamStore
from ps.replication.node import ReplicaNode, NodeRole

NODE_LOG = "ps.replication.node"


@pytest.fixture
def node():
    store = ParamStore()
    n = ReplicaNode(store, Handlers(store), zmq.Context.instance(), "", "instance-1",
                    data_address="tcp://127.0.0.1:1")
    n.report = lambda generation, in_sync: 2.0  # the master grants 2 s leases
    yield n
    n.close()


def _said(caplog):
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == NODE_LOG]


def test_a_normal_start_as_primary_is_info(node, caplog):
    with caplog.at_level(logging.INFO, logger=NODE_LOG):
        node.on_role(NodeRole.PRIMARY, 1, master_pb2.PSInfo(), 0)
        node.on_role(NodeRole.PRIMARY, 1, master_pb2.PSInfo(), 0)  # the same word again: nothing
    assert _said(caplog) == [(logging.INFO, "PS 0 is the primary of generation 1 (was pending)")]


def test_primary_again_after_a_fence_is_a_warning(node, caplog):
    node.on_role(NodeRole.PRIMARY, 1, master_pb2.PSInfo(), 0)
    node.role = NodeRole.FENCED  # what a renewal answered FENCED leaves
    with caplog.at_level(logging.INFO, logger=NODE_LOG):
        node.on_role(NodeRole.PRIMARY, 3, master_pb2.PSInfo(), 0)
    assert _said(caplog) == [(logging.WARNING,
                              "PS 0 is the primary of generation 3 (was fenced)")]


def test_a_normal_start_as_backup_is_info_and_a_promotion_a_warning(node, caplog):
    upstream = master_pb2.PSInfo(data_address="tcp://127.0.0.1:9")  # nothing answers there
    with caplog.at_level(logging.INFO, logger=NODE_LOG):
        node.on_role(NodeRole.BACKUP, 1, upstream, 1)
        node.on_role(NodeRole.PRIMARY, 2, master_pb2.PSInfo(), 1)  # its primary was lost
    assert _said(caplog) == [
        (logging.INFO, "PS 0 is a backup of tcp://127.0.0.1:9 (generation 1)"),
        (logging.WARNING, "PS 0 is the primary of generation 2 (was backup)"),
    ]
