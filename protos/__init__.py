"""Generated protobuf and gRPC code (do not edit: run `python scripts/gen_protos.py`)."""
