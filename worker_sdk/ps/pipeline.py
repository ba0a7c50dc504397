"""The pipelined step: Steps sent at once and answered while the loop computes, without threads.

The loop gives *pushes* (`PSClient.push(wait=False)`) and *prefetches* (the next step's dense
parameters and embedding rows). Each goes out as a `Step` per PS (worker_sdk/ps/steps.py) as
soon as it is given, from the caller's thread: `DataClient.begin_step` sends and returns, and
the answers are collected when the loop needs them (its next pull or forward, room for a
push, `flush`). ZeroMQ's own I/O thread moves the bytes meanwhile, so the PS work while the
loop computes, and no Python thread of ours competes with the loop for the GIL or a core: on
two cores, handing each step to a background thread cost more than the overlap won.

A push and the prefetch given right after it go out together: once the loop has shown that
prefetches follow its pushes (`ds.batches` calls the hook first thing in the next step), a
push is held until the next call (a prefetch takes it along; any other call sends it alone
first, and pushes then go at once until the loop prefetches again). With `read_own_writes` a
prefetch may be read in two parts, and a push then goes as two Steps per PS (fresh.py);
otherwise one Step per PS. With `correct_own_writes` the step adds the pushes its prefetch
misses (correct.py; which ones: served.py).

Every Step in flight has its own `DataClient` (made on first need; a client has one call
outstanding at most, and each has its own client_id, so each one's requests stay in order and
at most once on every PS). With `max_inflight` 2, a step's Step may leave while the last one's
is unanswered; a PS may then apply two of this worker's steps in either order, as it does the
steps of two workers.

Promises:
* At most `max_inflight` pushes are unanswered; `submit` collects the oldest for room.
* Answers are collected oldest first, so pushes settle in the order given: a push acknowledges
  its records (`ledger.trained(mark)`, the ledger it was given) only once every PS answered
  it and every push before it settled.
* A push that fails (a PS unreachable after every retry, a refusal) is kept and raised at the
  caller's next call; the records in flight are abandoned at once (`ledger.abandon`: their
  leases are reported with the trained prefix, RELEASED when no PS took the push or it was
  stale, FAILED when a PS refused what it carried), pushes given after it are dropped unsent,
  and those already sent acknowledge nothing, so no later mark can acknowledge them.
* A failed prefetch is not an error: the caller pulls synchronously instead.
* Thread-safe: the SIGTERM path flushes from its own thread (worker_sdk/data/preempt.py); calls
  are serialized by one lock.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Callable

import torch

from . import correct, fresh, served
from .data_client import DataClient, PSUnavailable, StaleGradient
from .jobs import Flight, Prefetch, PushJob, unreachable  # noqa: F401 - PushJob too
from .ids import mark, unique_inverse

from ..data.ack import AckLedger

log = logging.getLogger(__name__)

MAX_PREFETCHED = 4  # prefetches kept for coming steps (a loop reads at most one or two ahead)
_DROPPED = object()  # marker: a push never sent


class PushFailed(RuntimeError):
    """A background push failed; its records (and those after it) were never acknowledged."""


class Pipeline:
    def __init__(self, make_client: Callable[[], DataClient], ledger: AckLedger,
                 max_inflight: int = 1, read_own_writes: bool = False):
        """ledger: where a settled push acknowledges its records (`trained(mark)`) and a
        failed one abandons those in flight (`abandon`): the training loop's ack ledger.
        read_own_writes: read each prefetched batch in two parts (worker_sdk/ps/fresh.py)."""
        self._read_own_writes = read_own_writes
        # correct_own_writes (worker_sdk/ps/correct.py): set by the client once it knows the
        # optimizer
        self.own_writes = None
        self._given = 0  # pushes given
        self._sent = 0  # pushes sent (given in order, so sent in order)
        self.own_added = self.own_missed = 0  # pushes added to a read / maybe in it: not added
        self.own_unmarked = 0  # rows a push met in a read without their state: not corrected
        self.order = served.PushOrder()  # tells reads served before the next push (served.py)
        self._deltas: deque[tuple] = deque(maxlen=MAX_PREFETCHED)  # (index, dense, rows)
        self._make_client = make_client
        self._ledger = ledger
        self._max_inflight = max_inflight
        self._owner: dict[str, int] = {}
        self._lock = threading.RLock()
        self._free: list[DataClient] = []  # clients with no call outstanding
        self._flights: deque[Flight] = deque()  # oldest first
        self._held: PushJob | None = None  # a push waiting for the prefetch after it
        self._expect_prefetch = False  # prefetches follow pushes: hold a push for one
        self._stale = 0
        self._failure: BaseException | None = None
        self._raised = False
        self._prefetched: deque[Prefetch] = deque()  # in the order of their steps
        self._awaiting: Prefetch | None = None  # its late part goes with the next push
        self.max_staleness = 0
        self.wait_pull_s = 0.0
        self.wait_push_s = 0.0

    def set_layout(self, owner: dict[str, int]) -> None:
        self._owner = dict(owner)

    # ---- the caller's side ------------------------------------------------------------------

    def raise_failure(self) -> None:
        if self._failure is not None and not self._raised:
            self._raised = True
            raise PushFailed(f"a background push failed: {self._failure}; the records of the "
                             "steps in flight were not acknowledged") from self._failure

    def submit(self, job: PushJob) -> None:
        with self._lock:
            if self._held is not None:  # no prefetch came after the last push: stop holding
                self._expect_prefetch = False
                self._send_held()
            started = time.perf_counter()
            while self._pushes_unanswered() >= self._max_inflight:
                self._collect()
            self.wait_push_s += time.perf_counter() - started
            self._given += 1
            job.index = self._given
            if self.own_writes is not None:
                self._deltas.append((self._given, *self.own_writes.deltas(job.grads, job.rows)))
                self.order.given(self._given, job.grads)
            if self._expect_prefetch:
                self._held = job  # the loop's next call is its prefetch: both go as one Step
            else:
                self._send(job, None)

    def prefetch(self, names: list[str] | None, ids: dict[str, torch.Tensor]) -> None:
        """Fetch for a coming step (sent now, with the push given just before, if any).
        Prefetches are used in the order they were given, one per step: the next pull takes
        the oldest one's dense tensors, the next forward of each table its rows."""
        job = Prefetch(names, {t: torch.as_tensor(v, dtype=torch.int64) for t, v in ids.items()})
        with self._lock:
            job.after = self._given
            self._expect_prefetch = True
            self._prefetched.append(job)
            while len(self._prefetched) > MAX_PREFETCHED:
                self._prefetched.popleft()  # never used: the loop does not pull every step
            push, self._held = self._held, None
            self._send(push, job)

    def take_dense(self, names: list[str]):
        """(tensors, versions, updates) of the oldest prefetch whose dense tensors are unused,
        waiting for it; None when there is none (or it failed). `updates`: name -> what the
        tensor misses of this worker's own pushes, to add (correct_own_writes; else empty)."""
        with self._lock:
            self._send_held()  # a pull before the prefetch: the push goes first
            job = next((j for j in self._prefetched if not j.dense_used), None)
            if job is None:
                self._expect_prefetch = False  # this loop pulls without prefetching
                return None
            self._wait(job)
            job.dense_used = True
            self._forget_used()
            dense, versions = job.dense, job.versions
            if dense is None or not all(n in dense for n in names):
                return None
            updates = correct.missed_dense(self._deltas, max(job.after, job.sent))
            self._count_own(job)
            if len(dense) == len(names):  # exactly the names asked (the usual step)
                return dense, versions, updates
            return {n: dense[n] for n in names}, {n: versions[n] for n in names}, updates

    def take_rows(self, table: str, ids: torch.Tensor):
        """(unique ids, inverse, rows) of `table` from the oldest prefetch that has rows for
        it, when it was given these ids; else None."""
        with self._lock:
            self._send_held()
            job = next((j for j in self._prefetched if table in j.ids), None)
            if job is None:
                return None
            given = job.ids[table]
            self._wait(job)
            got = job.rows.pop(table, None)
            job.ids = {t: v for t, v in job.ids.items() if t != table}
            self._forget_used()
            if got is not None:
                state = (job.marks[table], job.states[table]) if table in job.states else None
                self.own_unmarked += correct.missed_rows(
                    self._deltas, max(job.after, job.sent), table, got, state)
        if got is None or given.shape != ids.shape or not torch.equal(given, ids):
            return None  # checked by value: the caller may have changed its tensor since
        return got

    def _count_own(self, job: Prefetch) -> None:
        for index, _, _ in self._deltas:
            if index > job.after:
                self.own_added += index > job.sent
                self.own_missed += index <= job.sent

    def flush(self, timeout_s: float | None = None) -> None:
        """Send a held push and collect every Step in flight; raise a failure. `timeout_s`
        bounds the wait for another thread's call first (an answer's: the retry budget)."""
        started = time.perf_counter()
        if not self._lock.acquire(timeout=-1 if timeout_s is None else timeout_s):
            self.wait_push_s += time.perf_counter() - started
            return
        try:
            self._send_held()
            while self._flights:
                self._collect()
        finally:
            self._lock.release()
        self.wait_push_s += time.perf_counter() - started
        self.raise_failure()

    def take_stale(self) -> int:
        with self._lock:
            stale, self._stale = self._stale, 0
        return stale

    def timeline(self) -> dict[str, float]:
        return {"wait_pull_s": self.wait_pull_s, "wait_push_s": self.wait_push_s}

    def close(self) -> None:
        with self._lock:
            clients = self._free + [f.client for f in self._flights]
            self._free, self._flights = [], deque()
        for client in clients:
            client.close()

    # ---- sending and collecting (under the lock) --------------------------------------------

    def _pushes_unanswered(self) -> int:
        # a push's second Step leaves only once its first is answered: never both in flight
        return sum(f.push is not None and (f.settles or f.then is not None)
                   for f in self._flights)

    def _send_held(self) -> None:
        if self._held is not None:
            push, self._held = self._held, None
            self._send(push, None)

    def _client(self) -> DataClient:
        client = self._free.pop() if self._free else self._make_client()
        # the names only: each client places them by the layout it routes by
        if self._owner and client.owner.keys() != self._owner.keys():
            client.owner = dict(self._owner)
        return client

    def _send(self, push: PushJob | None, fetch: Prefetch | None) -> None:
        """Send a push and/or a prefetch; failing to, settle both now. The prefetch awaiting
        its late part takes the push along: then two Steps per PS (fresh.py), else one."""
        if push is not None and self._failure is not None:
            self._settle(push, _DROPPED)  # after a failed push: dropped unsent, never acked
            push = None
        if fetch is not None:
            try:
                # with the inverse the forward needs; checked and cut once for pull and push
                fetch.unique = {t: (mark(u), inv) for t, (u, inv) in
                                ((t, unique_inverse(ids)) for t, ids in fetch.ids.items())}
            except BaseException as exc:  # noqa: BLE001 - ids out of bounds: as a failed send
                self._not_sent(None, push, fetch, exc)
                return
            if self.own_writes is not None and not self._read_own_writes:
                self._mark(fetch)
        late, self._awaiting = self._awaiting, None
        if late is not None and late.done:
            late = None  # its early part failed: the caller pulls instead
        if push is None and fetch is None and late is None:
            return
        part, reads = "all", None
        if fetch is not None:
            reads = self._split_fetch(fetch, late)
            part = "all" if reads is None else "early"
            reads = reads or {t: u for t, (u, _) in fetch.unique.items()}
        if late is None:
            self._begin(push, True, fetch, part, push.rows if push else (), reads)
            return
        late_ids = fresh.late_ids(late.unique, late.late)
        with_reads, rest = fresh.split_rows(push.rows, late_ids) if push else ([], [])
        # the rest goes once this Step is answered: the PS works on this one alone while the
        # loop waits for it, and a push refused as stale (or failed) sends nothing more
        second = bool(rest) or fetch is not None
        self._begin(push, not second, late, "late", with_reads, late_ids,
                    then=(push, fetch, part, rest, reads) if second else None)

    def _mark(self, fetch: Prefetch) -> None:
        before = self._prefetched[-2] if len(self._prefetched) >= 2 else None
        correct.mark_state(fetch, before, self.own_writes)

    def _send_rest(self, push: PushJob | None, fetch: Prefetch | None, part: str, rest,
                   reads) -> None:
        """A push's second Step, once its first was answered; after a failure, nothing."""
        if push is not None and (push.settled or self._failure is not None):
            self._settle(push, _DROPPED)
            if fetch is not None:  # the caller pulls instead
                fetch.done = True
                self._awaiting = None if fetch is self._awaiting else self._awaiting
            return
        self._begin(push, True, fetch, part, rest, reads, first=False)

    def _split_fetch(self, fetch: Prefetch, late: Prefetch | None):
        """`fetch`'s early ids (table -> ids) when it is read in two parts (it then waits for
        the next push), else None: when the prefetch before it, unused yet, is the next
        step's (its ids are what the next push updates)."""
        before = late or (self._prefetched[-2] if len(self._prefetched) == 2 else None)
        if not self._read_own_writes or not before or len(self._prefetched) != 2 \
                or not before.unique:
            return None
        fetch.late, early = fresh.split_reads(fetch.unique, before.unique)
        fetch.waiting = 2
        self._awaiting = fetch
        return early

    def _begin(self, push: PushJob | None, settles: bool, fetch: Prefetch | None, part: str,
               rows, pull_rows, first: bool = True, then: tuple | None = None) -> None:
        """One Step per PS: `push`'s dense gradients (in its `first` Step) and `rows`, then
        the dense tensors of `fetch` (if the part reads them) and `pull_rows`."""
        client = None
        grads = push.grads if push is not None and first else None
        if push is not None and first and self.own_writes is not None:
            # the reads answered before this push leaves certainly miss it: take those in
            self._collect_arrived()
            self._sent = push.index
        names = None
        if fetch is not None and part in ("all", "late") \
                and (self._owner or fetch.names is not None):
            names = fetch.names or list(self._owner)
        try:
            client = self._client()
            pending = client.begin_step(grads, push.versions if grads else None, rows,
                                        pull=names, pull_rows=pull_rows,
                                        marks=fetch.marks if fetch is not None else None)
        except BaseException as exc:  # noqa: BLE001 - a push's is kept and raised later
            self._not_sent(client, push, fetch, exc)
            return
        if grads is not None and self.own_writes is not None:
            self.order.sent(push.index, client.router.owners(grads))
        self._flights.append(Flight(client, pending, push, settles, fetch, part, then))
        while len(self._flights) > self._max_inflight + MAX_PREFETCHED:
            self._collect()  # prefetches never pulled: bounded like the ones kept

    def _collect_arrived(self) -> None:
        """Collect the Steps whose answers are all in, oldest first, waiting for none."""
        while self._flights and self._flights[0].pending.arrived():
            self._collect()

    def _not_sent(self, client: DataClient | None, push: PushJob | None,
                  fetch: Prefetch | None, exc: BaseException) -> None:
        """A Step that could not be sent: settle its push and prefetch now."""
        if client is not None:
            self._free.append(client)
        while push is not None and self._flights and isinstance(exc, Exception):
            self._collect()  # the pushes before this one settle first
        self._failed(push, fetch, exc)
        if not isinstance(exc, Exception):
            raise exc  # KeyboardInterrupt, SystemExit: the push is failed, the caller stops

    def _collect(self) -> None:
        """Wait for the oldest Step in flight and settle it."""
        flight = self._flights.popleft()
        try:
            outcome = flight.pending.result()
        except BaseException as exc:  # noqa: BLE001 - a push's is kept and raised later
            self._failed(flight.push, flight.fetch, exc)
            if flight.then is not None:
                self._send_rest(*flight.then)  # the push is settled: nothing is sent
            if not isinstance(exc, Exception):
                raise  # KeyboardInterrupt, SystemExit: the push is failed, the caller stops
            return
        finally:
            self._free.append(flight.client)  # its call is over, answered or not
        if flight.fetch is not None:
            self._fill(flight.fetch, flight.part, outcome, flight.push)
        if flight.push is not None:
            if outcome.push is not None:
                self.max_staleness = max(self.max_staleness, outcome.push.max_staleness)
            if flight.settles:
                self.order.answered(flight.push.index, outcome)
                self._settle(flight.push, outcome)
        if flight.then is not None:
            self._send_rest(*flight.then)

    def _fill(self, fetch: Prefetch, part: str, outcome, push: PushJob | None) -> None:
        if fetch.done:
            return  # its other part failed: the caller pulls instead
        fetch.sent = self._sent
        if self.own_writes is not None \
                and self.order.missed_next(fetch.after, self._sent, push, outcome):
            fetch.sent = fetch.after  # served before the push after it, which it then misses
        if outcome.dense is not None:  # the outcome's own dicts: nothing else holds them
            fetch.dense, fetch.versions = outcome.dense, outcome.versions
        if part == "all":
            fetch.rows = {t: (*fetch.unique[t], rows) for t, rows in outcome.rows.items()}
            fetch.states = outcome.states
            fetch.done = True
            return
        fresh.add_part(fetch.parts, fetch.late, part == "late", outcome.rows)
        fetch.waiting -= 1
        if fetch.waiting == 0:
            fetch.rows, fetch.parts, fetch.done = fresh.merged(fetch.unique, fetch.parts), {}, True

    def _failed(self, push: PushJob | None, fetch: Prefetch | None,
                exc: BaseException) -> None:
        if push is not None:
            self._settle(push, exc)
        elif not isinstance(exc, StaleGradient):  # not an error: the caller pulls instead
            log.info("prefetch failed (%s); pulling synchronously", exc)
        if fetch is not None:
            fetch.done = True
            fetch.parts = {}

    def _wait(self, job: Prefetch) -> None:
        started = time.perf_counter()
        if job is self._awaiting:  # its late part goes now, with no push
            self._send(None, None)
        while not job.done and self._flights:
            self._collect()
        self.wait_pull_s += time.perf_counter() - started

    def _forget_used(self) -> None:
        while self._prefetched and self._prefetched[0].dense_used \
                and not self._prefetched[0].ids:
            self._prefetched.popleft()

    def _settle(self, job: PushJob, outcome) -> None:
        """A push was answered (a StepOutcome), refused or failed (the exception), or dropped
        unsent; pushes settle in the order given (flights are collected oldest first). A
        push sent as two Steps settles once: by a failure of its first, else by its last."""
        if job.settled:
            return
        job.settled = True
        if isinstance(outcome, StaleGradient):
            self._stale += 1  # dropped by the PS; the next step pulls anyway
            log.info("stale gradient refused in the background (%s)", outcome)
            # no PS applied any of the step: no rows, no acknowledgement
            self._ledger.abandon(f"the step's gradient was refused as stale: {outcome.message}",
                                 released=True)
        elif isinstance(outcome, BaseException):
            if self._failure is None:
                self._failure = outcome
                if isinstance(outcome, Exception):
                    log.warning("a background push failed: %s", outcome)
                    # no PS answered (or it was stopping, or deposed): no fault of the data,
                    # RELEASED; a refusal of what was sent (a NaN gradient, another model,
                    # too large) is the step's failure: FAILED, which spends the budget
                    self._ledger.abandon(f"push failed: {outcome}",
                                         released=unreachable(outcome))
                # else interrupted (KeyboardInterrupt, SystemExit): not a failure of the step,
                # so no lease is reported FAILED (that would spend the shard's failure budget);
                # its records are simply never acknowledged, and the leave hands them back
                # with exact offsets
        elif outcome is _DROPPED or self._failure is not None:
            pass  # after a failure: applied or not, its records are never acknowledged
        else:
            self._ledger.trained(job.mark)

