"""The worker SDK: lease data from the elastic-ps master and train on it, elastically.

`ElasticDataset` (worker_sdk/dataset.py) wraps any indexable dataset; `worker_sdk.ack` is the
ack ledger a parameter-server client reports finished pushes to; `MasterClient` is the
registered worker's connection to the master. See docs/worker_sdk.md.
"""
from . import ack
from .errors import (Cancelled, DatasetSpecMismatch, ElasticError, MasterError,
                     MasterUnavailable)
from .master_client import MasterClient

# torch is imported only when a torch-facing name is first used, so the lease protocol
# (master_client, leases, errors) works on a host without torch.
_LAZY = {"ElasticDataset": ".dataset", "PSClient": ".ps_client",
         "ElasticEmbedding": ".ps_client"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module = importlib.import_module(_LAZY[name], __name__)
        value = getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ElasticDataset", "PSClient", "ElasticEmbedding", "MasterClient", "ack", "ElasticError",
    "MasterError", "MasterUnavailable", "DatasetSpecMismatch", "Cancelled",
]
