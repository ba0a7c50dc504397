#!/usr/bin/env python3
"""What TLS, CURVE and the token cost on the data and control planes: `benchmarks.security`
(see --help)."""
import sys
from pathlib import Path

# a door into the checkout: examples/, benchmarks/ and cluster/ are not installed
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.security import main  # noqa: E402

if __name__ == "__main__":
    main()
