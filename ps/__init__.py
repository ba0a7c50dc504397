"""elastic-ps parameter server: partitioned, asynchronous, checkpointed model state.

Subpackages: `store` (the model state and the only code that changes it: `ParamStore`,
dense tensors, embedding tables, optimizers, the at-most-once table, the request gate,
limits), `dataplane` (the ZeroMQ request chain: transport, auth, handlers) and `replication`
(primary, backup, the replica's role filter). Modules: `checkpoint` and `deltas` (files),
`ownership` and the slot moves, `registrar` (with the master), `server` (gRPC control),
`metrics`, `settings`, `__main__` (the `elastic-ps` command). The wire contract shared with
the worker SDK (frames, partitioning, specs) is the `pswire` package.
"""
