"""The worker SDK: lease data from the elastic-ps master and train on it, elastically.

Two layers. The lease protocol, without torch: `MasterClient` (worker_sdk/master_client.py: the
registered worker's calls, retries, heartbeats), `LeaseStream` (worker_sdk/lease_stream.py: one
dataset's leases as pieces, the ack rule, hand-back), `worker_sdk.ack` (the ack ledger) and
`SimWorker` (worker_sdk/simworker.py). The torch face: `ElasticDataset` (worker_sdk/dataset.py),
`worker_sdk.readers`, `PSClient` and `ElasticEmbedding` (worker_sdk/ps_client.py).
See docs/worker_sdk.md.
"""
from . import ack
from .errors import (Cancelled, DatasetSpecMismatch, ElasticError, MasterError,
                     MasterUnavailable)
from .master_client import MasterClient

# torch is imported only when a torch-facing name is first used, so the lease protocol
# (master_client, leases, errors) works on a host without torch.
_LAZY = {"ElasticDataset": ".dataset", "PSClient": ".ps_client",
         "ElasticEmbedding": ".ps_client", "LeaseStream": ".lease_stream",
         "SimWorker": ".simworker", "ArrayReader": ".readers", "ParquetReader": ".readers"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module = importlib.import_module(_LAZY[name], __name__)
        value = getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ElasticDataset", "PSClient", "ElasticEmbedding", "MasterClient", "LeaseStream",
    "SimWorker", "ArrayReader", "ParquetReader", "ack", "ElasticError",
    "MasterError", "MasterUnavailable", "DatasetSpecMismatch", "Cancelled",
]
