#!/usr/bin/env python3
"""Regenerate the committed Python code under protos/ from the .proto files.

Run from anywhere: `python scripts/gen_protos.py`. With `--out DIR` the code is written under
DIR/protos instead (the drift test uses this to compare against the committed files).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTOS = sorted(p.name for p in (ROOT / "protos").glob("*.proto"))


def generate(out: Path) -> None:
    from grpc_tools import protoc

    (out / "protos").mkdir(parents=True, exist_ok=True)
    for name in PROTOS:
        args = [
            "grpc_tools.protoc",
            f"-I{ROOT}",
            f"--python_out={out}",
            f"--pyi_out={out}",
            f"--grpc_python_out={out}",
            f"protos/{name}",
        ]
        if protoc.main(args) != 0:
            raise SystemExit(f"protoc failed on protos/{name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=ROOT, help="root to write protos/ under")
    generate(parser.parse_args().out)


if __name__ == "__main__":
    sys.exit(main())
