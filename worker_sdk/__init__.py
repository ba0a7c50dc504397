"""The worker SDK: lease data from the elastic-ps master and train on it, elastically.

Two subpackages, by role:

- `worker_sdk.data`: the data side. The lease protocol, without torch: `MasterClient` (the
  registered worker's calls, retries, heartbeats), `LeaseStream` (one dataset's leases as
  pieces, the ack rule, hand-back), `ack` (the ack ledger), `SimWorker`; the torch face:
  `ElasticDataset`, `readers`, the DataLoader adapter.
- `worker_sdk.ps`: the model side. `PSClient` and `ElasticEmbedding` (the training loop's
  face), the pipelined step, and `DataClient` (the data-plane client of a PS set), built on
  the wire contract in `pswire`.

The public names are re-exported here. See docs/worker_sdk.md.
"""
from .data import ack
from .errors import (Cancelled, DatasetSpecMismatch, ElasticError, MasterError,
                     MasterUnavailable)
from .data.master_client import MasterClient

# torch is imported only when a torch-facing name is first used, so the lease protocol
# (master_client, leases, errors) works on a host without torch.
_LAZY = {"ElasticDataset": ".data.dataset", "PSClient": ".ps.client",
         "ElasticEmbedding": ".ps.client", "LeaseStream": ".data.lease_stream",
         "SimWorker": ".data.simworker", "ArrayReader": ".data.readers",
         "ParquetReader": ".data.readers", "DataClient": ".ps.data_client"}


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
    "SimWorker", "ArrayReader", "ParquetReader", "DataClient", "ack", "ElasticError",
    "MasterError", "MasterUnavailable", "DatasetSpecMismatch", "Cancelled",
]
