"""bench_train: a worker's records/s through elastic-ps against a local torch loop.

`local` (the same CTR model with a local embedding, trained over tensor batches or record by
record), `worker` (one elastic-ps worker process on the fast path, with its step timeline),
`elastic` (master + 2 PS + 1 or 2 workers), `cli` (alternating rounds, ratios, the report).
"""
