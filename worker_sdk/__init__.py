"""The worker SDK: lease data from the elastic-ps master and train on it, elastically.

`ElasticDataset` (worker_sdk/dataset.py) wraps any indexable dataset; `worker_sdk.ack` is the
ack ledger a parameter-server client reports finished pushes to; `MasterClient` is the
registered worker's connection to the master. See docs/worker_sdk.md.
"""
from . import ack
from .dataset import ElasticDataset
from .errors import (Cancelled, DatasetSpecMismatch, ElasticError, MasterError,
                     MasterUnavailable)
from .master_client import MasterClient
from .ps_client import ElasticEmbedding, PSClient

__all__ = [
    "ElasticDataset", "PSClient", "ElasticEmbedding", "MasterClient", "ack", "ElasticError",
    "MasterError", "MasterUnavailable", "DatasetSpecMismatch", "Cancelled",
]
