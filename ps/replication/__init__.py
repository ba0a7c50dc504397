"""PS replication: a primary and its backups per PS index, each role in a module of its own.

- `node` (`ReplicaNode`): this PS's role as the master gives it, and the request chain's role
  filter (what a primary, a backup or a fenced PS serves);
- `primary` (`Primary`, `AttachedBackup`): numbering every mutation, forwarding it to the
  attached backups and answering once they applied it;
- `backup` (`Backup`): copying the primary, then applying its mutations in order;
- `lease` (`PrimaryLease`): the lease under which a primary may answer a mutation.
See docs/ps.md "Replicas".
"""
from __future__ import annotations

from .node import NodeRole, ReplicaNode, mutates
from .primary import Fenced

__all__ = ["Fenced", "NodeRole", "ReplicaNode", "mutates"]
