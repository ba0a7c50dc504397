"""The pipeline's background thread without a network: which Step messages it sends.

A recording client stands in for DataClient (the pipeline only calls `step` and reads
`owner`); what is checked is the order and grouping of the calls, and what each settles."""
from __future__ import annotations

import contextlib
import threading
import time

import pytest
import torch

from worker_sdk.pipeline import Pipeline, PushFailed, PushJob
from worker_sdk.ps_data import StepOutcome


class Recorder:
    def __init__(self):
        self.owner: dict[str, int] = {}
        self.calls: list[dict] = []
        self.gate = threading.Event()
        self.gate.set()

    def step(self, grads=None, versions=None, rows=(), pull=None, pull_rows=None):
        assert self.gate.wait(10), "the test never opened the gate"
        self.calls.append(dict(grads=grads, rows=list(rows), pull=pull,
                               pull_rows=dict(pull_rows or {})))
        out = StepOutcome(dense={n: torch.zeros(1) for n in pull} if pull is not None else None,
                          versions={n: len(self.calls) for n in pull or ()})
        out.rows = {t: torch.zeros(len(ids), 2) for t, ids in (pull_rows or {}).items()}
        return out

    def close(self):
        pass


def _push(mark: int) -> PushJob:
    return PushJob(mark=mark, versions={"w": 0}, grads={"w": torch.ones(1)},
                   rows=[("t", torch.tensor([1, 2]), torch.ones(2, 2))])


def test_a_push_and_the_prefetch_after_it_leave_as_one_step():
    rec = Recorder()
    pipe = Pipeline(lambda: rec, max_inflight=1)
    pipe.set_layout({"w": 0})
    try:
        pipe.prefetch(None, {"t": torch.tensor([3, 1, 3])})    # step 1's data: reads only
        pipe.submit(_push(1))                                   # step 1's push ...
        pipe.prefetch(None, {"t": torch.tensor([5, 4])})       # ... and step 3's data
        pipe.flush(10)
        assert len(rec.calls) == 2, rec.calls
        first, second = rec.calls
        assert first["grads"] is None and first["pull"] == ["w"]
        assert first["pull_rows"]["t"].tolist() == [1, 3]       # unique, sorted
        assert second["grads"] is not None and second["rows"][0][0] == "t"
        assert second["pull"] == ["w"] and second["pull_rows"]["t"].tolist() == [4, 5]
        # the forward finds its rows with the inverse computed in the background
        unique, inverse, rows = pipe.take_rows("t", torch.tensor([3, 1, 3]))
        assert unique.tolist() == [1, 3] and inverse.tolist() == [1, 0, 1]
        assert rows.shape == (2, 2)
        assert pipe.take_rows("t", torch.tensor([5, 5])) is None  # not the ids prefetched
    finally:
        pipe.close()


def test_without_prefetches_a_push_goes_alone_and_flush_does_not_wait_for_one():
    rec = Recorder()
    pipe = Pipeline(lambda: rec, max_inflight=2)
    pipe.set_layout({"w": 0})
    try:
        pipe.submit(_push(1))
        pipe.submit(_push(2))
        pipe.flush(10)
        assert [c["pull"] for c in rec.calls] == [None, None]
        assert all(c["grads"] is not None for c in rec.calls)
        # prefetches seen once: a push waits for the one after it, but flush sends it now
        pipe.prefetch(None, {})
        rec.gate.clear()
        pipe.submit(_push(3))
        rec.gate.set()
        pipe.flush(10)
        # flush waits for the pushes; the prefetch given before it may still be on its way in
        # the other lane (the two are sent at once)
        assert sum(c["grads"] is not None for c in rec.calls) == 3, rec.calls
    finally:
        pipe.close()


class Acks:
    """Stands in for worker_sdk.ack in the pipeline: records what it acknowledges."""

    def __init__(self):
        self.events: list[tuple[str, object]] = []

    def trained(self, mark=None):
        self.events.append(("trained", mark))

    def abandon(self, message=""):
        self.events.append(("abandon", message))


class Gated(Recorder):
    """Each call waits for its own gate (by call number), so the test picks the answer order."""

    def __init__(self, fail: set[int] = frozenset()):
        super().__init__()
        self.gates = [threading.Event() for _ in range(8)]
        self.started = [threading.Event() for _ in range(8)]
        self.fail = fail
        self.lock = threading.Lock()

    def step(self, grads=None, versions=None, rows=(), pull=None, pull_rows=None):
        with self.lock:
            n = len(self.calls)
            self.calls.append(dict(grads=grads))
        self.started[n].set()
        assert self.gates[n].wait(10), f"call {n} was never let through"
        if n in self.fail:
            raise ConnectionError(f"call {n} failed")
        return StepOutcome()


@contextlib.contextmanager
def _two_pushes_in_flight(monkeypatch, fail=frozenset()):
    """Two lanes, two pushes given, both on their way and neither answered yet."""
    import worker_sdk.pipeline as pipeline

    acks = Acks()
    monkeypatch.setattr(pipeline, "ack", acks)
    rec = Gated(fail)
    pipe = Pipeline(lambda: rec, max_inflight=2)
    try:
        pipe.submit(_push(1))
        pipe.submit(_push(2))
        # both are on their way before either is answered: one per lane
        assert rec.started[0].wait(10) and rec.started[1].wait(10)
        yield pipe, rec, acks
    finally:
        for gate in rec.gates:
            gate.set()
        pipe.close()


def test_two_lanes_send_two_steps_at_once_and_settle_the_pushes_in_order(monkeypatch):
    with _two_pushes_in_flight(monkeypatch) as (pipe, rec, acks):
        rec.gates[1].set()  # the second push is answered first ...
        time.sleep(0.2)
        assert acks.events == []  # ... and acknowledges nothing before the first is answered
        rec.gates[0].set()
        pipe.flush(10)
        assert acks.events == [("trained", 1), ("trained", 2)]


def test_a_push_answered_after_a_failed_one_acknowledges_nothing(monkeypatch):
    with _two_pushes_in_flight(monkeypatch, fail={0}) as (pipe, rec, acks):
        rec.gates[1].set()  # applied by the PS, answered ...
        rec.gates[0].set()  # ... but the push before it failed
        with pytest.raises(PushFailed):
            pipe.flush(10)
        assert [kind for kind, _ in acks.events] == ["abandon"]
        pipe.submit(_push(3))  # given after the failure: dropped unsent
        pipe.flush(10)
        assert len(rec.calls) == 2 and [kind for kind, _ in acks.events] == ["abandon"]


def test_a_lane_whose_client_cannot_be_made_fails_the_push_instead_of_hanging(monkeypatch):
    import worker_sdk.pipeline as pipeline

    acks = Acks()
    monkeypatch.setattr(pipeline, "ack", acks)

    def broken():
        raise ConnectionError("no PS list from the master")

    pipe = Pipeline(broken, max_inflight=2)
    try:
        job = pipe.prefetch(None, {"t": torch.tensor([1])})
        pipe.submit(_push(1))
        with pytest.raises(PushFailed):
            pipe.flush(10)
        assert pipe.take_rows("t", torch.tensor([1])) is None  # failed prefetch: pull instead
        assert job is None and [kind for kind, _ in acks.events] == ["abandon"]
    finally:
        pipe.close()
