"""ElasticDataset: any indexable dataset, read shard by shard as the master hands them out.

    ds = ElasticDataset(my_dataset, master="localhost:50051", name="train",
                        shard_size=256, num_epochs=3, shuffle=True)
    for x, y in ds.batches(batch_size=64):   # or `for sample in ds`, or DataLoader(ds, ...)
        ...train one step...

One pass over `ds` covers every epoch: the master opens epoch e + 1 as soon as epoch e has
nothing left to hand out, so `ds.epoch` (the epoch of the last sample handed out) is the way to
know where you are. The pass ends when the master answers END (every record of every epoch
trained once, by some worker); the worker then leaves the master with reason "finished".

THE ACK RULE (see worker_sdk/ack.py and docs/worker_sdk.md): a record counts as trained, and is
reported to the master, only after the training step that consumed it finished. The `ack`
argument says how the SDK learns that:

* "push": when `worker_sdk.ack.trained()` is called (`PSClient.push` does, after a successful
  push) or `ds.mark_trained()`; nothing else acknowledges anything.
* "next": when the training loop asks for the next step's data: the next batch from
  `batches()`, the next sample when iterating samples, the next batch of a
  `DataLoader(ds, batch_size=B, num_workers=0)` (the SDK finds the DataLoader's batch size
  when it starts iterating). A synchronous loop has finished its step by then. The last step of
  a pass is acknowledged by the request after it, or by `close()` (`with ds:`) or the normal end
  of the program, but not after an exception escaped the loop.
* "auto" (default): "push" once a PSClient exists in the process (it calls
  `ack.use_push_acks()`), "next" until then.

Prefetching must never acknowledge records that were not trained, so DataLoader worker
processes (`num_workers > 0`) are refused: they would read ahead in other processes, which the
SDK can neither see nor fence. Use `num_workers=0` or `batches()`.
"""
from __future__ import annotations

import atexit
import logging
import sys
import threading
from typing import Any, Callable, Iterator

from torch.utils.data import DataLoader, IterableDataset, get_worker_info
from torch.utils.data import default_collate

from protos import master_pb2 as pb

from . import ack as ack_ledger
from . import preempt
from .errors import Cancelled, ElasticError, MasterError
from .leases import HeldLease, LeaseTable
from .master_client import MasterClient
from .record_order import ShardLayout
from rpckit.errors import Reason
from rpckit.retry import RetryPolicy

log = logging.getLogger(__name__)

ACK_MODES = ("auto", "push", "next")
CLOSE_RETRY_S = 10.0  # closing (at exit too) does not wait out the full retry budget
_END = object()  # the master answered END

WORKER_PROCESSES_REFUSED = (
    "ElasticDataset cannot be read by DataLoader worker processes (num_workers > 0): they would "
    "read and hold records ahead of training in processes the SDK cannot see, and a record must "
    "be reported trained only after the step that consumed it finished. Use "
    "DataLoader(ds, batch_size=..., num_workers=0), or ds.batches(batch_size); make a slow "
    "__getitem__ cheaper (e.g. a numpy memmap) rather than prefetching it in workers."
)


class _Wait:
    def __init__(self, retry_after_ms: int):
        self.seconds = max(retry_after_ms, 10) / 1000.0


class ElasticDataset(IterableDataset):
    """An IterableDataset whose records are leased from the elastic-ps master shard by shard.

    Promises: over the whole job every record of every epoch is counted trained exactly once,
    by whichever worker trained it, whatever workers die, stall, get preempted or join; a record
    is reported only after its training step finished (the ack rule above); on SIGTERM the
    worker hands its leases back with their trained offsets and exits 0 (see
    worker_sdk/preempt.py).
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
    ):
        """
        dataset: anything with len() and __getitem__(int) (a map-style torch Dataset, a numpy
            memmap, a list).
        master: "host:port" of the master (default $ELASTIC_PS_MASTER or localhost:50051), or
            a MasterClient to share one worker registration between datasets.
        name, shard_size, num_epochs, shuffle, seed, lease_timeout_s: the dataset spec created
            on the master (the same spec again is a no-op; a different one under the same name
            raises DatasetSpecMismatch). lease_timeout_s 0 means the master's default (600 s).
        max_shards: leases asked for per GetShard call.
        worker_name, labels: how the worker registers (labels default to
            $ELASTIC_PS_WORKER_LABELS, e.g. "market=spot").
        ack: "auto", "push" or "next": see the module docstring.
        handle_sigterm: install the SIGTERM handler (worker_sdk/preempt.py). Pass False when
            something else owns the process's signals.
        retry_timeout_s: give up on an unreachable master after this long (default 120 s).
        tls_ca, auth_token: a TLS master's CA file and the job's token (default
            $ELASTIC_PS_TLS_CA, $ELASTIC_PS_AUTH_TOKEN or $ELASTIC_PS_AUTH_TOKEN_FILE).
        """
        if ack not in ACK_MODES:
            raise ValueError(f"ack must be one of {ACK_MODES}, got {ack!r}")
        try:
            num_records = len(dataset)
        except TypeError:
            raise TypeError("ElasticDataset needs an indexable dataset with len() and "
                            f"__getitem__(int); got {type(dataset).__name__}") from None
        if num_records <= 0:
            raise ValueError("the dataset is empty: nothing to train on")
        if max_shards < 1:
            raise ValueError(f"max_shards must be >= 1, got {max_shards}")
        self.dataset = dataset
        self.ack_mode = ack
        self.max_shards = max_shards
        self.spec = pb.DatasetSpec(
            name=name, num_records=num_records, shard_size=shard_size, num_epochs=num_epochs,
            shuffle=shuffle, seed=seed, lease_timeout_s=lease_timeout_s,
        )
        if isinstance(master, MasterClient):
            self.client, self._owns_client = master, False
        else:
            policy = RetryPolicy(total_s=retry_timeout_s) if retry_timeout_s is not None else None
            self.client = MasterClient(master, worker_name, labels, policy=policy,
                                       tls_ca=tls_ca, auth_token=auth_token)
            self._owns_client = True
        self.layout = ShardLayout(num_records, shard_size, shuffle, seed)
        self.table = LeaseTable(name)
        try:
            self.client.create_dataset(self.spec)
        except BaseException:
            self.table.close()
            if self._owns_client:
                self.client.close()
            raise
        self.client.attach(self.table)
        self.epoch = 0  # epoch of the last record handed out
        self.delivered = 0  # records handed to the training loop by this object
        self._ended = False  # the master answered END: nothing more will ever come
        self._pass_over = False  # the last pass ran out of data (END, or the tail of the job)
        self._closed = False
        self._pass = 0  # the current pass over the data; a new iteration supersedes the last
        self._close_lock = threading.Lock()
        self._sigterm = handle_sigterm and preempt.install(self)
        _open.add(self)

    # ---- the ack rule -----------------------------------------------------------------------

    @property
    def push_acks(self) -> bool:
        """True when records are acknowledged by pushes only (see the module docstring)."""
        return self.ack_mode == "push" or (
            self.ack_mode == "auto" and ack_ledger.push_acks_enabled())

    def mark_trained(self) -> int:
        """The training step that consumed everything delivered so far has finished."""
        return self.table.mark_trained()

    def mark_failed(self, message: str = "") -> int:
        """The training step that consumed the records in flight failed (e.g. a poison record).

        Their leases are reported FAILED at once, keeping what was trained before; the master
        requeues the rest and quarantines a shard that fails too often. Returns how many leases
        were failed. Iteration goes on with other shards."""
        failed = self.table.fail_in_flight(message)
        if failed:
            self.client.report()
        return failed

    def _next_step(self) -> None:
        """The loop asks for the next step's data: in "next" mode its last step is trained."""
        if not self.push_acks:
            self.table.mark_trained()

    # ---- iteration ----------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        """Yield samples. With a DataLoader(num_workers=0) its batch size is found here, so that
        the "next" ack mode acknowledges whole batches."""
        self._refuse_worker_processes()
        step = _dataloader_step(self)
        if step is None and not self.push_acks:
            raise ValueError(
                "ElasticDataset cannot tell the batch boundaries of this DataLoader (it has a "
                "custom batch_sampler), so the 'next' ack mode cannot know when a step finished. "
                "Use ack='push' and call ds.mark_trained() after each step, or ds.batches()."
            )
        return self._samples(step or 1)

    def _begin_pass(self) -> int:
        """A new pass supersedes any earlier one (only one is read at a time): whatever the
        last one handed out was trained ("next" mode), and what it read but never handed out
        is read again."""
        self._pass += 1
        self._next_step()
        self.table.rewind()
        return self._pass

    def _samples(self, step: int) -> Iterator[Any]:
        this_pass = self._begin_pass()
        handed = 0
        while self._pass == this_pass:
            if handed % step == 0:
                self._next_step()
            item = self._next_record()
            if item is _END:
                return
            if isinstance(item, _Wait):
                if self.table.in_flight():
                    self._end_pass_at_tail()
                    return
                self._sleep(item.seconds)
                continue
            lease, sample = item
            self.table.deliver([lease])
            self._delivered(lease, 1)
            handed += 1
            yield sample

    def batches(self, batch_size: int, drop_last: bool = False,
                collate_fn: Callable[[list], Any] | None = None) -> Iterator[Any]:
        """Yield batches of `batch_size` samples collated like a DataLoader's
        (`torch.utils.data.default_collate`, or `collate_fn`).

        A batch is short at the end of the data, and also at the tail of the job when the
        master has nothing to hand out right now while this worker still holds records: waiting
        for more then could wait for ourselves. With `drop_last`, such a short batch is not
        yielded and its records count as done without being trained (skipped on purpose, as a
        DataLoader's drop_last skips them)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self._refuse_worker_processes()
        collate = collate_fn or default_collate
        return self._batches(batch_size, drop_last, collate)

    def _batches(self, batch_size: int, drop_last: bool, collate) -> Iterator[Any]:
        this_pass = self._begin_pass()
        while self._pass == this_pass:
            self._next_step()
            pairs: list[tuple[HeldLease, Any]] = []
            item = None
            while True:
                while len(pairs) < batch_size:
                    item = self._next_record()
                    if item is _END or isinstance(item, _Wait):
                        break
                    pairs.append(item)
                # a lease taken away while we read it: its records are done elsewhere
                pairs = [p for p in pairs if self.table.holds(p[0])]
                if len(pairs) == batch_size or item is _END or isinstance(item, _Wait):
                    break
            leases = [lease for lease, _ in pairs]
            if len(pairs) == batch_size or (pairs and not drop_last):
                self.table.deliver(leases)
                self._delivered(leases[-1], len(leases))
                yield collate([sample for _, sample in pairs])
                continue
            if pairs:  # drop_last: a short batch, skipped on purpose
                self._skip(leases)
            if item is _END:
                return
            if self.table.in_flight():
                self._end_pass_at_tail()
                return
            self._sleep(item.seconds)

    def _skip(self, leases: list[HeldLease]) -> None:
        log.info("dataset %r: skipping %d records of a short last batch (drop_last)",
                 self.spec.name, len(leases))
        self.table.deliver(leases)
        if not self.table.in_flight() - len(leases):
            self.table.mark_trained()

    def _delivered(self, lease: HeldLease, n: int) -> None:
        self.epoch = lease.epoch
        self.delivered += n
        self._pass_over = False

    def _next_record(self):
        """(lease, sample) for the next position to read, or _END, or a _Wait."""
        while True:
            try:
                preempt.checkpoint()
                got = self.table.take()
                if got is not None:
                    lease, k = got
                    sample = self.dataset[self.layout.record(lease.epoch, lease.index,
                                                             lease.start, k)]
                    if self.table.holds(lease):
                        return lease, sample
                    continue  # taken away while we read it
                if self._ended:
                    return _END
                try:
                    response, uncertain = self.client.get_shard(
                        self.spec.name, self.max_shards, cancel=preempt.stopping)
                except MasterError as exc:
                    if exc.reason != Reason.UNKNOWN_DATASET:
                        raise
                    log.warning("the master does not know dataset %r (was its database "
                                "replaced?); creating it again", self.spec.name)
                    self.client.create_dataset(self.spec)
                    continue
                leases = list(response.leases)
                if uncertain:
                    leases += self._orphans(leases)
                for lease in leases:
                    s = lease.shard
                    self.table.add(lease.lease_id, s.epoch, s.index, s.start, s.end)
                if leases:
                    continue
                if response.status == pb.GetShardResponse.END:
                    self._finish()
                    return _END
                return _Wait(response.retry_after_ms)
            except Cancelled:
                preempt.checkpoint()
                raise

    def _orphans(self, granted: list[pb.Lease]) -> list[pb.Lease]:
        """Leases granted by an attempt whose answer was lost: the master holds them for us, so
        we take them up (otherwise they would sit idle until their lease timeout)."""
        known = {lease.lease_id for lease in granted} | set(self.table.leases)
        try:
            mine = self.client.worker_leases(self.spec.name)
        except ElasticError as exc:
            log.warning("could not check for leases granted in a lost answer: %s", exc)
            return []
        found = [lease for lease in mine if lease.lease_id not in known]
        if found:
            log.info("dataset %r: taking up %d leases granted in an answer that was lost",
                     self.spec.name, len(found))
        return found

    def _sleep(self, seconds: float) -> None:
        preempt.stopping.wait(seconds)
        preempt.checkpoint()

    def _end_pass_at_tail(self) -> None:
        """Nothing to hand out right now, and the loop holds records whose step has not been
        acknowledged. Waiting here could wait for ourselves (the master waits for those very
        records), so the pass ends; they are acknowledged by the next push, mark_trained(),
        the next pass, or close()."""
        log.info("dataset %r: no shard left to hand out while %d records are in training; "
                 "ending this pass", self.spec.name, self.table.in_flight())
        self._pass_over = True

    def _finish(self) -> None:
        self._ended = True
        self._pass_over = True
        self.table.drop_all("the dataset ended")
        log.info("dataset %r: every epoch is done (%d records handed out here)",
                 self.spec.name, self.delivered)
        if self._owns_client:
            try:
                self.client.leave("finished")
            except ElasticError as exc:
                log.warning("could not leave the master: %s", exc)

    def _refuse_worker_processes(self) -> None:
        if get_worker_info() is not None:
            raise RuntimeError(WORKER_PROCESSES_REFUSED)

    # ---- lifecycle ----------------------------------------------------------------------------

    def close(self, error: bool = False, reason: str | None = None) -> None:
        """Report what was trained and leave the master (if this object registered the worker).

        After a pass that ran out of data, in the "next" ack mode, the loop's last step counts
        as trained, unless `error` (an exception escaped the training loop). Leases not fully
        trained go back to the master with their offsets, at once. Idempotent."""
        if preempt.stopping.is_set():
            self._preempt_leave()  # SIGTERM is being handled: hand back as "preempted"
            return
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        _open.discard(self)
        try:
            if self._pass_over and not error and not self.push_acks:
                self.table.mark_trained()
            if self._owns_client:
                reason = reason or (
                    "error" if error else ("finished" if self._pass_over else "closed"))
                self.client.leave(reason, policy=RetryPolicy(total_s=CLOSE_RETRY_S))
            else:
                self.client.report()
        except ElasticError as exc:
            log.warning("dataset %r: could not report to the master while closing: %s",
                        self.spec.name, exc)
        finally:
            self.client.detach(self.table)
            self.table.close()
            if self._sigterm:
                preempt.uninstall(self)
            if self._owns_client:
                self.client.close()

    def _preempt_busy(self) -> bool:
        return self.table.in_flight() > 0

    def _preempt_freeze(self) -> None:
        self.table.freeze()

    def _preempt_leave(self) -> None:
        """SIGTERM (from the preempt thread): freeze the acks, hand everything back, close."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        _open.discard(self)
        self.table.freeze()
        try:
            # the process is going away: leave even on a shared client
            quick = RetryPolicy(total_s=2.0, call_timeout_s=1.0)
            self.client.leave("preempted", policy=quick, lock_timeout_s=2.0)
        finally:
            self.client.detach(self.table)
            self.table.close()
            if self._owns_client:
                self.client.close()

    def __enter__(self) -> "ElasticDataset":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        failed = exc_type is not None and not issubclass(exc_type, SystemExit)
        interrupted = exc_type is not None and issubclass(exc_type, KeyboardInterrupt)
        self.close(error=failed, reason="interrupted" if interrupted else None)

    def __getstate__(self):
        raise TypeError(WORKER_PROCESSES_REFUSED)

    def stats(self) -> dict[str, int]:
        """Counters of this worker's view: records handed out, leases held and completed,
        leases taken away, duplicate reports, records read from leases taken away."""
        with self.table.lock:
            return dict(
                delivered=self.delivered, epoch=self.epoch, leases_held=len(self.table.leases),
                leases_completed=self.table.completed, leases_dropped=self.table.dropped,
                duplicates=self.table.duplicates, wasted=self.table.wasted,
                in_flight=self.table.in_flight(),
            )

    @property
    def num_records(self) -> int:
        return self.spec.num_records


def _dataloader_step(dataset: ElasticDataset) -> int | None:
    """Samples per training step for the iterator being created: a DataLoader's batch size when
    a DataLoader(num_workers=0) is creating it (found in the caller's frames), 1 otherwise (a
    plain loop: one sample per step), None when a DataLoader's batches are of unknown size."""
    frame = sys._getframe(2)
    for _ in range(8):
        if frame is None:
            break
        loader = frame.f_locals.get("loader")
        if isinstance(loader, DataLoader) and loader.dataset is dataset:
            if loader.batch_sampler is None:
                return 1  # batch_size=None: the loop gets one sample per step
            return loader.batch_size or None
        frame = frame.f_back
    return 1


# open datasets, held until closed so that the end of the program still reports and leaves
_open: "set[ElasticDataset]" = set()


@atexit.register
def _close_at_exit() -> None:
    """The program is ending: report and leave. An uncaught exception (sys.last_value is set
    before atexit runs) means the last step may not have finished: it is not acknowledged."""
    error = getattr(sys, "last_value", None)
    for ds in list(_open):
        ds.close(error=error is not None,
                 reason="interrupted" if isinstance(error, KeyboardInterrupt) else None)
