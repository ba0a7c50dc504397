"""One process of the PS benchmark: `python -m benchmarks.ps.role --role ROLE ...` (started
by benchmarks.ps.harness.spawn, never by hand)."""
from __future__ import annotations

import argparse
import importlib

from benchmarks.ps.model import CHUNK

ROLES = {  # role -> module:function
    "elastic": "benchmarks.ps.elastic:worker_elastic",
    "embedding": "benchmarks.ps.elastic:worker_embedding",
    "grpc": "benchmarks.ps.grpc_raw:worker_grpc",
    "grpc-server": "benchmarks.ps.grpc_raw:server_grpc",
    "rpc": "benchmarks.ps.rpc:worker_rpc",
    "rpc-server": "benchmarks.ps.rpc:server_rpc",
}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--role", required=True, choices=sorted(ROLES))
    p.add_argument("--endpoint")
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--run-dir")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--rpc-port", type=int, default=0)
    p.add_argument("--transport", default="default")
    p.add_argument("--params", type=int, default=10**6)
    p.add_argument("--chunk", type=int, default=CHUNK)
    p.add_argument("--batch", type=int, default=4096)
    p.add_argument("--dim", type=int, default=64)
    args = p.parse_args(argv)
    module, function = ROLES[args.role].split(":")
    getattr(importlib.import_module(module), function)(args)


if __name__ == "__main__":
    main()
