#!/usr/bin/env python3
"""Benchmark bounded embedding tables (memory at a cap, lookup cost, AUC under eviction,
delta checkpoints): `benchmarks.tables` (see --help)."""
from benchmarks.tables import main

if __name__ == "__main__":
    raise SystemExit(main())
