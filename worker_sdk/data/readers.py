"""Readers: a leased range of records read in one call, not record by record.

A reader has `len()`, `read(start, end)` (records [start, end) as one batch: a tensor, or a
tuple/dict of tensors, first dimension end - start) and may have `take(index)` (the records of
an int64 index array, in that order: the in-shard shuffle as a gather). `ElasticDataset` turns
what it is given into one (`as_reader`):

* an object with `read(start, end)`: used as is (a `take` is emulated by reading the covering
  range once and gathering from it);
* a torch tensor, a numpy array or memmap, or a tuple/dict of them: `ArrayReader`;
* any other indexable (len() and __getitem__(int)): `RecordReader`, record by record with
  `default_collate` (the slow path, kept for datasets that can do nothing better).

`ParquetReader(paths, columns=...)` reads Parquet files through pyarrow, only the row groups a
range covers. Readers hold no master connection and may be used in DataLoader worker
processes (a Parquet file is opened again in each process).
"""
from __future__ import annotations

import bisect
import os
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch
from torch.utils.data import default_collate

Index = "slice | np.ndarray"  # what LeaseStream.records() gives: a run in order, or a gather


def _tensor(x) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x
    x = np.asarray(x)
    if not x.flags.writeable or not x.flags.c_contiguous:
        x = np.array(x)  # a memmap slice: copy it out (torch wants writable memory)
    return torch.from_numpy(x)


def _pick(array, index):
    """array[index] for a slice or an int64 index array; a tensor indexes with a tensor."""
    if isinstance(index, slice):
        return array[index]
    if isinstance(array, np.ndarray):
        # np.take gathers rows several times faster than fancy indexing (a memmap too)
        return np.take(array, index, axis=0)
    if not isinstance(array, torch.Tensor):
        return array[index]
    return array[torch.from_numpy(np.ascontiguousarray(index))]


class ArrayReader:
    """Tensors, numpy arrays or memmaps of equal length, read by slicing and gathering.

    `ArrayReader(x, y)` reads (X, Y) batches, `ArrayReader(x)` a tensor, `ArrayReader(ids=a,
    y=b)` dicts. Numpy data comes out as tensors (a memmap's rows are copied once)."""

    def __init__(self, *arrays, **named):
        if arrays and named:
            raise ValueError("give ArrayReader arrays or named arrays, not both")
        columns = list(arrays) or list(named.values())
        if not columns:
            raise ValueError("ArrayReader needs at least one array")
        lengths = {len(c) for c in columns}
        if len(lengths) != 1:
            raise ValueError(f"ArrayReader's arrays differ in length: {sorted(lengths)}")
        self.columns = columns
        self.names = list(named) or None
        self.length = lengths.pop()

    def __len__(self) -> int:
        return self.length

    def _out(self, parts: list):
        tensors = [_tensor(p) for p in parts]
        if self.names is not None:
            return dict(zip(self.names, tensors))
        return tensors[0] if len(tensors) == 1 else tuple(tensors)

    def read(self, start: int, end: int):
        return self._out([c[start:end] for c in self.columns])

    def take(self, index: np.ndarray):
        return self._out([_pick(c, index) for c in self.columns])

    def sample(self, i: int):
        return self._out([c[i] for c in self.columns]) if self.names or len(self.columns) > 1 \
            else _tensor(self.columns[0][i])


class ParquetReader:
    """Parquet files read through pyarrow as one table of consecutive rows (file after file).

    `read(start, end)` and `take(index)` read only the row groups the rows fall in. Out comes a
    tuple of tensors in `columns` order (one column: a tensor); a fixed-size list column (e.g.
    the ids of several fields) becomes a 2-D tensor."""

    def __init__(self, paths: str | os.PathLike | Sequence[str | os.PathLike],
                 columns: Sequence[str] | None = None):
        import pyarrow.parquet as pq

        self.paths = [os.fspath(paths)] if isinstance(paths, (str, os.PathLike)) \
            else [os.fspath(p) for p in paths]
        if not self.paths:
            raise ValueError("ParquetReader needs at least one file")
        self.columns = list(columns) if columns is not None else None
        self.groups: list[tuple[int, int]] = []  # (file, row group) in row order
        self.starts: list[int] = []  # first row of each group
        total = 0
        for f, path in enumerate(self.paths):
            meta = pq.ParquetFile(path).metadata
            for g in range(meta.num_row_groups):
                self.groups.append((f, g))
                self.starts.append(total)
                total += meta.row_group(g).num_rows
        self.length = total
        if self.columns is None:
            self.columns = pq.ParquetFile(self.paths[0]).schema_arrow.names
        self._files: dict[int, Any] = {}
        self._pid = os.getpid()

    def __len__(self) -> int:
        return self.length

    def _file(self, f: int):
        import pyarrow.parquet as pq

        if self._pid != os.getpid():  # a DataLoader worker: open our own handles
            self._files, self._pid = {}, os.getpid()
        if f not in self._files:
            self._files[f] = pq.ParquetFile(self.paths[f])
        return self._files[f]

    def _group_of(self, row: int) -> int:
        return bisect.bisect_right(self.starts, row) - 1

    def _rows(self, first_group: int, last_group: int):
        """Rows of groups first..last as numpy columns, and the first row they start at."""
        import pyarrow as pa

        tables = []
        for g in range(first_group, last_group + 1):
            f, rg = self.groups[g]
            tables.append(self._file(f).read_row_group(rg, columns=self.columns))
        table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
        return [_column(table.column(name)) for name in self.columns], self.starts[first_group]

    def _out(self, parts: list):
        tensors = [_tensor(p) for p in parts]
        return tensors[0] if len(tensors) == 1 else tuple(tensors)

    def read(self, start: int, end: int):
        if not 0 <= start <= end <= self.length:
            raise IndexError(f"rows [{start}, {end}) are outside [0, {self.length})")
        if start == end:
            cols, base = self._rows(0, 0)
            return self._out([c[:0] for c in cols])
        cols, base = self._rows(self._group_of(start), self._group_of(end - 1))
        return self._out([c[start - base:end - base] for c in cols])

    def take(self, index: np.ndarray):
        index = np.asarray(index, dtype=np.int64)
        if not len(index):
            return self.read(0, 0)
        lo, hi = int(index.min()), int(index.max())
        if lo < 0 or hi >= self.length:
            raise IndexError(f"rows {lo}..{hi} are outside [0, {self.length})")
        cols, base = self._rows(self._group_of(lo), self._group_of(hi))
        return self._out([c[index - base] for c in cols])

    def sample(self, i: int):
        return self.take(np.array([i]))


def _column(chunked) -> np.ndarray:
    """A pyarrow column as a numpy array; fixed-size lists become a 2-D array."""
    import pyarrow as pa

    array = chunked.combine_chunks()
    if pa.types.is_fixed_size_list(array.type):
        width = array.type.list_size
        return array.flatten().to_numpy(zero_copy_only=False).reshape(-1, width)
    return array.to_numpy(zero_copy_only=False)


class RangeRead:
    """A user's object with `read(start, end)` (and maybe `take(index)`) and len()."""

    def __init__(self, source):
        self.source = source

    def __len__(self) -> int:
        return len(self.source)

    def read(self, start: int, end: int):
        return self.source.read(start, end)

    def take(self, index: np.ndarray):
        if hasattr(self.source, "take"):
            return self.source.take(index)
        lo, hi = int(index.min()), int(index.max()) + 1
        return gather(self.source.read(lo, hi), index - lo)  # one read covers the run

    def sample(self, i: int):
        return _unbatch(self.source.read(i, i + 1))


class RecordReader:
    """Any indexable dataset, read record by record and collated (the slow path)."""

    def __init__(self, source, collate: Callable[[list], Any] = default_collate):
        self.source = source
        self.collate = collate

    def __len__(self) -> int:
        return len(self.source)

    def records(self, indices) -> list:
        return [self.source[int(i)] for i in indices]

    def sample(self, i: int):
        return self.source[i]


def gather(batch, index: np.ndarray):
    """Rows `index` of a batch (a tensor, or a tuple/list/dict of tensors)."""
    if isinstance(batch, Mapping):
        return {k: gather(v, index) for k, v in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(gather(v, index) for v in batch)
    return _pick(batch, index)


def concat(batches: list):
    """One batch of several (tensors, or tuples/lists/dicts of them) along the first dim."""
    if len(batches) == 1:
        return batches[0]
    first = batches[0]
    if isinstance(first, Mapping):
        return {k: concat([b[k] for b in batches]) for k in first}
    if isinstance(first, (tuple, list)):
        return type(first)(concat(list(parts)) for parts in zip(*batches))
    return torch.cat([_tensor(b) for b in batches])


def _unbatch(batch):
    if isinstance(batch, Mapping):
        return {k: _unbatch(v) for k, v in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(_unbatch(v) for v in batch)
    return batch[0]


def _is_array(x) -> bool:
    return isinstance(x, (torch.Tensor, np.ndarray))


def as_reader(dataset):
    """The reader for what a user gave ElasticDataset (see the module docstring)."""
    if isinstance(dataset, (ArrayReader, ParquetReader, RangeRead, RecordReader)):
        return dataset
    if callable(getattr(dataset, "read", None)):
        return RangeRead(dataset)
    if _is_array(dataset):
        return ArrayReader(dataset)
    if isinstance(dataset, tuple) and dataset and all(_is_array(x) for x in dataset):
        return ArrayReader(*dataset)
    if isinstance(dataset, Mapping) and dataset and all(_is_array(x) for x in dataset.values()):
        return ArrayReader(**dataset)
    return RecordReader(dataset)


def read_batch(reader, indices: list) -> Any:
    """One batch of the records `indices` (each a slice or an index array, in order)."""
    if isinstance(reader, RecordReader):
        records = []
        for index in indices:
            records += reader.records(range(index.start, index.stop)
                                      if isinstance(index, slice) else index)
        return reader.collate(records)
    if len(indices) > 1 and any(not isinstance(i, slice) for i in indices):
        # shuffled pieces of several leases: one gather rather than several and a concat
        whole = np.concatenate([np.arange(i.start, i.stop) if isinstance(i, slice) else i
                                for i in indices])
        return reader.take(whole)
    parts = [reader.read(i.start, i.stop) if isinstance(i, slice) else reader.take(i)
             for i in indices]
    return concat(parts)
