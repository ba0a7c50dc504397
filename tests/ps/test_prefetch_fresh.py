"""What parameters a pipelined step computes on: every push of its own (read after write,
worker_sdk/ps/fresh.py, or prefetch_ahead=0), or without them the last one missed. A real
master, a real PS data plane, ElasticDataset's batches and PSClient, as a training loop uses
them: each step records the rows and the dense value its forward saw."""
from __future__ import annotations

import math
import threading
import time
from dataclasses import replace

import grpc
import pytest
import torch
from torch import nn

from protos import master_pb2, master_pb2_grpc
from ps.store.params import ParamStore
from worker_sdk import ArrayReader, ElasticDataset, ElasticEmbedding, PSClient, ack
from worker_sdk.ps.data_client import DataClient
from worker_sdk.ps.steps import PendingStep

STEPS, LR = 8, 0.5
SHARED = 5  # in every batch: read with the push just before (the late part)
# batch k is [SHARED, OWN + k % 2]: OWN's rows are in every other batch, read early (with the
# push before the last, which is the one that updated them)
OWN = 100


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = ElasticEmbedding(dim=2, table="e", initializer="zeros")
        self.w = nn.Parameter(torch.zeros(1))

    def forward(self, ids):
        rows = self.emb(ids)
        return rows, rows.sum() + self.w.sum()


def _register(master, *planes) -> None:
    with grpc.insecure_channel(master.address) as ch:
        for index, ps in enumerate(planes):
            master_pb2_grpc.MasterStub(ch).RegisterPS(master_pb2.RegisterPSRequest(
                address=f"127.0.0.1:{1000 + index}", data_address=ps.endpoint, index=index,
                num_ps=len(planes)), timeout=10)



def _step(client, model, ids) -> tuple:
    """One step of the loop: pull, forward, backward, push in the background. Returns what
    the step computed on: the shared rows' first values and the dense tensors'."""
    client.pull(model)
    rows, loss = model(ids)
    seen = ((rows[0, 0].item(), rows[1, 0].item(), model.w.item())
            + ((model.a.item(),) if isinstance(model, TwoPSModel) else ()))
    loss.backward()
    client.push(model, wait=False)
    return seen

def _train(master, ahead: int = 1, optimizer: str = "sgd", before=None, max_inflight: int = 1,
           client_seen=None, **options) -> list[tuple[float, float, float]]:
    """(the shared row, the batch's own row, the dense value) each step computed on, with
    `max_inflight` pushes in flight; `options` go to PSClient; `before()` runs once the model
    is declared; `client_seen(client)` once the loop is over."""
    model = Model()
    client = PSClient(master.address, timeout_s=10, max_inflight=max_inflight, **options)
    records = torch.tensor([[SHARED, OWN + k % 2] for k in range(STEPS)]).reshape(-1)
    ds = ElasticDataset(ArrayReader(records), master=master.address, name="train",
                        shard_size=len(records), num_epochs=1, worker_name="fresh")
    seen = []
    try:
        client.init_parameters(model, optimizer=optimizer, lr=LR)
        if before is not None:
            before()
        for ids in ds.batches(2, prefetch=client.prefetch, prefetch_ahead=ahead):
            seen.append(_step(client, model, ids))
        client.flush()
        assert client.pipeline.take_stale() == 0
        if client_seen is not None:
            client_seen(client)
    finally:
        ds.close()
        client.close()
        ack.use_push_acks(False)  # process-wide: later tests' datasets ack on "next"
    return seen


def _expected(applied: list[int]) -> list[tuple[float, float, float]]:
    """What step k sees when `applied[k]` of the pushes before it were applied (the last
    ones missing): each push moves the shared row and the dense value by -LR, and the own
    row of its batch's parity."""
    return [(-n * LR, -sum(1 for j in range(n) if j % 2 == k % 2) * LR, -n * LR)
            for k, n in enumerate(applied)]


@pytest.mark.parametrize("ahead, read_own_writes, max_staleness", [
    (0, False, -1),  # the next batch's data rides with the last push, read after it
    (1, True, -1),  # read in two parts: what the batch before holds, after the last push
    (1, True, 10),  # a PS that may refuse stale pushes (none is): the same
])
def test_a_step_computes_on_its_own_pushes(launcher, inproc_ps, ahead, read_own_writes,
                                           max_staleness):
    master = launcher.master()
    ps = inproc_ps(ParamStore(index=0, num_ps=1, max_staleness=max_staleness))
    _register(master, ps)
    assert _train(master, ahead, read_own_writes=read_own_writes) == _expected(list(range(STEPS)))
    assert len(ps.store.tables["e"]) == 3  # SHARED, OWN, OWN + 1


def test_without_read_own_writes_a_step_may_miss_the_push_before_it(launcher, inproc_ps):
    master = launcher.master()
    ps = inproc_ps(ParamStore(index=0, num_ps=1))
    _register(master, ps)
    seen = _train(master, 1, read_own_writes=False)
    # its data was read while the step before computed: the PS applied that step's push
    # before or after the read, as it does the steps of two workers
    applied = [round(-w / LR) for _, _, w in seen]
    assert all(k - 1 <= n <= k for k, n in enumerate(applied))
    assert seen == _expected(applied)  # rows and dense tensors of the same pushes


def test_corrected_on_the_worker_a_step_computes_on_its_own_pushes(launcher, inproc_ps):
    """One push in flight: a batch's read (sent with a push) is answered before the next
    push leaves, so the worker adds that push itself, and every step sees every push before
    it, once. The first batch's read carries no push, so nothing waits for it: the first push
    is added to it only when it was answered before that push left."""
    master = launcher.master()
    ps = inproc_ps(ParamStore(index=0, num_ps=1))
    _register(master, ps)
    seen = _train(master, correct_own_writes=True)
    applied = [round(-w / LR) for _, _, w in seen]
    assert applied[1] in (0, 1)
    assert seen == _expected([0, applied[1], *range(2, STEPS)])


class ReadsAfterTheNextPush:
    """A PS whose Steps that only read rows (but the first, which the first step waits for)
    are each held until as many pushes as reads before them are applied (bounded): the order
    two lanes may take, made the rule. The second batch's read carries no push, so it is then
    served after the first push."""

    def __init__(self, store: ParamStore):
        self.inner = store.steps.step
        self.applied = 0  # Steps whose mutations are applied
        self.held = 0  # reads served after a later push
        self.reads = 0  # Steps that only read rows
        self.cond = threading.Condition()
        store.steps.step = self.step

    def step(self, client_id, seq, parts, export):
        if parts.mutates:
            answer = self.inner(client_id, seq, parts, export)
            with self.cond:
                self.applied += 1
                self.cond.notify_all()
            return answer
        if not parts.pull_rows:
            return self.inner(client_id, seq, parts, export)
        self.reads += 1
        if self.reads > 1:
            # the n-th read waits for the (n-1)-th push, not for the push after its arrival:
            # the push may reach the PS on its lane before the read does
            n = self.reads
            with self.cond:
                self.held += self.cond.wait_for(lambda: self.applied >= n - 1, timeout=2.0)
        return self.inner(client_id, seq, parts, export)


def test_corrected_on_the_worker_never_twice(launcher, inproc_ps):
    """The second batch's read is served after the first push (which left before the read
    was answered): the worker must not add that push again. Every step then sees every push
    before it exactly once."""
    # The hold goes by the order reads reach the PS; when the first batch's read is sent
    # twice (its pull and its prefetch racing), the second one counted is that read, which
    # the first step waits for, and nothing is forced: such a try is run again (bounded).
    for _ in range(3):
        master = launcher.master()
        ps = inproc_ps(ParamStore(index=0, num_ps=1), threads=2)
        late = ReadsAfterTheNextPush(ps.store)
        _register(master, ps)
        seen = _train(master, correct_own_writes=True)
        if late.held == 1:
            assert seen == _expected(list(range(STEPS)))
            return
    pytest.fail("in 3 tries the second batch's read was never served after the first push")


def test_corrected_adagrad_rows_use_the_ps_accumulator(launcher, inproc_ps):
    """Another worker pushed the shared row first (gradient G), so the PS's Adagrad sum of it
    is G**2 more than this worker's own squared gradients. Each step's read asks the PS for
    the state of the rows the last push changes too (PullRows.marked), so the correction
    takes that push with the PS's sum: every step sees the shared row exactly as the PS
    holds it after every push before the step. (Summing its own squares only, the worker
    would step the shared row by lr / sqrt(i) instead of lr / sqrt(G**2 + i).)"""
    master = launcher.master()
    ps = inproc_ps(ParamStore(index=0, num_ps=1))
    _register(master, ps)
    big = 3.0

    def other_worker():
        other = DataClient([ps.endpoint], timeout_s=10)
        try:
            other.push_rows("e", torch.tensor([SHARED]), torch.full((1, 2), big))
        finally:
            other.close()

    seen = _train(master, optimizer="adagrad", before=other_worker, correct_own_writes=True)

    def adagrad(start: float, count: int, first: float = 0.0) -> float:
        """A value after `count` gradients of 1, the sum starting at `first`."""
        return start - sum(LR / (math.sqrt(first + i) + 1e-10) for i in range(1, count + 1))

    dense = [adagrad(0.0, n) for n in range(STEPS + 1)]  # w: this worker's pushes only
    applied = [min(range(STEPS + 1), key=lambda n: abs(dense[n] - w)) for _, _, w in seen]
    assert applied[0] == 0 and applied[2:] == list(range(2, STEPS))
    for k, ((shared, own, w), n) in enumerate(zip(seen, applied)):
        assert w == pytest.approx(dense[n], rel=1e-5, abs=1e-6)
        assert shared == pytest.approx(adagrad(-LR, n, big ** 2), rel=1e-5, abs=1e-6)
        mine = sum(1 for j in range(n) if j % 2 == k % 2)  # the pushes of this row's parity
        assert own == pytest.approx(adagrad(0.0, mine), rel=1e-5, abs=1e-6)
    assert ps.store.stats.row_pulls >= STEPS


class HeldSteps:
    """A PS whose `nth` Step that pushes and reads rows waits (bounded) before it is served
    until a pushing Step that came after it was applied: two lanes in the other order. Needs
    a second handler thread for that Step."""

    def __init__(self, store: ParamStore, nth: int):
        self.inner = store.steps.step
        self.nth = nth
        self.pushes = 0  # Steps whose mutations are applied
        self.arrived = 0  # Steps that push and read rows, as they arrive
        self.mutating = 0  # Steps that push, as they arrive
        self.held = 0  # Steps that waited until a later push was applied
        self.cond = threading.Condition()
        store.steps.step = self.step

    def step(self, client_id, seq, parts, export):
        with self.cond:
            self.mutating += parts.mutates
            before = self.mutating  # the pushing Steps that came before it, and it
            self.arrived += parts.mutates and bool(parts.pull_rows)
            hold = parts.mutates and bool(parts.pull_rows) and self.arrived == self.nth
            if hold:
                came = self.cond.wait_for(lambda: self.pushes >= before, timeout=2.0)
                self.held += came  # after the wait: it lets go of the lock meanwhile
            answer = self.inner(client_id, seq, parts, export)
            self.pushes += parts.mutates
            self.cond.notify_all()
            return answer


class TwoPSModel(Model):
    """Model with a second dense tensor: `w` on PS 1 and `a` on PS 0 of two (by their names'
    slots), so each PS holds a tensor whose version shows where it served a read; the shared
    row and OWN + 1 are on PS 1, OWN on PS 0."""

    def __init__(self):
        super().__init__()
        self.a = nn.Parameter(torch.zeros(1))

    def forward(self, ids):
        rows, loss = super().forward(ids)
        return rows, loss + self.a.sum()


def _train_in_order(master, step_starts=None, model=None, optimizer: str = "sgd", **options
                    ) -> tuple[list[tuple[float, float, float]], int]:
    """As `_train` (SGD, two pushes in flight), the loop prefetching each next batch first thing
    in its step itself, as `ds.batches` does once it has read ahead: every run then sends the
    same Steps in the same order (the first push with the third batch's read);
    `step_starts(k)` runs first in step k. Returns what each step computed on, and the reads
    shown served before the next push."""
    model = model or Model()
    client = PSClient(master.address, timeout_s=10, max_inflight=2, correct_own_writes=True,
                      **options)
    batches = [torch.tensor([SHARED, OWN + k % 2]) for k in range(STEPS)]
    seen = []
    try:
        client.init_parameters(model, optimizer=optimizer, lr=LR)
        client.prefetch(batches[0])
        for k, ids in enumerate(batches):
            if step_starts is not None:
                step_starts(k)
            if k + 1 < STEPS:
                client.prefetch(batches[k + 1])
            seen.append(_step(client, model, ids))
        client.flush()
        return seen, client.pipeline.order.shown
    finally:
        client.close()
        ack.use_push_acks(False)


def test_corrected_with_two_in_flight_a_read_served_before_the_next_push(launcher, inproc_ps,
                                                                        monkeypatch):
    """Two pushes in flight, the answers taken only when the loop waits for them (as when
    they arrive late): each read that came with a push is then taken after the next push
    left, though the PS served it before. The versions in the answers show that no push came
    between the push before it and the read, so the worker adds the next push itself, and
    every step sees every push before it, once. (By the answer's timing alone each such step
    would miss the push before it: every one fails this without the versions.)"""
    monkeypatch.setattr(PendingStep, "arrived", lambda self: False)
    master = launcher.master()
    ps = inproc_ps(ParamStore(index=0, num_ps=1), threads=1)  # one Step at a time
    _register(master, ps)

    def in_order(k: int) -> None:
        """The push k - 1 applied (and so its Step's read served) before the next push
        leaves: a PS that picks two waiting Steps in either order could otherwise take the
        next one first, and then the read holds a push the versions show (not added)."""
        deadline = time.monotonic() + 5.0
        while ps.store.stats.pushes < k - 1 and time.monotonic() < deadline:
            time.sleep(0.001)

    seen, shown = _train_in_order(master, in_order)
    applied = [round(-w / LR) for _, _, w in seen]
    assert applied[1] in (0, 1)  # the second read carries no push: as with one in flight
    assert seen == _expected([0, applied[1], *range(2, STEPS)])
    assert shown == STEPS - 2  # every read that came with a push


def test_corrected_with_two_in_flight_never_twice(launcher, inproc_ps):
    """The third Step that pushes and reads (the 3rd push, the 5th batch's read) is served
    after the Step given after it (the two lanes in the other order): its read holds the 4th
    push already, and the versions show a push between its own and the one before, so the
    worker adds nothing. The reads after it may miss the 3rd push (served before it) and are
    then not corrected for it. No step ever sees a push twice or one given after it."""
    # The held Step keeps one handler thread; the Step after it needs the other, which the
    # data plane's round robin may not give it: then the hold times out, and the try is run
    # again (bounded).
    for _ in range(3):
        master = launcher.master()
        ps = inproc_ps(ParamStore(index=0, num_ps=1), threads=2)
        late = HeldSteps(ps.store, nth=3)
        _register(master, ps)
        seen, _ = _train_in_order(master)
        if late.held == 1:
            break
    else:
        pytest.fail("in 3 tries the 3rd push was never applied after the 4th")
    applied = [round(-w / LR) for _, _, w in seen]
    assert [shared for shared, _, _ in seen] == [-n * LR for n in applied]
    assert all(n <= k for k, n in enumerate(applied))
    assert applied[4] == 4  # the reordered read: every push before it, none twice


def test_corrected_with_two_in_flight_two_ps_adagrad(launcher, inproc_ps, monkeypatch):
    """As above, Adagrad over two PS, each holding a dense tensor and rows of every batch: the
    answers taken late, each read is corrected for the next push from the PS's state of the
    rows and the worker's of the dense tensors, and every step sees every push before it,
    once, on both PS."""
    monkeypatch.setattr(PendingStep, "arrived", lambda self: False)
    master = launcher.master()
    planes = [inproc_ps(ParamStore(index=i, num_ps=2), threads=1) for i in range(2)]
    _register(master, *planes)

    def in_order(k: int) -> None:  # as in the one-PS test, on both PS
        deadline = time.monotonic() + 5.0
        while min(p.store.stats.pushes for p in planes) < k - 1 \
                and time.monotonic() < deadline:
            time.sleep(0.001)

    seen, shown = _train_in_order(master, in_order, model=TwoPSModel(), optimizer="adagrad")

    def adagrad(count: int) -> float:
        """A value after `count` gradients of 1 (each push moves every value of it by 1)."""
        return -sum(LR / (math.sqrt(i) + 1e-10) for i in range(1, count + 1))

    applied = [min(range(STEPS + 1), key=lambda n: abs(adagrad(n) - w)) for _, _, w, _ in seen]
    assert applied[1] in (0, 1)  # the second read carries no push: as with one in flight
    assert applied == [0, applied[1], *range(2, STEPS)]
    for k, ((shared, own, w, a), n) in enumerate(zip(seen, applied)):
        if k == 1:  # answered after the first push left, the read carries none to be shown by:
            # each PS may have served it before or after that push (its row of the other
            # parity has none), and it is left uncorrected either way
            assert own == pytest.approx(adagrad(0), abs=1e-6)
            assert all(v == pytest.approx(adagrad(0), abs=1e-6)
                       or v == pytest.approx(adagrad(1), rel=1e-5) for v in (shared, w, a))
            continue
        mine = sum(1 for j in range(n) if j % 2 == k % 2)  # the pushes of this row's parity
        assert (shared, own, w, a) == pytest.approx((adagrad(n), adagrad(mine), adagrad(n),
                                                     adagrad(n)), rel=1e-5, abs=1e-6)
    assert shown == STEPS - 2
