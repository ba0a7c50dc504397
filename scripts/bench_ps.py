#!/usr/bin/env python3
"""Benchmark the PS data plane against raw grpcio and torch.distributed.rpc: `benchmarks.ps`
(see --help)."""
from benchmarks.ps.cli import main

if __name__ == "__main__":
    main()
