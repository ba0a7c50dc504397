"""The pipeline without a network: which Step messages it sends, when, and what each settles.

A recording client stands in for DataClient (the pipeline only calls `begin_step`, the
`result()` of what it returns, and reads `owner`); what is checked is the order and grouping
of the calls, when answers are collected, and what each push acknowledges."""
from __future__ import annotations

import threading

import pytest
import torch

import worker_sdk.ps.pipeline as pipeline
from worker_sdk.ps.pipeline import Pipeline, PushFailed, PushJob
from rpckit.errors import Reason, ServiceError
from worker_sdk.ps.data_client import PSUnavailable, StaleGradient, StepOutcome


class Pending:
    def __init__(self, rec: "Recorder", n: int, outcome):
        self.rec, self.n, self.outcome = rec, n, outcome

    def result(self):
        self.rec.collected.append(self.n)
        if self.n in self.rec.fail:
            raise self.rec.error(f"call {self.n} failed")
        return self.outcome


class Recorder:
    """Records each Step sent; answers are made when sent and handed out when collected."""

    def __init__(self, fail: frozenset = frozenset(), error=ConnectionError):
        self.error = error  # what a failing call raises (given its message)
        self.owner: dict[str, int] = {}
        self.calls: list[dict] = []
        self.collected: list[int] = []  # call numbers, in the order their answers were taken
        self.fail = fail

    def begin_step(self, grads=None, versions=None, rows=(), pull=None, pull_rows=None,
                   marks=None):
        self.calls.append(dict(grads=grads, rows=list(rows), pull=pull,
                               pull_rows=dict(pull_rows or {})))
        out = StepOutcome(dense={n: torch.zeros(1) for n in pull} if pull is not None else None,
                          versions={n: len(self.calls) for n in pull or ()})
        # each row holds its id: where a row lands among the batch's can be checked
        out.rows = {t: torch.as_tensor(ids).float()[:, None].repeat(1, 2)
                    for t, ids in (pull_rows or {}).items()}
        return Pending(self, len(self.calls) - 1, out)

    def close(self):
        pass


class Acks:
    """The ack ledger the pipeline is given: records what it acknowledges."""

    def __init__(self):
        self.events: list[tuple[str, object]] = []
        self.released: list[bool] = []

    def trained(self, mark=None):
        self.events.append(("trained", mark))

    def abandon(self, message="", released=False):
        self.events.append(("abandon", message))
        self.released.append(released)


@pytest.fixture
def acks() -> Acks:
    return Acks()


def _push(mark: int) -> PushJob:
    return PushJob(mark=mark, versions={"w": 0}, grads={"w": torch.ones(1)},
                   rows=[("t", torch.tensor([1, 2]), torch.ones(2, 2))])


def test_a_push_and_the_prefetch_after_it_leave_as_one_step(acks):
    rec = Recorder()
    pipe = Pipeline(lambda: rec, acks, max_inflight=1)
    pipe.set_layout({"w": 0})
    pipe.prefetch(None, {"t": torch.tensor([3, 1, 3])})    # step 1's data: reads only
    pipe.submit(_push(1))                                   # step 1's push ...
    assert len(rec.calls) == 1  # ... held for the prefetch that follows it
    pipe.prefetch(None, {"t": torch.tensor([5, 4])})       # ... and step 3's data
    pipe.flush(10)
    assert len(rec.calls) == 2, rec.calls
    first, second = rec.calls
    assert first["grads"] is None and first["pull"] == ["w"]
    assert first["pull_rows"]["t"].tolist() == [1, 3]       # unique, sorted
    assert second["grads"] is not None and second["rows"][0][0] == "t"
    assert second["pull"] == ["w"] and second["pull_rows"]["t"].tolist() == [4, 5]
    # the forward finds its rows with the inverse computed when the prefetch was sent
    unique, inverse, rows = pipe.take_rows("t", torch.tensor([3, 1, 3]))
    assert unique.tolist() == [1, 3] and inverse.tolist() == [1, 0, 1]
    assert rows.shape == (2, 2)
    assert pipe.take_rows("t", torch.tensor([5, 5])) is None  # not the ids prefetched
    assert acks.events == [("trained", 1)]


def test_a_batch_is_read_in_two_parts_the_rows_of_the_one_before_with_its_push(acks):
    rec = Recorder()
    pipe = Pipeline(lambda: rec, acks, max_inflight=1, read_own_writes=True)
    pipe.set_layout({"w": 0})
    pipe.prefetch(None, {"t": torch.tensor([3, 1, 3])})    # step 1's data, all of it
    pipe.prefetch(None, {"t": torch.tensor([5, 3, 4])})    # step 2's: what step 1 lacks
    assert rec.calls[1]["pull"] is None and rec.calls[1]["pull_rows"]["t"].tolist() == [4, 5]
    pipe.take_dense(["w"])
    pipe.take_rows("t", torch.tensor([3, 1, 3]))
    pipe.submit(PushJob(mark=1, versions={"w": 0}, grads={"w": torch.ones(1)},
                        rows=[("t", torch.tensor([1, 3]), torch.tensor([[1.0], [3.0]]))]))
    pipe.prefetch(None, {"t": torch.tensor([6, 3])})       # step 3's data
    # step 1's push of row 3 and the dense gradient, then step 2's dense and row 3 ...
    late = rec.calls[2]
    assert late["grads"] is not None and late["pull"] == ["w"]
    assert [(t, ids.tolist(), g.tolist()) for t, ids, g in late["rows"]] == [("t", [3], [[3.0]])]
    assert late["pull_rows"]["t"].tolist() == [3]
    assert len(rec.calls) == 3  # ... and the rest once that is answered
    assert pipe.take_dense(["w"]) is not None
    rest = rec.calls[3]
    assert rest["grads"] is None and rest["pull"] is None
    assert [(t, ids.tolist(), g.tolist()) for t, ids, g in rest["rows"]] == [("t", [1], [[1.0]])]
    assert rest["pull_rows"]["t"].tolist() == [6]  # row 3 waits for step 2's push
    assert acks.events == []  # the push settles with its last Step
    unique, inverse, rows = pipe.take_rows("t", torch.tensor([5, 3, 4]))
    assert unique.tolist() == [3, 4, 5] and inverse.tolist() == [2, 0, 1]
    assert rows[:, 0].tolist() == [3, 4, 5]  # the two parts, each row in its place
    pipe.flush(10)
    assert acks.events == [("trained", 1)]


@pytest.mark.parametrize("error, stale", [
    (ConnectionError, False),
    (lambda message: StaleGradient(message, {"w": 1}), True),
])
def test_a_split_push_whose_first_step_fails_sends_nothing_more(acks, error, stale):
    rec = Recorder(fail=frozenset({2}), error=error)
    pipe = Pipeline(lambda: rec, acks, max_inflight=1, read_own_writes=True)
    pipe.set_layout({"w": 0})
    pipe.prefetch(None, {"t": torch.tensor([1, 3])})
    pipe.prefetch(None, {"t": torch.tensor([3, 4])})
    pipe.take_dense(["w"])
    pipe.take_rows("t", torch.tensor([1, 3]))
    pipe.submit(PushJob(mark=1, versions={"w": 0}, grads={"w": torch.ones(1)},
                        rows=[("t", torch.tensor([1, 3]), torch.ones(2, 1))]))
    pipe.prefetch(None, {"t": torch.tensor([5])})
    assert pipe.take_dense(["w"]) is None  # its late part failed: the caller pulls
    assert len(rec.calls) == 3  # row 1's gradient never left: no part of the push beyond
    assert [e[0] for e in acks.events] == ["abandon"]  # its first Step, refused or failed
    assert pipe.take_rows("t", torch.tensor([5])) is None  # the next batch's: pulled too
    if stale:  # refused as stale: counted, no failure to raise, the records handed back
        assert pipe.take_stale() == 1 and acks.released == [True]
        pipe.raise_failure()
    else:
        with pytest.raises(PushFailed):
            pipe.raise_failure()


def test_steps_leave_at_once_and_are_collected_only_when_needed(acks):
    rec = Recorder()
    pipe = Pipeline(lambda: rec, acks, max_inflight=1)
    pipe.set_layout({"w": 0})
    pipe.prefetch(None, {"t": torch.tensor([1])})
    assert len(rec.calls) == 1 and rec.collected == []  # sent, not waited for
    assert pipe.take_dense(["w"]) is not None  # the loop's pull collects it
    assert rec.collected == [0]
    pipe.submit(_push(1))
    pipe.prefetch(None, {"t": torch.tensor([2])})
    assert rec.collected == [0] and acks.events == []  # in flight while the loop computes
    pipe.take_rows("t", torch.tensor([1]))  # the first prefetch's rows: nothing to wait for
    assert rec.collected == [0]
    assert pipe.take_dense(["w"]) is not None
    assert rec.collected == [0, 1] and acks.events == [("trained", 1)]


def test_without_prefetches_a_push_goes_at_once_and_flush_sends_a_held_one(acks):
    rec = Recorder()
    pipe = Pipeline(lambda: rec, acks, max_inflight=2)
    pipe.set_layout({"w": 0})
    pipe.submit(_push(1))
    pipe.submit(_push(2))
    assert [c["pull"] for c in rec.calls] == [None, None]  # each sent alone, at once
    assert rec.collected == []  # two in flight: room for both
    pipe.submit(_push(3))
    assert rec.collected == [0]  # room for the third: the oldest is collected
    pipe.flush(10)
    assert rec.collected == [0, 1, 2]
    assert acks.events == [("trained", 1), ("trained", 2), ("trained", 3)]
    # once prefetches follow pushes, a push waits for the next one; flush sends it alone
    pipe.prefetch(None, {})
    pipe.submit(_push(4))
    assert len(rec.calls) == 4
    pipe.flush(10)
    assert len(rec.calls) == 5 and rec.calls[-1]["pull"] is None
    assert acks.events[-1] == ("trained", 4)


def test_a_pull_without_a_prefetch_sends_the_held_push_first(acks):
    rec = Recorder()
    pipe = Pipeline(lambda: rec, acks, max_inflight=1)
    pipe.prefetch(None, {})
    pipe.take_dense(["w"])
    pipe.submit(_push(1))  # held: prefetches followed pushes so far
    assert pipe.take_dense(["w"]) is None  # no prefetch to take: the caller pulls itself ...
    assert rec.calls[-1]["grads"] is not None  # ... after the push left


def test_pushes_settle_in_order_and_after_a_failure_acknowledge_nothing(acks):
    rec = Recorder(fail=frozenset({0}))
    pipe = Pipeline(lambda: rec, acks, max_inflight=2)
    pipe.submit(_push(1))
    pipe.submit(_push(2))  # both on their way before either is answered
    assert len(rec.calls) == 2 and rec.collected == []
    with pytest.raises(PushFailed):
        pipe.flush(10)
    # the second was answered (applied by the PS) but the one before it failed
    assert rec.collected == [0, 1]
    assert [kind for kind, _ in acks.events] == ["abandon"]
    pipe.submit(_push(3))  # given after the failure: dropped unsent
    pipe.flush(10)
    assert len(rec.calls) == 2 and [kind for kind, _ in acks.events] == ["abandon"]


@pytest.mark.parametrize("error, released", [
    (lambda m: PSUnavailable(m), True),                                       # no PS answered
    (lambda m: ServiceError("UNAVAILABLE", Reason.FENCED, m), True),          # deposed primary
    (lambda m: ServiceError("INVALID_ARGUMENT", Reason.INVALID_ARGUMENT, m), False),  # NaN
    (lambda m: ConnectionError(m), False),
])
def test_a_push_no_ps_took_releases_its_leases_one_refused_fails_them(acks, error, released):
    """Only a failure of the step itself spends its shards' failure budget: a push that no PS
    answered hands its leases back RELEASED; one refused for what it carried, FAILED."""
    rec = Recorder(fail=frozenset({0}), error=error)
    pipe = Pipeline(lambda: rec, acks, max_inflight=1)
    pipe.submit(_push(1))
    with pytest.raises(PushFailed):
        pipe.flush(10)
    assert [kind for kind, _ in acks.events] == ["abandon"] and acks.released == [released]


def test_a_push_whose_client_cannot_be_made_fails_instead_of_hanging(acks):
    def broken():
        raise ConnectionError("no PS list from the master")

    pipe = Pipeline(broken, acks, max_inflight=2)
    pipe.prefetch(None, {"t": torch.tensor([1])})
    pipe.submit(_push(1))
    with pytest.raises(PushFailed):
        pipe.flush(10)
    assert pipe.take_rows("t", torch.tensor([1])) is None  # failed prefetch: pull instead
    assert [kind for kind, _ in acks.events] == ["abandon"]


def test_another_thread_flushes_what_the_loop_left_in_flight(acks):
    """SIGTERM's hand-back flushes from its own thread (worker_sdk/data/preempt.py)."""
    rec = Recorder()
    pipe = Pipeline(lambda: rec, acks, max_inflight=2)
    pipe.prefetch(None, {})
    pipe.submit(_push(1))
    pipe.prefetch(None, {})
    pipe.submit(_push(2))  # held
    errors: list[BaseException] = []

    def flush():
        try:
            pipe.flush(10)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    thread = threading.Thread(target=flush)
    thread.start()
    thread.join(10)
    assert not thread.is_alive() and errors == []
    assert acks.events == [("trained", 1), ("trained", 2)]
    assert rec.collected == [0, 1, 2]


def test_prefetches_never_pulled_keep_a_bounded_number_of_steps_in_flight(acks):
    made: list[Recorder] = []

    def make():
        made.append(Recorder())
        return made[-1]

    pipe = Pipeline(make, acks, max_inflight=2)
    for i in range(50):
        pipe.prefetch(None, {"t": torch.tensor([i])})
    # each Step in flight holds a client; the oldest are collected to make room
    assert len(made) <= 2 + pipeline.MAX_PREFETCHED + 1
    assert len(pipe._flights) <= 2 + pipeline.MAX_PREFETCHED


def test_an_interrupt_while_collecting_reaches_the_caller_and_fails_no_lease(acks):
    class Interrupted(Recorder):
        def begin_step(self, *args, **kwargs):
            pending = super().begin_step(*args, **kwargs)

            def result():
                raise KeyboardInterrupt

            pending.result = result
            return pending

    rec = Interrupted()
    pipe = Pipeline(lambda: rec, acks, max_inflight=1)
    pipe.submit(_push(1))
    with pytest.raises(KeyboardInterrupt):
        pipe.flush(10)
    # applied or not, the push's records are never acknowledged, and no lease is reported
    # FAILED (an interrupt is not a failure of the step: the leave hands them back with
    # exact offsets); the next call says why
    assert acks.events == []
    with pytest.raises(PushFailed):
        pipe.raise_failure()


def test_a_loop_that_stops_prefetching_stops_having_its_pushes_held(acks):
    rec = Recorder()
    pipe = Pipeline(lambda: rec, acks, max_inflight=2)
    pipe.prefetch(None, {})
    pipe.take_dense(["w"])
    pipe.submit(_push(1))  # held for the prefetch that usually follows
    assert len(rec.calls) == 1
    pipe.submit(_push(2))  # none came: the held push goes, and pushes are no longer held
    assert len(rec.calls) == 3 and all(c["grads"] is not None for c in rec.calls[1:])
    pipe.submit(_push(3))
    assert len(rec.calls) == 4  # sent at once
    pipe.flush(10)
    assert acks.events == [("trained", 1), ("trained", 2), ("trained", 3)]
