#!/usr/bin/env python3
"""The master alone under churn, with simulated workers: `examples.master_demo` (see --help)."""
import sys
from pathlib import Path

# a door into the checkout: examples/, benchmarks/ and cluster/ are not installed
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from examples.master_demo import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
