"""elastic-ps parameter server: partitioned, asynchronous, checkpointed model state.

Modules: `partition` (the one placement rule, shared with the worker SDK), `store` (tensors,
tables, versions, staleness), `optim`, `embedding`, `applied` (at-most-once pushes), `gate`,
`wire` and `dataplane` (ZeroMQ), `client` (a data-plane client), `checkpoint`, `registrar`,
`server` (gRPC control), `settings`, `__main__` (the `elastic-ps` command).
"""
