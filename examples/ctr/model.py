"""The CTR model: one embedding table on the PS for all categorical fields and a small MLP
over the embeddings and the dense features (the MLP's weights live on the PS too)."""
from __future__ import annotations

import torch
from torch import nn

from worker_sdk.ps.client import ElasticEmbedding


class CTRModel(nn.Module):
    """`embedding` maps ids to `dim`-vectors: the PS table "ids" unless another module is given
    (a local `nn.Embedding` for a baseline without PS)."""

    def __init__(self, num_ids: int, fields: int, dense: int, dim: int = 8, hidden: int = 64,
                 embedding: nn.Module | None = None):
        super().__init__()
        self.embedding = embedding if embedding is not None else \
            ElasticEmbedding(num_ids, dim, table="ids", seed=7)
        self.mlp = nn.Sequential(
            nn.Linear(fields * dim + dense, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden // 2), nn.ReLU(),
            nn.Linear(hidden // 2, 1),
        )

    def forward(self, ids: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        emb = self.embedding(ids).flatten(1)
        return self.mlp(torch.cat([emb, dense], dim=1)).squeeze(1)


def build_model(meta: dict) -> CTRModel:
    """The model for a click log's meta.json; the same initial dense weights in every worker
    (the first `init_parameters` wins, the others' are no-ops)."""
    torch.manual_seed(0)
    return CTRModel(sum(meta["vocab"]), len(meta["vocab"]), meta["dense"])
