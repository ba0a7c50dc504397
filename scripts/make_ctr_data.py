#!/usr/bin/env python3
"""Generate the CTR click log from a planted model: `examples.ctr.data` (see its --help)."""
from examples.ctr.data import main

if __name__ == "__main__":
    main()
