"""`ds.loader(...)`: a torch DataLoader whose batches the main process leases.

    for x, y in ds.loader(1024, num_workers=2, pin_memory=False, prefetch_factor=2):
        ...

The DataLoader's batch sampler is `_LeasedBatches`, which runs in the main process (a
DataLoader always draws indices there): it leases positions through the dataset's LeaseStream
and hands each batch's record indices (slices, or index arrays when shuffled) to the worker
processes, which only read them through the dataset's reader (`_ReadOnly.__getitems__`): they
hold no master connection and never talk to the master.

The ack rule holds: a batch the sampler planned is *taken* but not delivered; it is delivered
when this loader hands it to the training loop (a DataLoader returns batches in the order they
were planned), so batches prefetched by the workers are never acknowledged early, and on SIGTERM
they go back with the exact trained offsets.
"""
from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Iterator

from torch.utils.data import DataLoader, Dataset, Sampler

from . import readers
from .lease_stream import END, Piece

if TYPE_CHECKING:
    from .dataset import ElasticDataset


def _as_is(batch):
    return batch  # __getitems__ already made the batch


class _ReadOnly(Dataset):
    """What a worker process gets: the reader, nothing of the lease protocol."""

    def __init__(self, reader):
        self.reader = reader

    def __len__(self) -> int:
        return len(self.reader)

    def __getitems__(self, indices: list) -> Any:
        return readers.read_batch(self.reader, indices)

    def __getitem__(self, i: int) -> Any:
        return self.reader.sample(i)


class _LeasedBatches(Sampler):
    """Yields, per batch, the record indices of its pieces; remembers the pieces in order."""

    def __init__(self, ds: "ElasticDataset", batch_size: int, drop_last: bool):
        self.ds = ds
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.planned: deque[list[Piece]] = deque()  # handed to the DataLoader, not delivered

    def __iter__(self) -> Iterator[list]:
        stream = self.ds.stream
        while True:
            pieces, short = self.ds.plan_batch(self.batch_size)
            if pieces and (short is None or not self.drop_last):
                self.planned.append(pieces)
                yield [stream.records(p) for p in pieces]
                continue
            if pieces:
                stream.skip(pieces)
            if short is END:
                return
            # nothing to lease now: while batches of ours are in the pipeline or in training,
            # waiting could wait for ourselves (the master waits for those very records)
            if self.planned or stream.at_tail():
                return
            stream.wait(short)

    def __len__(self) -> int:
        raise TypeError("an elastic loader has no length: the master decides what it reads")


class ElasticLoader:
    """Iterate it for batches; see the module docstring. One pass at a time."""

    def __init__(self, ds: "ElasticDataset", batch_size: int, *, num_workers: int = 0,
                 pin_memory: bool = False, prefetch_factor: int | None = None,
                 drop_last: bool = False, prefetch: Callable[[Any], None] | None = None,
                 **dataloader_kwargs):
        """prefetch: called with each batch when the DataLoader has it ready, one batch
        ahead of the loop (as `ElasticDataset.batches`). Other keyword arguments go to the
        DataLoader (timeout, worker_init_fn, multiprocessing_context, persistent_workers)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        ds._refuse_worker_processes()
        self.ds = ds
        self.prefetch = prefetch
        self.sampler = _LeasedBatches(ds, batch_size, drop_last)
        if num_workers == 0:
            prefetch_factor = None
        self.dataloader = DataLoader(
            _ReadOnly(ds.reader), batch_sampler=self.sampler, num_workers=num_workers,
            collate_fn=_as_is, pin_memory=pin_memory, prefetch_factor=prefetch_factor,
            **dataloader_kwargs)

    def __iter__(self) -> Iterator[Any]:
        stream = self.ds.stream
        this_pass = stream.begin_pass()
        self.sampler.planned.clear()
        batches = iter(self.dataloader)
        ahead = None
        try:
            while stream.current(this_pass):
                stream.next_step()
                if ahead is None:
                    ahead = next(batches, END)
                    if ahead is not END and self.prefetch is not None:
                        self.prefetch(ahead)  # every batch is prefetched once, in order
                batch, ahead = ahead, None
                if batch is END:
                    stream.pass_over = True  # the data ran out (END, or the tail of the job)
                    return
                if self.prefetch is not None:
                    ahead = next(batches, END)
                    if ahead is not END:
                        self.prefetch(ahead)
                # the oldest planned batch is this one (in order); the one ahead stays taken
                stream.deliver(self.sampler.planned.popleft())
                yield batch
        finally:
            # batches planned but never delivered are read again by the next pass
            self.sampler.planned.clear()
            stream.table.rewind()
