"""ElasticDataset: a dataset read shard by shard as the master hands them out (the torch face
of worker_sdk.data.lease_stream.LeaseStream).

    ds = ElasticDataset(ArrayReader(x, y), master="localhost:50051", name="train",
                        shard_size=4096, num_epochs=3, shuffle=True)
    for x, y in ds.batches(batch_size=1024):   # or ds.loader(1024, num_workers=2), or `for
        ...train one step...                    # sample in ds`, or DataLoader(ds, ...)

Reading. A leased range is read in one call when the dataset can (`worker_sdk.readers`: a
`read(start, end)` method, tensors, numpy arrays/memmaps, tuples/dicts of them, Parquet files);
the in-shard shuffle is a gather. Any other indexable dataset is read record by record and
collated with `default_collate`.

One pass over `ds` covers every epoch: the master opens epoch e + 1 as soon as epoch e has
nothing left to hand out, so `ds.epoch` (the epoch of the last record handed out) tells where you
are. The pass ends when the master answers END; the worker then leaves with reason "finished".

THE ACK RULE (worker_sdk/data/ack.py, docs/worker_sdk.md): a record counts as trained, and is
reported to the master, only after the training step that consumed it finished. `ack` says how
the SDK learns that:

* "push": the ack ledger's `trained()` (PSClient.push, once the push is answered) or
  `ds.mark_trained()`; nothing else acknowledges anything.
* "next": the training loop asking for the next step's data (the next batch of `batches()` or
  `loader()`, the next sample, the next batch of a `DataLoader(ds, batch_size=B)` when the
  dataset was told `samples_per_step=B`). The last
  step of a pass is acknowledged by the request after it, or by `close()`, not after an
  exception escaped the loop.
* "auto" (default): "push" once a PSClient exists in the process, "next" until then.

Records read ahead (a batch being assembled, `loader()`'s prefetched batches) are not delivered
until the loop receives them, so they are never acknowledged early; on SIGTERM they go back with
the exact trained offsets. `DataLoader(ds, num_workers > 0)` is refused (its workers would lease
in processes the SDK cannot see): use `ds.loader(..., num_workers=K)`, where the main process
leases and worker processes only read.
"""
from __future__ import annotations

from collections import deque
from typing import Any, Callable, Iterator

from torch.utils.data import IterableDataset, get_worker_info

from protos import master_pb2 as pb

from . import ack, readers
from .lease_stream import END, AckMode, LeaseStream, Piece, Wait
from .master_client import MasterClient

ACK_MODES = tuple(m.value for m in AckMode)

WORKER_PROCESSES_REFUSED = (
    "ElasticDataset cannot be read by DataLoader worker processes (num_workers > 0): they would "
    "lease and hold records in processes the SDK cannot see, and a record must be reported "
    "trained only after the step that consumed it finished. Use ds.loader(batch_size, "
    "num_workers=K) (the main process leases, the workers only read), ds.batches(batch_size), "
    "or DataLoader(ds, batch_size=..., num_workers=0)."
)


class ElasticDataset(IterableDataset):
    """An IterableDataset whose records are leased from the elastic-ps master shard by shard.

    Promises: over the whole job every record of every epoch is counted trained exactly once,
    by whichever worker trained it, whatever workers die, stall, get preempted or join; a record
    is reported only after its training step finished (the ack rule above); on SIGTERM the
    worker hands its leases back with their trained offsets and exits 0.
    """

    def __init__(
        self,
        dataset: Any,
        master: str | MasterClient | None = None,
        name: str = "train",
        shard_size: int = 256,
        num_epochs: int = 1,
        shuffle: bool = False,
        seed: int = 0,
        lease_timeout_s: float = 0.0,
        max_shards: int = 2,
        worker_name: str | None = None,
        labels: dict[str, str] | None = None,
        ack: str = "auto",
        handle_sigterm: bool = True,
        retry_timeout_s: float | None = None,
        tls_ca: str | None = None,
        auth_token: str | None = None,
        ledger: ack.AckLedger | None = None,
        samples_per_step: int = 1,
    ):
        """
        dataset: a reader (worker_sdk.readers), an object with read(start, end), a tensor or
            numpy array/memmap or a tuple/dict of them (read by ranges), or anything with len()
            and __getitem__(int) (read record by record).
        master: "host:port" of the master (default $ELASTIC_PS_MASTER or localhost:50051), or
            a MasterClient to share one worker registration between datasets.
        name, shard_size, num_epochs, shuffle, seed, lease_timeout_s: the dataset spec created
            on the master (the same spec again is a no-op; a different one under the same name
            raises DatasetSpecMismatch). lease_timeout_s 0 means the master's default (600 s).
        max_shards: leases asked for per GetShard call.
        worker_name, labels: how the worker registers (the name defaults to
            $ELASTIC_PS_WORKER_NAME, else host-pid; the labels of $ELASTIC_PS_LABELS and
            $ELASTIC_PS_WORKER_LABELS, e.g. "market=spot", are registered with those given).
        ack: "auto", "push" or "next": see the module docstring.
        handle_sigterm: install the SIGTERM handler (worker_sdk/data/preempt.py).
        retry_timeout_s: give up on an unreachable master after this long (default 120 s).
        tls_ca, auth_token: a TLS master's CA file and the job's token.
        ledger: the ack ledger that tells this dataset what was trained; give the same one
            to the PSClient that pushes its steps (default: the process's, shared by all).
        samples_per_step: how many samples of `for sample in ds` make one training step, so
            that the "next" ack mode acknowledges whole steps: B for a `DataLoader(ds,
            batch_size=B)` (it asks for the first sample of the next batch once a step has
            finished). A DataLoader whose batches vary in size (a custom batch_sampler) needs
            ack="push" and `ds.mark_trained()` after each step.
        """
        if samples_per_step < 1:
            raise ValueError(f"samples_per_step must be >= 1, got {samples_per_step}")
        self.samples_per_step = samples_per_step
        if ack not in ACK_MODES:
            raise ValueError(f"ack must be one of {ACK_MODES}, got {ack!r}")
        self.reader = readers.as_reader(dataset)
        try:
            num_records = len(self.reader)
        except TypeError:
            raise TypeError("ElasticDataset needs a reader, an array, or an indexable dataset "
                            f"with len() and __getitem__(int); got {type(dataset).__name__}"
                            ) from None
        if num_records <= 0:
            raise ValueError("the dataset is empty: nothing to train on")
        self.dataset = dataset
        spec = pb.DatasetSpec(name=name, num_records=num_records, shard_size=shard_size,
                              num_epochs=num_epochs, shuffle=shuffle, seed=seed,
                              lease_timeout_s=lease_timeout_s)
        self.stream = LeaseStream(spec, master, max_shards=max_shards, worker_name=worker_name,
                                  labels=labels, ack=ack, handle_sigterm=handle_sigterm,
                                  retry_timeout_s=retry_timeout_s, tls_ca=tls_ca,
                                  auth_token=auth_token, ledger=ledger)

    # ---- the protocol's state, as before the split ------------------------------------------

    spec = property(lambda self: self.stream.spec)
    client = property(lambda self: self.stream.client)
    table = property(lambda self: self.stream.table)
    layout = property(lambda self: self.stream.layout)
    epoch = property(lambda self: self.stream.epoch)
    delivered = property(lambda self: self.stream.delivered)
    push_acks = property(lambda self: self.stream.push_acks)
    num_records = property(lambda self: self.stream.spec.num_records)

    def mark_trained(self) -> int:
        """The training step that consumed everything delivered so far has finished."""
        return self.stream.mark_trained()

    def mark_failed(self, message: str = "") -> int:
        """The step that consumed the records in flight failed (e.g. a poison record): their
        leases are reported FAILED at once, keeping what was trained before; the master
        requeues the rest and quarantines a shard that fails too often. Returns how many
        leases were failed. Iteration goes on with other shards."""
        return self.stream.mark_failed(message)

    def stats(self) -> dict[str, int]:
        return self.stream.stats()

    @property
    def ended(self) -> bool:
        """The master answered END: every epoch is done, nothing more will come. A pass that
        ends before this (a DataLoader's at the tail of the job: docs/worker_sdk.md) leaves
        work for the next pass: loop `while not ds.ended`."""
        return self.stream.ended

    def close(self, error: bool = False, reason: str | None = None) -> None:
        """Report what was trained and leave the master (see LeaseStream.close)."""
        self.stream.close(error=error, reason=reason)

    def __enter__(self) -> "ElasticDataset":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        failed = exc_type is not None and not issubclass(exc_type, SystemExit)
        interrupted = exc_type is not None and issubclass(exc_type, KeyboardInterrupt)
        self.close(error=failed, reason="interrupted" if interrupted else None)

    def __getstate__(self):
        raise TypeError(WORKER_PROCESSES_REFUSED)

    # ---- samples ------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        """Yield samples, `samples_per_step` of them per training step (the "next" ack mode
        acknowledges a step when the first sample of the next one is asked for)."""
        self._refuse_worker_processes()
        return self._samples(self.samples_per_step)

    def _samples(self, step: int) -> Iterator[Any]:
        stream = self.stream
        this_pass = stream.begin_pass()
        handed = 0
        while stream.current(this_pass):
            if handed % step == 0:
                stream.next_step()
            item = stream.next_piece(1)
            if item is END:
                return
            if isinstance(item, Wait):
                if stream.at_tail():
                    return
                stream.wait(item)
                continue
            index = stream.records(item)
            record = index.start if isinstance(index, slice) else int(index[0])
            try:
                sample = self.reader.sample(record)
            except BaseException:
                stream.unread(item)
                raise
            if not stream.holds(item):
                continue  # taken away while we read it: trained elsewhere
            stream.deliver([item])
            handed += 1
            yield sample

    # ---- batches ------------------------------------------------------------------------------

    def batches(self, batch_size: int, drop_last: bool = False,
                collate_fn: Callable[[list], Any] | None = None,
                prefetch: Callable[[Any], None] | None = None,
                prefetch_ahead: int = 1) -> Iterator[Any]:
        """Yield batches of `batch_size` records: read by ranges when the dataset can, else
        record by record and collated like a DataLoader's (`default_collate` or `collate_fn`;
        a collate_fn needs the record path).

        A batch is short at the end of the data, and at the tail of the job when the master
        has nothing to hand out right now while this worker still holds records (waiting then
        could wait for ourselves). With `drop_last`, such a short batch is not yielded and its
        records count as done without being trained (skipped on purpose, as a DataLoader's
        drop_last skips them).

        prefetch: called with each batch `prefetch_ahead` batches ahead of the loop, first thing
        when the loop asks for a batch (e.g. `lambda b: client.prefetch(b[0])`, so the PS
        fetches its rows while this batch computes); the batch after it is read ahead then. A
        batch read ahead is not delivered until it is yielded. With `PSClient(max_inflight=2)`,
        `prefetch_ahead=2` lets each step's data ride with the push of two steps before, so two
        steps' messages are on their way at once; the parameters a step computes on then miss
        the last two pushes, which costs some AUC (docs/benchmarks.md).
        With `prefetch_ahead=1` a batch's rows that the batch before it holds, and the dense
        tensors, are read with the next push, after it (worker_sdk/ps/fresh.py): one worker's
        step computes on every push of its own. `prefetch_ahead=0` hands the hook the batch
        about to be yielded, so all of its data rides with the loop's last push and is read
        after it, and the loop waits for that whole message every step."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if prefetch_ahead < 0:
            raise ValueError(f"prefetch_ahead must be >= 0, got {prefetch_ahead}")
        self._refuse_worker_processes()
        reader = self.reader
        if collate_fn is not None:
            if not isinstance(reader, readers.RecordReader):
                raise ValueError("collate_fn applies to record-by-record datasets; this one is "
                                 "read by ranges, its batches come out of its reader")
            reader = readers.RecordReader(reader.source, collate_fn)
        return self._batches(batch_size, drop_last, reader, prefetch, prefetch_ahead)

    def plan_batch(self, batch_size: int) -> tuple[list[Piece], Any]:
        """Lease positions for one batch: (pieces, why it is short: END, a Wait or None).
        The pieces are taken from their leases but not delivered."""
        stream = self.stream
        pieces: list[Piece] = []
        have = 0
        item = None
        while have < batch_size:
            item = stream.next_piece(batch_size - have)
            if item is END or isinstance(item, Wait):
                break
            pieces.append(item)
            have += item.count
            if have == batch_size:
                pieces, have = self._still_held(pieces)
        if have < batch_size:
            pieces, have = self._still_held(pieces)
        return pieces, (None if have == batch_size else item)

    def _still_held(self, pieces: list[Piece]) -> tuple[list[Piece], int]:
        """A lease taken away while we planned: its records are done elsewhere."""
        kept = [p for p in pieces if self.stream.holds(p)]
        return kept, sum(p.count for p in kept)

    def _batches(self, batch_size: int, drop_last: bool, reader, prefetch,
                 depth: int) -> Iterator[Any]:
        stream = self.stream
        this_pass = stream.begin_pass()
        # With a prefetch hook, batches read ahead and not delivered, in order: [pieces, batch,
        # hooked]. The next batch is handed to the hook first thing in a step (right after the
        # loop gave its last push, so the two go to the PS as one message without waiting for
        # a read), and the one after it is read then, while that message is on its way.
        # With depth 0 the hook gets the batch about to be yielded (read ahead by the step
        # before), so its rows are read after the push that just left with them.
        ahead: deque[list] = deque()
        if prefetch is not None:
            stream.lease_ahead = True  # nor does the loop wait for the master's GetShard
        while stream.current(this_pass):
            stream.next_step()
            if ahead:
                pieces, batch, hooked = ahead.popleft()
                short = None
            else:
                (pieces, short), batch, hooked = self.plan_batch(batch_size), None, False
            if pieces and (short is None or not drop_last):
                if batch is None:
                    batch = self._read(reader, pieces)
                if prefetch is not None:
                    if not hooked:
                        prefetch(batch)  # every batch is prefetched once, in order
                    for i in range(depth):
                        if len(ahead) == i:
                            self._read_ahead(batch_size, reader, ahead)
                            if len(ahead) == i:
                                break
                        if not ahead[i][2]:
                            prefetch(ahead[i][1])
                            ahead[i][2] = True
                    if len(ahead) == depth:
                        self._read_ahead(batch_size, reader, ahead)
                stream.deliver(pieces)
                yield batch
                continue
            if pieces:  # drop_last: a short batch, skipped on purpose
                stream.skip(pieces)
            if short is END:
                return
            if stream.at_tail():
                return
            stream.wait(short)

    def _read(self, reader, pieces: list[Piece]):
        try:
            return readers.read_batch(reader, [self.stream.records(p) for p in pieces])
        except BaseException:
            for p in reversed(pieces):
                self.stream.unread(p)
            raise

    def _read_ahead(self, batch_size: int, reader, ahead: deque) -> None:
        """Read the next full batch now and append it to `ahead` (not hooked yet); nothing is
        taken when it would be short."""
        pieces, short = self.plan_batch(batch_size)
        if short is not None:
            for p in reversed(pieces):
                self.stream.unread(p)
            return
        ahead.append([pieces, self._read(reader, pieces), False])

    def loader(self, batch_size: int, num_workers: int = 0, **kwargs) -> Iterator[Any]:
        """A torch DataLoader whose batches the main process leases (worker_sdk/data/loader.py)."""
        from .loader import ElasticLoader

        return ElasticLoader(self, batch_size, num_workers=num_workers, **kwargs)

    def _refuse_worker_processes(self) -> None:
        if get_worker_info() is not None:
            raise RuntimeError(WORKER_PROCESSES_REFUSED)
