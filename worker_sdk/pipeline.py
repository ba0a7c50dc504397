"""The pipelined step: one background thread that talks to the PS set while the loop computes.

It runs jobs in the order they were given, on its own `DataClient` (a client is not
thread-safe): *prefetches* (the next step's dense parameters and embedding rows) and *pushes*
(`PSClient.push(wait=False)`). The order matters: a prefetch given before a push reads the
parameters without that push, one given after reads them with it. A push and the prefetch
given right after it go out together, as one `Step` per PS (worker_sdk/ps_steps.py): the
thread holds a push up to COALESCE_S for that prefetch while the loop's prefetches follow its
pushes, and sends it alone otherwise (and at once on `flush`).

Promises:
* At most `max_inflight` pushes are unanswered; `submit` waits for room.
* A push acknowledges its records (`ack.trained(mark)`) only once every PS answered it.
* A push that fails (a PS unreachable after every retry, a refusal) is kept and raised at the
  caller's next call; the records in flight are abandoned at once (`ack.abandon`: their leases
  are reported FAILED with the trained prefix), and the pushes queued after it are dropped
  unsent, so no later mark can acknowledge them.
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
_STOP, _KICK, _NOTHING = object(), object(), object()  # queue markers


class PushFailed(RuntimeError):
    """A background push failed; its records (and those after it) were never acknowledged."""


@dataclass
class PushJob:
    mark: int  # ack.mark() when its gradients were captured
    versions: dict[str, int]  # parameter versions the gradients were computed from
    grads: dict[str, torch.Tensor]
    rows: list[tuple[str, torch.Tensor, torch.Tensor]]  # (table, ids, row grads)


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
        self._client: DataClient | None = None
        self._owner: dict[str, int] = {}
        self._jobs: "queue.Queue[object]" = queue.Queue()
        self._room = threading.Semaphore(max_inflight)
        self._idle = threading.Condition()
        self._unanswered = 0
        self._failure: BaseException | None = None
        self._raised = False
        self._prefetched: deque[_Prefetch] = deque()  # in the order of their steps
        self._stale = 0
        self.max_staleness = 0
        self.wait_pull_s = 0.0
        self.wait_push_s = 0.0
        self._thread: threading.Thread | None = None
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
        if self._thread is not None:
            self._jobs.put(_KICK)  # a push held for a prefetch goes now
        with self._idle:
            self._idle.wait_for(lambda: self._unanswered == 0, timeout_s)
        self.wait_push_s += time.perf_counter() - started
        self.raise_failure()

    def take_stale(self) -> int:
        stale, self._stale = self._stale, 0
        return stale

    def timeline(self) -> dict[str, float]:
        return {"wait_pull_s": self.wait_pull_s, "wait_push_s": self.wait_push_s}

    def close(self) -> None:
        self._closed = True
        if self._thread is not None:
            self._jobs.put(_STOP)
            self._thread.join(timeout=10)

    def _put(self, job) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="elastic-ps-io",
                                            daemon=True)
            self._thread.start()
        self._jobs.put(job)

    # ---- the background thread ----------------------------------------------------------------

    def _run(self) -> None:
        pending = _NOTHING
        try:
            while True:
                job = self._jobs.get() if pending is _NOTHING else pending
                pending = _NOTHING
                if job is _STOP:
                    return
                if isinstance(job, PushJob):
                    # a loop that prefetches gives the next prefetch right after this push
                    # (ds.batches reads the batch after next and calls the hook): wait for it
                    # a moment, and send both as one Step per PS
                    following = self._following()
                    if isinstance(following, _Prefetch):
                        self._step(job, following)
                        continue
                    self._step(job, None)
                    pending = following
                elif isinstance(job, _Prefetch):
                    self._step(None, job)
        finally:
            if self._client is not None:
                self._client.close()

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

    def _data(self) -> DataClient:
        if self._client is None:
            self._client = self._make_client()
        if self._owner and self._client.owner != self._owner:
            self._client.owner = dict(self._owner)
        return self._client

    def _step(self, push: PushJob | None, fetch: _Prefetch | None) -> None:
        """Send a push and/or a prefetch (one Step per PS), and settle both."""
        if push is not None and self._failure is not None:
            self._settled(push)  # queued after a failed push: dropped unsent, never acked
            push = None
        try:
            data = self._data()
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
        except StaleGradient as exc:
            if push is not None:
                self._stale += 1  # dropped by the PS; the next step pulls anyway
                log.info("stale gradient refused in the background (%s)", exc)
                # no PS applied any of the step: no rows, no acknowledgement
                ack.abandon(f"the step's gradient was refused as stale: {exc.message}")
            self._settled(push, fetch)
            return
        except BaseException as exc:  # noqa: BLE001 - kept and raised at the caller's next call
            if push is not None:
                log.warning("a background push failed: %s", exc)
                self._failure = exc
                ack.abandon(f"push failed: {exc}")
            else:  # not an error: the caller pulls synchronously instead
                log.info("prefetch failed (%s); pulling synchronously", exc)
            self._settled(push, fetch)
            return
        if push is not None:
            if outcome.push is not None:
                self.max_staleness = max(self.max_staleness, outcome.push.max_staleness)
            ack.trained(push.mark)
        if fetch is not None:
            if outcome.dense is not None:
                fetch.dense, fetch.versions = dict(outcome.dense), dict(outcome.versions)
            fetch.rows = {t: (*found[t], rows) for t, rows in outcome.rows.items()}
        self._settled(push, fetch)

    def _settled(self, push: PushJob | None, fetch: _Prefetch | None = None) -> None:
        if push is not None:
            with self._idle:
                self._unanswered -= 1
                self._idle.notify_all()
            self._room.release()
        if fetch is not None:
            fetch.done.set()
