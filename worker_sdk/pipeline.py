"""The pipelined step: background threads that talk to the PS set while the loop computes.

They take jobs in the order they were given: *prefetches* (the next step's dense parameters
and embedding rows) and *pushes* (`PSClient.push(wait=False)`). The order matters: a prefetch
given after a push is sent with it or after it, so it reads the parameters with that push; one
given before it is taken before it (with several lanes, both may be on their way at once). A push
and the prefetch given right after it go out together, as one `Step` per PS
(worker_sdk/ps_steps.py): the thread that takes a push holds it up to COALESCE_S for that
prefetch while the loop's prefetches follow its pushes, and sends it alone otherwise (and at
once on `flush`).

There are `max_inflight` such threads (*lanes*), each with its own `DataClient` (a client is
not thread-safe, and each has its own client_id, so each one's requests stay in order and
at most once on every PS): with 2, the next step's Step is on its way while the last one's is
still being answered, so the worker's two threads and the PS share the cores instead of
waiting on each other. A PS may then apply two of this worker's steps in either order, as it
does the steps of two workers.

Promises:
* At most `max_inflight` pushes are unanswered; `submit` waits for room.
* A push acknowledges its records (`ack.trained(mark)`) only once every PS answered it, and
  pushes are settled in the order they were given: one answered early waits for the ones
  before it, so a mark never covers the records of a push that is not answered.
* A push that fails (a PS unreachable after every retry, a refusal) is kept and raised at the
  caller's next call; the records in flight are abandoned at once (`ack.abandon`: their leases
  are reported FAILED with the trained prefix), the pushes queued after it are dropped unsent,
  and those already sent acknowledge nothing, so no later mark can acknowledge them.
* A failed prefetch is not an error: the caller pulls synchronously instead.
"""
from __future__ import annotations

import logging
import queue
from collections import deque
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from worker_sdk.ps_data import DataClient, StaleGradient

from . import ack

log = logging.getLogger(__name__)


MAX_PREFETCHED = 4  # prefetches kept for coming steps (a loop reads at most one or two ahead)
# How long the background thread holds a push for the prefetch that follows it, to send both
# as one message: about the time a loop takes to read its next batch.
COALESCE_S = 0.02
_STOP, _KICK, _NOTHING, _DROPPED = object(), object(), object(), object()  # markers


class PushFailed(RuntimeError):
    """A background push failed; its records (and those after it) were never acknowledged."""


@dataclass
class PushJob:
    mark: int  # ack.mark() when its gradients were captured
    versions: dict[str, int]  # parameter versions the gradients were computed from
    grads: dict[str, torch.Tensor]
    rows: list[tuple[str, torch.Tensor, torch.Tensor]]  # (table, ids, row grads)
    order: int = 0  # its place among the pushes given (set by `submit`)


@dataclass
class _Prefetch:
    names: list[str] | None  # dense tensors to fetch (None: every one of the layout)
    ids: dict[str, torch.Tensor]  # table -> ids of the next batch
    done: threading.Event = field(default_factory=threading.Event)
    dense: dict[str, torch.Tensor] | None = None
    versions: dict[str, int] | None = None
    dense_used: bool = False
    # table -> (unique ids, inverse, rows of the unique ids)
    rows: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = field(default_factory=dict)


class Pipeline:
    def __init__(self, make_client: Callable[[], DataClient], max_inflight: int = 1):
        self._make_client = make_client
        self._lanes = max_inflight  # one background thread per push that may be in flight
        self._owner: dict[str, int] = {}
        self._jobs: "queue.Queue[object]" = queue.Queue()
        self._take = threading.Lock()  # one lane at a time takes jobs (and pairs them)
        self._held = _NOTHING  # a job a lane took while pairing but did not send: next in line
        self._room = threading.Semaphore(max_inflight)
        self._idle = threading.Condition()  # guards the two counts below
        self._unanswered = 0
        self._given = 0  # pushes given so far (the next one's order)
        # One lane at a time settles, in order; acknowledging may report to the master, so
        # this is not `_idle`, which `submit` and `flush` take.
        self._settling = threading.Lock()  # guards what follows, down to _stale
        self._next_settle = 0  # order of the next push to settle
        self._answered: dict[int, tuple[PushJob, object]] = {}  # answered early: order -> outcome
        self._stale = 0
        self._failure: BaseException | None = None
        self._raised = False
        self._prefetched: deque[_Prefetch] = deque()  # in the order of their steps
        self.max_staleness = 0
        self.wait_pull_s = 0.0
        self.wait_push_s = 0.0
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._expect_prefetch = False  # prefetches follow pushes: hold a push for one

    def set_layout(self, owner: dict[str, int]) -> None:
        self._owner = dict(owner)

    # ---- the caller's side ------------------------------------------------------------------

    def raise_failure(self) -> None:
        if self._failure is not None and not self._raised:
            self._raised = True
            raise PushFailed(f"a background push failed: {self._failure}; the records of the "
                             "steps in flight were not acknowledged") from self._failure

    def submit(self, job: PushJob) -> None:
        started = time.perf_counter()
        self._room.acquire()
        self.wait_push_s += time.perf_counter() - started
        with self._idle:
            self._unanswered += 1
            job.order = self._given
            self._given += 1
        self._put(job)

    def prefetch(self, names: list[str] | None, ids: dict[str, torch.Tensor]) -> None:
        """Fetch in the background for a coming step. Prefetches are used in the order they
        were given, one per step: the next pull takes the oldest one's dense tensors, the
        next forward of each table its rows."""
        job = _Prefetch(names, {t: torch.as_tensor(v, dtype=torch.int64) for t, v in ids.items()})
        self._expect_prefetch = True
        self._prefetched.append(job)
        while len(self._prefetched) > MAX_PREFETCHED:
            self._prefetched.popleft()  # never used: the loop does not pull every step
        self._put(job)

    def _forget_used(self) -> None:
        while self._prefetched and self._prefetched[0].dense_used \
                and not self._prefetched[0].ids:
            self._prefetched.popleft()

    def take_dense(self, names: list[str]):
        """(tensors, versions) of the oldest prefetch whose dense tensors are unused, waiting
        for it; None when there is none (or it failed)."""
        job = next((j for j in self._prefetched if not j.dense_used), None)
        if job is None:
            return None
        self._wait(job)
        job.dense_used = True
        self._forget_used()
        if job.dense is None or not set(names) <= set(job.dense):
            return None
        return {n: job.dense[n] for n in names}, {n: job.versions[n] for n in names}

    def take_rows(self, table: str, ids: torch.Tensor):
        """(unique ids, inverse, rows) of `table` from the oldest prefetch that has rows for
        it, when it was given these ids; else None."""
        job = next((j for j in self._prefetched if table in j.ids), None)
        if job is None:
            return None
        given = job.ids[table]
        self._wait(job)
        got = job.rows.pop(table, None)
        job.ids = {t: v for t, v in job.ids.items() if t != table}
        self._forget_used()
        if got is None or given.shape != ids.shape or not torch.equal(given, ids):
            return None  # checked by value: the caller may have changed its tensor since
        return got

    def _wait(self, job: _Prefetch) -> None:
        started = time.perf_counter()
        job.done.wait()
        self.wait_pull_s += time.perf_counter() - started

    def flush(self, timeout_s: float | None = None) -> None:
        """Wait until every push given so far is answered; raise a failure."""
        started = time.perf_counter()
        if self._threads:
            self._jobs.put(_KICK)  # a push held for a prefetch goes now
        with self._idle:
            self._idle.wait_for(lambda: self._unanswered == 0, timeout_s)
        self.wait_push_s += time.perf_counter() - started
        self.raise_failure()

    def take_stale(self) -> int:
        with self._settling:
            stale, self._stale = self._stale, 0
        return stale

    def timeline(self) -> dict[str, float]:
        return {"wait_pull_s": self.wait_pull_s, "wait_push_s": self.wait_push_s}

    def close(self) -> None:
        self._closed = True
        if self._threads:
            self._jobs.put(_STOP)
            for thread in self._threads:
                thread.join(timeout=10)

    def _put(self, job) -> None:
        if not self._threads:
            self._threads = [threading.Thread(target=self._run, name=f"elastic-ps-io-{i}",
                                              daemon=True) for i in range(self._lanes)]
            for thread in self._threads:
                thread.start()
        self._jobs.put(job)

    # ---- the background threads ---------------------------------------------------------------

    def _run(self) -> None:
        lane: list[DataClient] = []  # this thread's client, made on first use
        try:
            while True:
                with self._take:
                    push, fetch = self._next_pair()
                    if push is _STOP:
                        self._held = _STOP  # for the other lanes
                        return
                if push is not None or fetch is not None:
                    self._step(lane, push, fetch)
        finally:
            for client in lane:
                client.close()

    def _data(self, lane: list[DataClient]) -> DataClient:
        if not lane:
            lane.append(self._make_client())
        if self._owner and lane[0].owner != self._owner:
            lane[0].owner = dict(self._owner)
        return lane[0]

    def _next_pair(self):
        """Under `_take`: the next (push, prefetch) to send as one Step (either may be None),
        or (_STOP, None)."""
        job = self._jobs.get() if self._held is _NOTHING else self._held
        self._held = _NOTHING
        if job is _STOP:
            return _STOP, None
        if isinstance(job, PushJob):
            # a loop that prefetches gives the next prefetch right after this push
            # (ds.batches calls the hook first thing in the next step): wait for it a
            # moment, and send both as one Step per PS
            following = self._following()
            if isinstance(following, _Prefetch):
                return job, following
            self._held = following
            return job, None
        if isinstance(job, _Prefetch):
            return None, job
        return None, None  # _KICK: nothing held any more

    def _following(self):
        """The next job when it comes within COALESCE_S (only while prefetches follow pushes),
        else _NOTHING."""
        if not self._expect_prefetch:
            return self._next(0)
        job = self._next(COALESCE_S)
        if job is _NOTHING or job is _KICK or isinstance(job, PushJob):
            self._expect_prefetch = False  # until the next prefetch
        return job

    def _next(self, timeout: float):
        try:
            return self._jobs.get(timeout=timeout) if timeout else self._jobs.get_nowait()
        except queue.Empty:
            return _NOTHING

    def _step(self, lane: list[DataClient], push: PushJob | None,
              fetch: _Prefetch | None) -> None:
        """Send a push and/or a prefetch (one Step per PS), and settle both."""
        if push is not None and self._failure is not None:
            self._settle(push, _DROPPED)  # after a failed push: dropped unsent, never acked
            push = None
            if fetch is None:
                return
        found = {}
        try:
            data = self._data(lane)
            names = unique = None
            if fetch is not None:
                if self._owner or fetch.names is not None:
                    names = fetch.names or list(self._owner)
                # the forward of these ids needs the inverse too: computed once, here
                found = {table: torch.unique(ids.reshape(-1), return_inverse=True)
                         for table, ids in fetch.ids.items()}
                unique = {table: u for table, (u, _) in found.items()}
            outcome = data.step(push.grads if push else None, push.versions if push else None,
                                push.rows if push else (), pull=names, pull_rows=unique)
        except BaseException as exc:  # noqa: BLE001 - a push's is kept and raised later
            if push is not None:
                self._settle(push, exc)
            elif not isinstance(exc, StaleGradient):  # not an error: the caller pulls instead
                log.info("prefetch failed (%s); pulling synchronously", exc)
            if fetch is not None:
                fetch.done.set()
            return
        if fetch is not None:
            if outcome.dense is not None:
                fetch.dense, fetch.versions = dict(outcome.dense), dict(outcome.versions)
            fetch.rows = {t: (*found[t], rows) for t, rows in outcome.rows.items()}
            fetch.done.set()
        if push is not None:
            self._settle(push, outcome)

    def _settle(self, push: PushJob, outcome) -> None:
        """A push was answered (a StepOutcome), refused or failed (the exception), or dropped
        unsent: settle it, and every push after it that was answered already, in order."""
        with self._settling:
            self._answered[push.order] = (push, outcome)
            while self._next_settle in self._answered:
                job, got = self._answered.pop(self._next_settle)
                self._next_settle += 1
                self._settle_one(job, got)
                with self._idle:
                    self._unanswered -= 1
                    self._idle.notify_all()
                self._room.release()

    def _settle_one(self, job: PushJob, outcome) -> None:
        """Under `_settling`, in the order the pushes were given."""
        if isinstance(outcome, StaleGradient):
            self._stale += 1  # dropped by the PS; the next step pulls anyway
            log.info("stale gradient refused in the background (%s)", outcome)
            # no PS applied any of the step: no rows, no acknowledgement
            ack.abandon(f"the step's gradient was refused as stale: {outcome.message}")
        elif isinstance(outcome, BaseException):
            if self._failure is None:
                log.warning("a background push failed: %s", outcome)
                self._failure = outcome
                ack.abandon(f"push failed: {outcome}")
        elif outcome is _DROPPED or self._failure is not None:
            pass  # after a failure: applied or not, its records are never acknowledged
        else:
            if outcome.push is not None:
                self.max_staleness = max(self.max_staleness, outcome.push.max_staleness)
            ack.trained(job.mark)
