#!/usr/bin/env python3
"""Train the CTR model on the PS set: `examples.ctr.train` (see its --help)."""
import sys

from examples.ctr.train import main

if __name__ == "__main__":
    sys.exit(main())
