#!/usr/bin/env python3
"""Generate the CTR click log from a planted model: `examples.ctr.data` (see its --help)."""
import sys
from pathlib import Path

# a door into the checkout: examples/, benchmarks/ and cluster/ are not installed
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from examples.ctr.data import main  # noqa: E402

if __name__ == "__main__":
    main()
