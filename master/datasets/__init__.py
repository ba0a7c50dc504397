"""Datasets: the Dataset Shard Service's state and the decisions on it.

`spec` (a dataset's spec and its record ranges), `shard_order` (the deterministic hand-out
order of an epoch), `shards` (one dataset's shard state machine: TODO, leases, done records,
epochs, quarantine), `drop` (dropping a dataset) and `ledger` (the goodput ledger, derived from
the lease history). `MasterCore` (master/core.py) routes calls to the queues.
"""
