"""The master's benchmarks, one module per measure: `throughput` (with the echo ceiling and
DLRover side by side), `cost`, `rss`, `progress`, `events`; `servers` starts what they drive,
`load` is the client-process load generator, `report` renders the tables and verdicts, `cli`
is `scripts/bench_master.py` (and `python -m benchmarks.master`)."""
