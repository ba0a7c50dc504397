"""Group commit: run core calls under one lock, answer each only once its changes are durable.

Every call mutates the core under `lock`, which writes into the journal's collecting batch. A
single committer thread swaps that batch out and commits it while new calls fill the next one,
so under load one transaction carries the changes of many calls (group commit), and a call
never waits for more than the batch in flight plus its own. Each waiting call sleeps on a lock
of its own, filed under the batch it needs, so a commit wakes exactly the calls it answers
(a shared Condition woke every waiter at every commit: measured ~9 extra thread wake-ups and
~165 us of CPU a call at 32 clients).

A call is answered only after the batch holding its changes is durable, and also after any
batch whose effects it could have seen (a WAIT or END decided on state not yet committed is
not answered before that state is). If a commit fails, the in-memory state is ahead of the
database, so the master stops (fail-stop) and a restart resumes from what was committed.

A call that raises changes nothing. A refusal (ServiceError) is raised before the core changes
anything, and its journal changes, if any, are dropped. Any other exception is a bug that may
have left memory half-changed: its journal changes are dropped, calls are held, everything
kept before it is committed, and the core is rebuilt from the database (a `master_recovered`
event), as a restart would, before the next call runs.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable, TypeVar

from ..core import MasterCore
from rpckit.errors import Reason, ServiceError
from .store import Store

log = logging.getLogger(__name__)
T = TypeVar("T")


class Committer:
    def __init__(self, core: MasterCore, store: Store, on_fatal: Callable[[BaseException], None]):
        self.core = core
        self.store = store
        self.on_fatal = on_fatal
        self.lock = threading.Lock()
        self._has_work = threading.Condition(self.lock)
        self._waiters: dict[int, list] = {}  # batch seq -> locks of the calls waiting for it
        self._collecting = 1  # sequence number of the batch being collected
        self._durable = 0  # last committed batch
        self._stopping = False
        self._recovering = False
        self._settled = threading.Condition(self.lock)  # a commit ended or recovery finished
        self.fatal: BaseException | None = None
        self.commits = 0
        self.recoveries = 0
        self._thread = threading.Thread(target=self._run, name="committer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def call(self, fn: Callable[[], T]) -> T:
        """Run `fn` on the core; return its result once everything it saw is durable."""
        with self.lock:
            self._wait_recovered()
            journal = self.core.journal
            journal.begin_call()
            try:
                result = fn()
            except ServiceError:
                journal.discard_call()
                raise
            except BaseException:
                journal.discard_call()
                self._recover()
                raise
            journal.end_call()
            if journal.pending():
                need = self._collecting
                self._has_work.notify()
            else:
                need = self._collecting - 1
            if self._durable >= need:
                return result
            waiter = threading.Lock()
            waiter.acquire()
            self._waiters.setdefault(need, []).append(waiter)
        waiter.acquire()  # released by the committer once batch `need` is durable
        if self.fatal is not None:
            raise ServiceError(
                "UNAVAILABLE", Reason.DATABASE_FAILED, f"the master could not commit to its database: {self.fatal}"
            )
        return result

    def read(self, fn: Callable[[], T]) -> T:
        """Run a read-only `fn` under the lock, without waiting for commits (what it returns
        may include changes not yet durable: answer clients through `call`)."""
        with self.lock:
            self._wait_recovered()
            return fn()

    def _wait_recovered(self) -> None:
        while self._recovering:
            self._settled.wait()
        if self.fatal is not None:
            raise ServiceError("UNAVAILABLE", Reason.DATABASE_FAILED,
                               "the master is stopping after a database error")

    def _recover(self) -> None:
        """Rebuild the core from the database after a call broke mid-way (lock held)."""
        log.exception("a call raised; reloading the master's state from the database")
        self._recovering = True
        try:
            self._has_work.notify()
            # let the committer make everything kept before this call durable
            while self.fatal is None and (self.core.journal.pending()
                                          or self._durable < self._collecting - 1):
                self._settled.wait()
            if self.fatal is None:
                self.core.reset(self.store.load(), cause="recovered")
                self.recoveries += 1
                self._has_work.notify()  # the master_recovered event
        except Exception as exc:  # noqa: BLE001 - memory and database may differ: stop
            log.critical("recovery failed; stopping the master: %s", exc)
            self.fatal = exc
            self.on_fatal(exc)
        finally:
            self._recovering = False
            self._settled.notify_all()

    def flush(self) -> None:
        """Wait until everything collected so far is durable."""
        self.call(lambda: None)

    def stop(self) -> None:
        with self.lock:
            self._stopping = True
            self._has_work.notify()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while True:
            with self.lock:
                while not self.core.journal.pending() and not self._stopping:
                    self._has_work.wait()
                if not self.core.journal.pending():
                    return  # stopping and nothing left to commit
                batch = self.core.journal.swap()
                seq = self._collecting
                self._collecting += 1
            try:
                self.store.apply(batch)
            except BaseException as exc:  # noqa: BLE001 - any failure is fatal by design
                log.critical("commit failed; stopping the master: %s", exc)
                with self.lock:
                    self.fatal = exc
                    for waiters in self._waiters.values():
                        for waiter in waiters:
                            waiter.release()
                    self._waiters.clear()
                    self._settled.notify_all()
                self.on_fatal(exc)
                return
            with self.lock:
                self._durable = seq
                self.commits += 1
                waiters = self._waiters.pop(seq, ())
                if self._recovering:
                    self._settled.notify_all()
            for waiter in waiters:
                waiter.release()
