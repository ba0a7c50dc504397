#!/usr/bin/env python3
"""A CTR job the master drives through a spot outage, measured: `benchmarks.job` (see --help)."""
import sys
from pathlib import Path

# a door into the checkout: examples/, benchmarks/ and cluster/ are not installed
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.job import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
