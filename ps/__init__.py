"""elastic-ps parameter server: partitioned, asynchronous, checkpointed model state.

Subpackages: `dataplane` (the ZeroMQ request chain: transport, auth, handlers) and
`replication` (primary, backup, the role gate). Modules: `params` (`ParamStore`: tensors,
tables, versions, staleness; with `dense`, `embedding`, `applied` (at-most-once pushes),
`gate`, `snapshots`, `steps`), `optim`, `limits`, `checkpoint`, `registrar` (with the master),
`server` (gRPC control), `metrics`, `settings`, `__main__` (the `elastic-ps` command). The wire
contract shared with the worker SDK (frames, partitioning, specs) is the `pswire` package.
"""
