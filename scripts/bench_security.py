#!/usr/bin/env python3
"""What TLS, CURVE and the token cost on the data and control planes: `benchmarks.security`
(see --help)."""
from benchmarks.security import main

if __name__ == "__main__":
    main()
