"""The benchmarks: `benchmarks.master` (the master's throughput and costs), `benchmarks.ps`
(the PS data plane against raw grpcio and torch.distributed.rpc), `benchmarks.handover` (a
killed worker's data handed to another), `benchmarks.resize` (the PS set resized while a
worker trains, live against stop-the-world). `scripts/bench_*.py` only call their `main()`."""
