"""The pipelined step: one background thread that talks to the PS set while the loop computes.

It runs jobs in the order they were given, on its own `DataClient` (a client is not
thread-safe): *prefetches* (the next step's dense parameters and embedding rows) and *pushes*
(`PSClient.push(wait=False)`). The order matters: a prefetch given before a push reads the
parameters without that push, one given after reads them with it.

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
    rows: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)


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
        job = _Prefetch(names, ids)
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

    def take_rows(self, table: str, unique: torch.Tensor) -> torch.Tensor | None:
        """Rows of `table` from the oldest prefetch that has them, when they are those of
        exactly these (sorted unique) ids."""
        job = next((j for j in self._prefetched if table in j.ids), None)
        if job is None:
            return None
        self._wait(job)
        got = job.rows.pop(table, None)
        job.ids = {t: v for t, v in job.ids.items() if t != table}
        self._forget_used()
        if got is None or not torch.equal(got[0], unique):
            return None
        return got[1]

    def _wait(self, job: _Prefetch) -> None:
        started = time.perf_counter()
        job.done.wait()
        self.wait_pull_s += time.perf_counter() - started

    def flush(self, timeout_s: float | None = None) -> None:
        """Wait until every push given so far is answered; raise a failure."""
        started = time.perf_counter()
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
            self._jobs.put(None)
            self._thread.join(timeout=10)

    def _put(self, job) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="elastic-ps-io",
                                            daemon=True)
            self._thread.start()
        self._jobs.put(job)

    # ---- the background thread ----------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                job = self._jobs.get()
                if job is None:
                    return
                if isinstance(job, PushJob):
                    self._push(job)
                else:
                    self._fetch(job)
        finally:
            if self._client is not None:
                self._client.close()

    def _data(self) -> DataClient:
        if self._client is None:
            self._client = self._make_client()
        if self._owner and self._client.owner != self._owner:
            self._client.owner = dict(self._owner)
        return self._client

    def _push(self, job: PushJob) -> None:
        try:
            if self._failure is None:
                data = self._data()
                if job.grads:
                    try:
                        outcome = data.push(job.grads, job.versions)
                        self.max_staleness = max(self.max_staleness, outcome.max_staleness)
                    except StaleGradient as exc:
                        self._stale += 1  # dropped by the PS; the next step pulls anyway
                        log.info("stale gradient refused in the background (%s)", exc)
                        # no PS applied any of the step: no rows, no acknowledgement
                        ack.abandon(f"the step's gradient was refused as stale: {exc.message}")
                        return
                for table, ids, grad in job.rows:
                    data.push_rows(table, ids, grad)
                ack.trained(job.mark)
        except BaseException as exc:  # noqa: BLE001 - kept and raised at the caller's next call
            log.warning("a background push failed: %s", exc)
            self._failure = exc
            ack.abandon(f"push failed: {exc}")
        finally:
            with self._idle:
                self._unanswered -= 1
                self._idle.notify_all()
            self._room.release()

    def _fetch(self, job: _Prefetch) -> None:
        try:
            data = self._data()
            if self._owner or job.names is not None:
                job.dense = dict(data.pull(job.names or list(self._owner)))
                job.versions = {n: data.versions[n] for n in job.dense}
            for table, ids in job.ids.items():
                unique = torch.unique(torch.as_tensor(ids, dtype=torch.int64).reshape(-1))
                job.rows[table] = (unique, data.pull_rows(table, unique).clone())
        except Exception as exc:  # noqa: BLE001 - the caller pulls synchronously instead
            log.info("prefetch failed (%s); pulling synchronously", exc)
            job.dense, job.rows = None, {}
        finally:
            job.done.set()
