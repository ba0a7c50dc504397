"""The local baselines: the bench's model (benchmarks/train/models.py) with its embedding table in
the process, trained by a plain torch loop over tensor batches, or record by record
(`__getitem__` and `default_collate`, as a DataLoader over a map-style dataset does).

The embedding's gradients are sparse (`nn.Embedding(sparse=True)`: torch.optim.Adagrad, the
PS's optimizer, then updates only the rows of the batch, as a user training embeddings locally
writes it) or dense (`sparse=False`: every row, every step; the cost grows with the table)."""
from __future__ import annotations

import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import default_collate

from examples.ctr.dataset import ClickLog
from examples.ctr.evaluate import auc

from .models import local_model


def _order(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).permutation(n)


def train(data: str, batch: int, epochs: int, lr: float, records: bool, seed: int = 1,
          sparse: bool = True) -> dict:
    """One local run: records/s over the training loop (data loading included), test AUC, the
    loop's CPU time, that of its `optimizer.step()` calls and that of the embedding's forward
    (thread CPU time: the loop runs in this thread alone).

    One torch thread, as the elastic worker and the PS use: on this 2-core machine shared with
    other processes, torch's default of two threads spins and runs 10-20x slower."""
    torch.set_num_threads(1)
    log = ClickLog(data, "train")
    model = local_model(log.meta, sparse)
    emb_cpu = [0.0, 0.0]  # [total, started]
    model.embedding.register_forward_pre_hook(
        lambda m, a: emb_cpu.__setitem__(1, time.thread_time()))
    model.embedding.register_forward_hook(
        lambda m, a, out: emb_cpu.__setitem__(0, emb_cpu[0] + time.thread_time() - emb_cpu[1]))
    opt = torch.optim.Adagrad(model.parameters(), lr=lr)
    loss_fn = nn.BCEWithLogitsLoss()
    n = len(log)
    if not records:
        cat, dense, y = log.tensors()
    started = time.perf_counter()
    cpu_started = time.thread_time()
    opt_cpu = 0.0
    for epoch in range(epochs):
        order = _order(n, seed + epoch)
        for i in range(0, n, batch):
            index = order[i:i + batch]
            if records:
                b = default_collate([log[int(j)] for j in index])
            else:
                t = torch.from_numpy(index)
                b = (cat[t], dense[t], y[t])
            opt.zero_grad(set_to_none=True)
            loss_fn(model(b[0], b[1]), b[2]).backward()
            t0 = time.thread_time()
            opt.step()
            opt_cpu += time.thread_time() - t0
    wall = time.perf_counter() - started
    cpu = time.thread_time() - cpu_started
    return {"records_per_s": n * epochs / wall, "wall_s": wall, "auc": evaluate(model, data),
            "records": n * epochs, "cpu_s": cpu, "optimizer_cpu_s": opt_cpu,
            "embedding_cpu_s": emb_cpu[0]}


def evaluate(model: nn.Module, data: str) -> float:
    test = ClickLog(data, "test")
    cat, dense, y = test.tensors()
    with torch.no_grad():
        scores = torch.cat([model(cat[i:i + 8192], dense[i:i + 8192])
                            for i in range(0, len(y), 8192)])
    return auc(scores.numpy(), y.numpy())
