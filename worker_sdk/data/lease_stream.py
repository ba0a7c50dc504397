"""LeaseStream: the worker's side of the lease protocol for one dataset, without torch.

It turns the master's leases into a stream of *pieces* (runs of consecutive positions of one
lease) and keeps the ack rule (worker_sdk/data/ack.py): what it hands to a training loop is
*delivered*; what the loop's finished steps cover is *trained*, and only that is reported.

    stream = LeaseStream(spec, master="localhost:50051")
    while True:
        item = stream.next_piece(limit=64)   # a Piece, a Wait, or END
        ...read stream.records(piece) from your data, stream.deliver([piece]), train,
        then stream.mark_trained() (or a PSClient push acknowledges it)...

What it does for you: registers (through `MasterClient`, which retries, heartbeats and
re-registers), creates the dataset (again, when a replaced master database forgot it), leases
`max_shards` shards per GetShard carrying the finished leases' reports, takes up leases granted
by a call whose answer was lost (the orphans of an uncertain call), hands its leases back with
their trained offsets on SIGTERM and SIGINT (worker_sdk/data/preempt.py, reasons "preempted" and
"interrupted") and on close.

`ElasticDataset` (worker_sdk/data/dataset.py) is the torch face of this class; the simulated worker
(worker_sdk/data/simworker.py) uses it with no model at all.
"""
from __future__ import annotations

import atexit
import logging
import sys
import threading
from typing import Iterable

import numpy as np

from protos import master_pb2 as pb
from rpckit.errors import Reason
from rpckit.retry import RetryPolicy

from . import ack as ack_ledger
from . import preempt
from ..errors import Cancelled, ElasticError, MasterError
from .leases import LeaseTable
from .master_client import MasterClient
# re-exported: the stream's vocabulary is imported from here by its users
from .pieces import END, AckMode, LeaveReason, Piece, Wait, _End  # noqa: F401
from .record_order import ShardLayout

log = logging.getLogger(__name__)

CLOSE_RETRY_S = 10.0  # closing (at exit too) does not wait out the full retry budget


class LeaseStream:
    """One dataset's leases, read as pieces. Promises: over the job every record of every epoch
    is counted trained exactly once; nothing is reported that a finished step did not cover.
    Not thread-safe for reading (one reader); acknowledgements may come from any thread."""

    def __init__(
        self,
        spec: pb.DatasetSpec | str,
        master: str | MasterClient | None = None,
        *,
        max_shards: int = 2,
        worker_name: str | None = None,
        labels: dict[str, str] | None = None,
        ack: AckMode | str = AckMode.AUTO,
        handle_sigterm: bool = True,
        retry_timeout_s: float | None = None,
        heartbeat: bool = True,
        tls_ca: str | None = None,
        auth_token: str | None = None,
        cancel: threading.Event | None = None,
        lease_ahead: bool = False,
        stub=None,
        ledger: ack_ledger.AckLedger | None = None,
    ):
        """spec: the dataset to create (or check) on the master, or the name of one that
        already exists (then `records()` is unavailable: the stream does not know its layout).
        master: "host:port" or a MasterClient shared with other streams.
        cancel: an event that abandons retries and waits (default: the SIGTERM flag).
        lease_ahead: lease the next shards in the background once less than half a shard's
        worth of held positions is left unread, so that the reader does not wait for the master
        (`ElasticDataset.batches` with a prefetch hook turns it on: the fast path).
        stub: an in-process master for tests (see MasterClient).
        ledger: the ack ledger that says what was trained (default: the process's)."""
        try:
            self.ack_mode = AckMode(ack)
        except ValueError:
            raise ValueError(f"ack must be one of {[m.value for m in AckMode]}, "
                             f"got {ack!r}") from None
        if max_shards < 1:
            raise ValueError(f"max_shards must be >= 1, got {max_shards}")
        self.spec = spec if isinstance(spec, pb.DatasetSpec) else None
        self.name = spec.name if isinstance(spec, pb.DatasetSpec) else spec
        self.max_shards = max_shards
        self.cancel = cancel or preempt.stopping
        if isinstance(master, MasterClient):
            self.client, self._owns_client = master, False
        else:
            policy = RetryPolicy(total_s=retry_timeout_s) if retry_timeout_s is not None else None
            self.client = MasterClient(master, worker_name, labels, policy=policy,
                                       heartbeat=heartbeat, tls_ca=tls_ca, auth_token=auth_token,
                                       stub=stub)
            self._owns_client = True
        self.layout = (ShardLayout(spec.num_records, spec.shard_size, spec.shuffle, spec.seed)
                       if self.spec is not None else None)
        self.table = LeaseTable(self.name, ledger)
        self.ledger = self.table.ledger
        try:
            if self.spec is not None:
                self.client.create_dataset(self.spec)
        except BaseException:
            self.table.close()
            if self._owns_client:
                self.client.close()
            raise
        self.client.attach(self.table)
        self.epoch = 0  # epoch of the last record delivered
        self.delivered = 0  # records delivered by this stream
        self.ended = False  # the master answered END: nothing more will ever come
        self.pass_over = False  # the last pass ran out of data (END, or the tail of the job)
        # the loop's records were acknowledged after the master answered WAIT: ask again now
        self._ask_now = False
        self.closed = False
        self._pass = 0
        self._close_lock = threading.Lock()
        self.lease_ahead = lease_ahead
        self._ahead: threading.Thread | None = None  # a GetShard made ahead of need, in flight
        self._ahead_ok = True  # the last GetShard granted leases: worth asking ahead again
        self._lease_size = 0  # the largest lease granted: asking ahead starts below this
        self._sigterm = handle_sigterm and preempt.install(self)
        _open.add(self)

    # ---- the ack rule -----------------------------------------------------------------------

    @property
    def push_acks(self) -> bool:
        """True when records are acknowledged by pushes only."""
        return self.ack_mode == AckMode.PUSH or (
            self.ack_mode == AckMode.AUTO and self.ledger.push_acks_enabled())

    def mark_trained(self) -> int:
        """The training step that consumed everything delivered so far has finished."""
        return self.table.mark_trained()

    def mark_failed(self, message: str = "") -> int:
        """The step that consumed the records in flight failed: their leases are reported
        FAILED at once (keeping what was trained before). Returns how many leases failed."""
        failed = self.table.fail_in_flight(message)
        if failed:
            self.client.report()
        return failed

    def next_step(self) -> None:
        """The loop asks for the next step's data: in NEXT mode its last step is trained."""
        if not self.push_acks:
            self.table.mark_trained()

    # ---- reading ------------------------------------------------------------------------------

    def begin_pass(self) -> int:
        """A new pass supersedes any earlier one: whatever the last one delivered was trained
        (NEXT mode), what it read but never delivered is read again. Returns the pass id."""
        self._pass += 1
        self.next_step()
        self.table.rewind()
        return self._pass

    def current(self, pass_id: int) -> bool:
        return self._pass == pass_id

    def next_piece(self, limit: int) -> Piece | Wait | _End:
        """The next run of at most `limit` positions of one held lease (leasing more from the
        master when every held lease is read), or END, or a Wait. A safe point for SIGTERM."""
        while True:
            try:
                preempt.checkpoint()
                got = self.table.take_run(limit)
                if got is not None:
                    self._maybe_lease_ahead()
                    return Piece(*got)
                if self.ended:
                    return END
                if self._join_ahead():
                    continue  # the lease asked ahead granted something: read it
                status = self._lease_more()
                if status is None:
                    continue
                return status
            except Cancelled:
                preempt.checkpoint()
                raise

    # ---- leasing ahead --------------------------------------------------------------------------
    # A GetShard waits for the master's commit (milliseconds): asked when the reader runs dry,
    # the training loop waits for it every few steps. Asked in the background while half a
    # shard's worth of positions is still unread, it is answered before the reader needs it. Only
    # grants are taken from it; a WAIT, END or error is left to the reader's own GetShard,
    # which handles them as it always does (and asking ahead resumes once one grants again).

    def _maybe_lease_ahead(self) -> None:
        if self._ahead is not None and not self._ahead.is_alive():
            self._join_ahead()
        if (not self.lease_ahead or self._ahead is not None or not self._ahead_ok
                or self.ended or self.closed or self.cancel.is_set()
                or 2 * self.table.unread_positions() >= self._lease_size):
            return
        self._ahead = threading.Thread(target=self._grant_ahead, name="elastic-ps-lease-ahead",
                                       daemon=True)
        self._ahead.start()

    def _grant_ahead(self) -> None:
        try:
            self._ahead_ok = self._grant() is None
        except BaseException as exc:  # noqa: BLE001 - the reader's own GetShard will see it
            self._ahead_ok = False
            log.info("dataset %r: leasing ahead failed (%s); the reader will ask itself",
                     self.name, exc)

    def _join_ahead(self) -> bool:
        """Wait for a GetShard asked ahead; True when it granted leases."""
        if self._ahead is None:
            return False
        self._ahead.join()
        self._ahead = None
        return self._ahead_ok

    def _settle_ahead(self, timeout_s: float) -> None:
        """Closing: let a GetShard asked ahead end first, so that the leave hands back what it
        granted (the leave waits for the same lock anyway)."""
        ahead = self._ahead
        if ahead is not None and ahead is not threading.current_thread():
            ahead.join(timeout_s)

    def _lease_more(self) -> Wait | _End | None:
        """One GetShard (carrying the pending reports); None when it granted leases."""
        try:
            response = self._grant()
        except MasterError as exc:
            if exc.reason != Reason.UNKNOWN_DATASET or self.spec is None:
                raise
            log.warning("the master does not know dataset %r (was its database replaced?); "
                        "creating it again", self.name)
            self.client.create_dataset(self.spec)
            return None
        self._ahead_ok = response is None
        if response is None:
            return None
        if response.status == pb.GetShardResponse.END:
            self._finish()
            return END
        return Wait(max(response.retry_after_ms, 10) / 1000.0)

    def _grant(self) -> pb.GetShardResponse | None:
        """One GetShard; None when it granted leases (now in the table), else its answer."""
        response, uncertain = self.client.get_shard(self.name, self.max_shards,
                                                    cancel=self.cancel)
        leases = list(response.leases)
        if uncertain:
            leases += self._orphans(leases)
        for lease in leases:
            s = lease.shard
            self.table.add(lease.lease_id, s.epoch, s.index, s.start, s.end)
            self._lease_size = max(self._lease_size, s.end - s.start)
        return None if leases else response

    def _orphans(self, granted: list[pb.Lease]) -> list[pb.Lease]:
        """Leases granted by an attempt whose answer was lost: the master holds them for us, so
        we take them up (otherwise they would sit idle until their lease timeout)."""
        with self.table.lock:
            known = {lease.lease_id for lease in granted} | set(self.table.leases)
        try:
            mine = self.client.worker_leases(self.name)
        except ElasticError as exc:
            log.warning("could not check for leases granted in a lost answer: %s", exc)
            return []
        found = [lease for lease in mine if lease.lease_id not in known]
        if found:
            log.info("dataset %r: taking up %d leases granted in an answer that was lost",
                     self.name, len(found))
        return found

    def records(self, piece: Piece) -> slice | np.ndarray:
        """The record indices of `piece`: a slice (in order) or an index array (shuffled)."""
        lease = piece.lease
        return self.layout.records(lease.epoch, lease.index, lease.start, piece.first,
                                   piece.count)

    def holds(self, piece: Piece) -> bool:
        """Whether the piece's lease is still ours (else its records are trained elsewhere)."""
        return self.table.holds(piece.lease)

    def unread(self, piece: Piece) -> None:
        """The piece was taken but will not be delivered (e.g. a read raised): read it again."""
        self.table.unread(piece.lease, piece.first)

    def deliver(self, pieces: Iterable[Piece]) -> None:
        """The training loop now holds these pieces' records (in this order)."""
        pieces = list(pieces)
        self.table.deliver_runs((p.lease, p.count) for p in pieces)
        if pieces:
            self.epoch = pieces[-1].lease.epoch
            self.delivered += sum(p.count for p in pieces)
            self.pass_over = False

    def skip(self, pieces: Iterable[Piece]) -> None:
        """Records skipped on purpose (a drop_last batch): delivered and counted as done."""
        pieces = list(pieces)
        n = sum(p.count for p in pieces)
        log.info("dataset %r: skipping %d records of a short last batch (drop_last)",
                 self.name, n)
        self.table.deliver_runs((p.lease, p.count) for p in pieces)
        if not self.table.in_flight() - n:
            self.table.mark_trained()

    def wait(self, item: Wait) -> None:
        """Sleep the master's retry hint before the next GetShard; not when `at_tail` has just
        acknowledged records the WAIT was decided without (at the job's end they are what the
        master waits for: their reports, carried by the next GetShard, end it)."""
        if self._ask_now:
            self._ask_now = False
        else:
            self.cancel.wait(item.seconds)
        preempt.checkpoint()

    def at_tail(self) -> bool:
        """Nothing to lease right now while the loop holds records not yet acknowledged:
        waiting could wait for ourselves (the master waits for those very records), so the
        pass should end; they are acknowledged by the next push, mark_trained(), the next pass
        or close()."""
        if not self.table.in_flight():
            return False
        self.ledger.flush(CLOSE_RETRY_S)  # pushes in flight: their answers may free the tail
        if not self.table.in_flight():
            self._ask_now = True  # once: their reports now go with the next GetShard
            return False
        log.info("dataset %r: no shard left to hand out while %d records are in training; "
                 "ending this pass", self.name, self.table.in_flight())
        self.pass_over = True
        return True

    def _finish(self) -> None:
        self.ended = True
        self.pass_over = True
        self.table.drop_all("the dataset ended")
        if self.delivered:
            log.info("dataset %r: every epoch is done (%d records delivered here)", self.name,
                     self.delivered)
        else:  # a re-run of a finished dataset would otherwise do zero steps silently
            log.warning("dataset %r has finished every epoch on the master already: nothing to "
                        "train. To train it again, drop it (elastic-ctl drop %s) or use another "
                        "name", self.name, self.name)
        if self._owns_client:
            try:
                self.client.leave(LeaveReason.FINISHED)
            except ElasticError as exc:
                log.warning("could not leave the master: %s", exc)

    # ---- lifecycle ----------------------------------------------------------------------------

    def close(self, error: bool = False, reason: LeaveReason | str | None = None) -> None:
        """Report what was trained and leave the master (if this stream registered the worker).

        After a pass that ran out of data, in NEXT mode, the loop's last step counts as
        trained, unless `error` (an exception escaped the training loop). Leases not fully
        trained go back to the master with their offsets, at once. Idempotent."""
        if preempt.stopping.is_set():  # SIGTERM / SIGINT is being handled: hand back as such
            self._preempt_leave(preempt.reason())
            return
        with self._close_lock:
            if self.closed:
                return
            self.closed = True
        _open.discard(self)
        self._settle_ahead(CLOSE_RETRY_S)
        try:
            self.ledger.flush(CLOSE_RETRY_S)  # let pushes in flight be answered and acknowledged
            if self.pass_over and not error and not self.push_acks:
                self.table.mark_trained()
            if self._owns_client:
                reason = reason or (LeaveReason.ERROR if error else (
                    LeaveReason.FINISHED if self.pass_over else LeaveReason.CLOSED))
                self.client.leave(reason, policy=RetryPolicy(total_s=CLOSE_RETRY_S))
            else:
                self.client.report()
        except ElasticError as exc:
            log.warning("dataset %r: could not report to the master while closing: %s",
                        self.name, exc)
        finally:
            self._release()

    def _release(self) -> None:
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

    def _preempt_leave(self, reason: LeaveReason | str = LeaveReason.PREEMPTED) -> None:
        """SIGTERM or SIGINT (from the preempt thread): freeze the acks, hand everything back
        with exact offsets (reason "preempted" or "interrupted"), close."""
        with self._close_lock:
            if self.closed:
                return
            self.closed = True
        _open.discard(self)
        self.table.freeze()
        self._settle_ahead(2.0)  # cancelled by the SIGTERM flag; what it granted goes back too
        try:
            # the process is going away: leave even on a shared client
            quick = RetryPolicy(total_s=2.0, call_timeout_s=1.0)
            self.client.leave(reason, policy=quick, lock_timeout_s=2.0)
        finally:
            self._release()

    def stats(self) -> dict[str, int]:
        """Counters of this worker's view: records delivered, leases held and completed,
        leases taken away, duplicate reports, records read from leases taken away."""
        t = self.table
        with t.lock:
            return dict(
                delivered=self.delivered, epoch=self.epoch, leases_held=len(t.leases),
                leases_completed=t.completed, leases_dropped=t.dropped,
                duplicates=t.duplicates, wasted=t.wasted, in_flight=t.in_flight(),
            )


# open streams, held until closed so that the end of the program still reports and leaves
_open: "set[LeaseStream]" = set()


@atexit.register
def _close_at_exit() -> None:
    """The program is ending: report and leave. An uncaught exception (sys.last_value is set
    before atexit runs) means the last step may not have finished: it is not acknowledged."""
    error = getattr(sys, "last_value", None)
    for stream in list(_open):
        stream.close(error=error is not None,
                     reason=LeaveReason.INTERRUPTED if isinstance(error, KeyboardInterrupt)
                     else None)
