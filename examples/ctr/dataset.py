"""One split of the generated click log as a torch dataset, memory-mapped."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch


class ClickLog(torch.utils.data.Dataset):
    """One split of the click log that `examples.ctr.data` wrote: (ids, dense, label) per
    record. Each field's ids are offset into one id space, so one embedding table serves all
    categorical fields.

    `read(start, end)` and `take(index)` read a range (a gather when shuffled) in one call:
    ElasticDataset uses them instead of `__getitem__` (worker_sdk.readers, the fast path)."""

    def __init__(self, directory: str | Path, split: str = "train"):
        d = Path(directory)
        self.meta = json.loads((d / "meta.json").read_text())
        self.cat = np.load(d / f"{split}_cat.npy", mmap_mode="r")
        self.dense = np.load(d / f"{split}_dense.npy", mmap_mode="r")
        self.y = np.load(d / f"{split}_y.npy", mmap_mode="r")
        self.offsets = np.cumsum([0] + self.meta["vocab"][:-1]).astype(np.int64)
        # plain arrays over the same mapped memory: np.memmap's indexing adds Python work to
        # every batch, and a batch read is on the training loop's path
        self._columns = tuple(a.view(np.ndarray) for a in (self.cat, self.dense, self.y))

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        return (torch.from_numpy(self.cat[i] + self.offsets),
                torch.from_numpy(np.array(self.dense[i])), torch.tensor(float(self.y[i])))

    def read(self, start: int, end: int):
        """Records [start, end) as (ids [n, F], dense [n, D], labels [n]) tensors."""
        return self._batch(slice(start, end))

    def take(self, index: np.ndarray):
        """The records of an index array, in its order."""
        return self._batch(np.asarray(index, dtype=np.int64))

    def _batch(self, index):
        if isinstance(index, slice):
            cat, dense, y = (np.array(c[index]) for c in self._columns)
        else:  # np.take gathers rows several times faster than fancy indexing
            cat, dense, y = (np.take(c, index, axis=0) for c in self._columns)
        cat += self.offsets
        return torch.from_numpy(cat), torch.from_numpy(dense), torch.from_numpy(y)

    def tensors(self):
        """The whole split as tensors (for evaluation)."""
        return (torch.from_numpy(np.asarray(self.cat) + self.offsets),
                torch.from_numpy(np.array(self.dense)), torch.from_numpy(np.array(self.y)))
