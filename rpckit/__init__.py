"""The small gRPC kit under `master/`, `ps/` and `worker_sdk/`: one error type with a
machine-readable reason, one retry policy, one server builder and `main()` helper, one
settings-from-flags-and-environment helper, TLS and the bearer token (`rpckit.auth`). It must
not import torch (a test checks)."""
