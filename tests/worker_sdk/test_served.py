"""worker_sdk/ps/served.py: when the versions a PS answered show that a read came before the
worker's next push (a pure state machine: the answers are built here, no network)."""
from __future__ import annotations

from dataclasses import dataclass

from worker_sdk.ps.outcomes import PushOutcome, StepOutcome
from worker_sdk.ps.served import PushOrder


@dataclass
class Job:
    index: int


NAMES = ("a", "b")  # "a" on PS 0, "b" on PS 1
ROUTED = {"a": 0, "b": 1}


def _pushed(order: PushOrder, index: int, after: dict, routed=ROUTED, names=NAMES,
            collected=None) -> None:
    """Push `index` given, sent (push `collected` answered then; default index - 2) and, when
    `after` is not None, answered with those versions."""
    order.given(index, names)
    order.collected = index - 2 if collected is None else collected
    order.sent(index, dict(routed))
    if after is not None:
        order.answered(index, StepOutcome(push=PushOutcome(versions=dict(after))))


def _read(carried: dict, read: dict, served=(0, 1), pulled_from=ROUTED,
          duplicate=False) -> StepOutcome:
    """The answer of a Step that carried a push (versions after it: `carried`) and read."""
    return StepOutcome(push=PushOutcome(versions=dict(carried), duplicate=duplicate),
                       versions=dict(read), pulled_from=dict(pulled_from), served=set(served))


def _order(next_routed=ROUTED, next_collected=None) -> PushOrder:
    """Pushes 1 and 2 answered (versions 1 and 2 on both tensors), push 3 given with the read
    of batch 4 and answered below, push 4 sent: the read's answer is decided for push 4."""
    order = PushOrder()
    _pushed(order, 1, {"a": 1, "b": 1})
    _pushed(order, 2, {"a": 2, "b": 2})
    _pushed(order, 3, None)
    _pushed(order, 4, None, routed=next_routed, collected=next_collected)
    return order


def test_served_before_the_next_push_when_no_push_came_between():
    order = _order()
    assert order.missed_next(3, 4, Job(3), _read({"a": 3, "b": 3}, {"a": 3, "b": 3}))
    assert order.shown == 1


def test_a_read_that_shows_a_push_after_its_own_is_not_decided():
    # push 4 (or another worker's) was applied on PS 1 before the read of b
    order = _order()
    assert not order.missed_next(3, 4, Job(3), _read({"a": 3, "b": 3}, {"a": 3, "b": 4}))
    assert order.shown == 0


def test_a_push_between_the_last_two_is_not_decided():
    # push 4 applied before push 3 (two Steps in flight, either order): the read holds it
    order = _order()
    assert not order.missed_next(3, 4, Job(3), _read({"a": 4, "b": 3}, {"a": 4, "b": 3}))


def test_every_ps_that_served_the_read_must_show_it():
    # rows came from PS 2 too, which holds no dense tensor: its order is unknown
    order = _order()
    assert not order.missed_next(3, 4, Job(3), _read({"a": 3, "b": 3}, {"a": 3, "b": 3},
                                                     served=(0, 1, 2)))
    # a PS that served nothing needs no tensor of its own
    assert order.missed_next(3, 4, Job(3), _read({"a": 3}, {"a": 3}, served=(0,),
                                                 pulled_from={"a": 0}))


def test_the_next_push_routed_elsewhere_for_a_tensor_is_not_decided():
    # the next push took "b" to PS 0 (a layout it knew), the read found it on PS 1
    order = _order(next_routed={"a": 0, "b": 0})
    assert not order.missed_next(3, 4, Job(3), _read({"a": 3, "b": 3}, {"a": 3, "b": 3}))


def test_the_next_push_sent_before_the_one_two_back_was_answered_is_not_decided():
    order = _order(next_collected=1)  # push 2 unanswered when push 4 left
    assert not order.missed_next(3, 4, Job(3), _read({"a": 3, "b": 3}, {"a": 3, "b": 3}))


def test_a_retried_push_or_step_is_not_decided():
    order = _order()
    assert not order.missed_next(3, 4, Job(3), _read({"a": 3, "b": 3}, {"a": 3, "b": 3},
                                                     duplicate=True))
    order = PushOrder()
    _pushed(order, 1, {"a": 1, "b": 1})
    order.given(2, NAMES)
    order.collected = 0
    order.sent(2, ROUTED)
    out = StepOutcome(push=PushOutcome(versions={"a": 2, "b": 2}), duplicate=True)
    order.answered(2, out)  # its versions are not kept
    _pushed(order, 3, None)
    _pushed(order, 4, None)
    assert not order.missed_next(3, 4, Job(3), _read({"a": 3, "b": 3}, {"a": 3, "b": 3}))


def test_only_the_push_right_after_the_reads_own_once_it_left():
    order = _order()
    answer = _read({"a": 3, "b": 3}, {"a": 3, "b": 3})
    assert not order.missed_next(3, 3, Job(3), answer)  # push 4 not sent: the usual rule
    assert not order.missed_next(3, 5, Job(3), answer)  # pushes 4 and 5 sent
    assert not order.missed_next(3, 4, None, answer)  # the read came without a push
    assert not order.missed_next(3, 4, Job(2), answer)  # with another push than the 3rd
    assert order.shown == 0


def test_the_first_push_stands_on_a_read_before_any_push():
    order = PushOrder()
    before = StepOutcome(versions={"a": 0, "b": 0}, pulled_from=dict(ROUTED), served={0, 1})
    assert not order.missed_next(0, 0, None, before)  # remembered as push 0
    _pushed(order, 1, None, collected=0)
    _pushed(order, 2, None, collected=0)
    assert order.missed_next(1, 2, Job(1), _read({"a": 1, "b": 1}, {"a": 1, "b": 1}))
    assert not order.missed_next(1, 2, Job(1), _read({"a": 2, "b": 1}, {"a": 2, "b": 1}))


def test_only_the_last_pushes_are_kept():
    order = PushOrder()
    for index in range(1, 40):
        _pushed(order, index, {"a": index, "b": index})
    assert len(order._facts) <= 8
    _pushed(order, 40, None)
    _pushed(order, 41, None)
    assert order.missed_next(40, 41, Job(40), _read({"a": 40, "b": 40}, {"a": 40, "b": 40}))
