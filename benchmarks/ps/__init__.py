"""The PS data plane's benchmark against raw grpcio and a torch.distributed.rpc PS, side by
side: `elastic`, `grpc_raw`, `rpc` (one module per system: its server, its worker step, one
measured run), `harness` (spawning roles, the barrier, the measured window), `role` (a role
process's entry point), `model` (the benchmark model), `cli` (`scripts/bench_ps.py`,
`python -m benchmarks.ps`)."""
