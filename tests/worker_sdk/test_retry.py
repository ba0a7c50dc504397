"""worker_sdk/ps/retry.py: what every data-plane answer means, answer by answer, and the call's
bounds, with a fake clock and no network."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rpckit.auth import CredentialsRefused
from rpckit.errors import Reason
from rpckit.retry import RetryPolicy
from worker_sdk.ps import retry
from worker_sdk.ps.retry import CallRetry, Round, Step, Verdict, verdict
from worker_sdk.ps.routes import PSError, PSUnavailable

STALE = (Reason.STALE_GRADIENT,)


@pytest.mark.parametrize("code, reason, allow, want", [
    ("OK", "", (), Verdict.TAKE),
    ("UNAVAILABLE", "SLOT_MOVING", (), Verdict.MOVING),
    ("DEADLINE_EXCEEDED", "SLOT_MOVING", (), Verdict.MOVING),
    ("UNAVAILABLE", "FENCED", (), Verdict.RETRY),
    ("UNAVAILABLE", "SHUTTING_DOWN", (), Verdict.RETRY),
    ("UNAVAILABLE", "", (), Verdict.RETRY),
    ("DEADLINE_EXCEEDED", "", (), Verdict.RETRY),
    ("FAILED_PRECONDITION", "WRONG_OWNER", (), Verdict.RESPLIT),
    ("FAILED_PRECONDITION", "NOT_INITIALIZED", (), Verdict.DECLARE),
    ("UNAUTHENTICATED", "UNAUTHENTICATED", (), Verdict.CREDENTIALS),
    ("PERMISSION_DENIED", "PERMISSION_DENIED", STALE, Verdict.CREDENTIALS),
    ("FAILED_PRECONDITION", "STALE_GRADIENT", STALE, Verdict.TAKE),
    ("FAILED_PRECONDITION", "STALE_GRADIENT", (), Verdict.REFUSE),
    ("INVALID_ARGUMENT", "INVALID_ARGUMENT", STALE, Verdict.REFUSE),
    ("RESOURCE_EXHAUSTED", "TOO_LARGE", (), Verdict.REFUSE),
    ("INTERNAL", "", STALE, Verdict.REFUSE),  # no reason is never an allowed one
])
def test_each_answer_means_one_thing(code, reason, allow, want):
    assert verdict(code, reason, allow) is want


def test_the_verdict_reads_the_reason_never_the_message():
    call, round_ = _call(), Round({0})
    seen = call.answer(round_, 0, "UNAVAILABLE", "SLOT_MOVING", (),
                       why="PS 0 answered UNAVAILABLE: WRONG_OWNER, not initialized")
    assert seen is Verdict.MOVING and round_.pending == {0} and round_.moving == {0}


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _call(clock=None, total_s=30.0, max_attempts=8, has_master=True, timeout_s=10.0):
    policy = RetryPolicy(initial_s=0.05, max_s=2.0, total_s=total_s, call_timeout_s=timeout_s)
    return CallRetry(policy, max_attempts, has_master, clock or Clock())


def test_every_part_answered_is_done():
    call, round_ = _call(), Round({0, 1})
    for i in (0, 1):
        assert call.answer(round_, i, "OK", "", ()) is Verdict.TAKE
    assert call.after(round_, 1).step is Step.DONE and round_.attempt == 1


def test_a_silent_ps_is_asked_again_after_the_backoff_its_connection_dropped():
    clock = Clock()
    call, round_ = _call(clock), Round({0, 1})
    call.answer(round_, 0, "OK", "", ())
    call.silent(round_, "no answer from PS 1")
    d = call.after(round_, 1)
    assert d.step is Step.RESEND and d.delay_s == 0.05 and d.reset == {1}
    assert d.lookup_s == pytest.approx(10.0) and round_.attempt == 2 and call.tries == 1


def test_slot_moving_waits_soon_and_spends_no_try():
    call, round_ = _call(max_attempts=2), Round({0})
    delays = []
    for _ in range(5):
        call.answer(round_, 0, "UNAVAILABLE", "SLOT_MOVING", ())
        d = call.after(round_, 1)
        assert d.step is Step.WAIT_MOVING and not d.reset
        delays.append(d.delay_s)
    assert delays == [0.015, 0.03, 0.06, 0.1, 0.1] and call.tries == 0
    call.answer(round_, 0, "OK", "", ())
    assert call.after(round_, 1).step is Step.DONE and round_.attempt == 6


def test_moving_beside_a_silent_ps_is_a_try_and_keeps_the_moving_connection():
    call, round_ = _call(), Round({0, 1})
    call.answer(round_, 0, "UNAVAILABLE", "SLOT_MOVING", ())
    call.silent(round_, "no answer from PS 1")
    d = call.after(round_, 1)
    assert d.step is Step.RESEND and d.reset == {1} and call.tries == 1


def test_fenced_is_a_try_like_silence():
    call, round_ = _call(), Round({0})
    assert call.answer(round_, 0, "UNAVAILABLE", "FENCED", (), why="fenced") is Verdict.RETRY
    d = call.after(round_, 1)
    assert d.step is Step.RESEND and d.reset == {0} and round_.unexpected


def test_tries_run_out_with_a_typed_error_naming_the_ps():
    call, round_ = _call(max_attempts=3), Round({2})
    steps = []
    for _ in range(3):
        call.silent(round_, "no answer from PS 2 at tcp://h:1")
        steps.append(call.after(round_, 1))
    assert [d.step for d in steps] == [Step.RESEND, Step.RESEND, Step.GIVE_UP]
    err = steps[-1].error
    assert isinstance(err, PSUnavailable) and err.reason == Reason.UNAVAILABLE.value
    assert "PS 2" in err.message and "3 tries" in err.message and "tcp://h:1" in err.message


def test_the_budget_runs_out_before_the_tries():
    clock = Clock()
    call, round_ = _call(clock, total_s=1.0), Round({0})
    call.silent(round_, "silent")
    clock.now += 1.0
    assert call.after(round_, 1).step is Step.GIVE_UP
    assert call.try_timeout() == retry.MIN_TRY_S


def test_a_try_waits_no_longer_than_the_budget_left():
    clock = Clock()
    call = _call(clock, total_s=3.0, timeout_s=10.0)
    assert call.try_timeout() == 3.0
    clock.now += 2.5
    assert call.try_timeout() == pytest.approx(0.5)


def test_a_request_waiting_long_enough_looks_for_a_new_primary_only_with_a_master():
    assert not _call().look_for_primary(retry.REROUTE_AFTER_S / 2)
    assert _call().look_for_primary(retry.REROUTE_AFTER_S)
    assert not _call(has_master=False).look_for_primary(60.0)


def test_wrong_owner_re_splits_by_the_newest_layout_once_every_part_answered():
    call, round_ = _call(), Round({0, 1, 2})
    call.answer(round_, 0, "FAILED_PRECONDITION", "WRONG_OWNER", (), layout_version=4)
    call.answer(round_, 1, "FAILED_PRECONDITION", "WRONG_OWNER", (), layout_version=5)
    call.silent(round_, "no answer from PS 2")
    assert call.after(round_, 3).step is Step.RESEND  # PS 2 first, with the same seq
    call.answer(round_, 2, "OK", "", ())
    d = call.after(round_, 3)
    assert (d.step, d.resplit, d.min_version, d.again, d.delay_s) == \
        (Step.NEW_ROUND, (0, 1), 5, False, 0.0)


def test_wrong_owner_from_a_ps_no_newer_than_us_asks_again_after_a_pause():
    call, round_ = _call(), Round({0})
    call.answer(round_, 0, "FAILED_PRECONDITION", "WRONG_OWNER", (), layout_version=3)
    d = call.after(round_, 3)
    assert d.step is Step.NEW_ROUND and d.again and d.delay_s == retry.AGAIN_PAUSE_S


def test_wrong_owner_without_a_master_is_an_error_naming_the_fix():
    call, round_ = _call(has_master=False), Round({0})
    call.answer(round_, 0, "FAILED_PRECONDITION", "WRONG_OWNER", (), layout_version=3)
    d = call.after(round_, 1)
    assert d.step is Step.GIVE_UP and isinstance(d.error, PSError)
    assert d.error.reason == Reason.WRONG_OWNER.value and "master" in d.error.message


def test_re_splits_are_bounded():
    call = _call()
    for n in range(retry.MAX_RESPLITS + 1):
        round_ = Round({0})
        call.answer(round_, 0, "FAILED_PRECONDITION", "WRONG_OWNER", (), layout_version=n + 1)
        d = call.after(round_, n)
    assert d.step is Step.GIVE_UP and "WRONG_OWNER" in d.error.message
    assert call.rounds == retry.MAX_RESPLITS


def test_not_initialized_declares_again_a_bounded_number_of_times():
    call = _call()
    steps = []
    for _ in range(retry.MAX_DECLARES + 1):
        round_ = Round({0, 1})
        call.answer(round_, 0, "OK", "", ())
        call.answer(round_, 1, "FAILED_PRECONDITION", "NOT_INITIALIZED", ())
        steps.append(call.after(round_, 1))
    assert [d.step for d in steps[:-1]] == [Step.NEW_ROUND] * retry.MAX_DECLARES
    assert steps[0].declare == (1,) and not steps[0].resplit
    assert steps[-1].step is Step.GIVE_UP and "NOT_INITIALIZED" in steps[-1].error.message


def test_an_allowed_refusal_ends_the_call_even_beside_a_wrong_owner():
    call, round_ = _call(), Round({0, 1})
    call.answer(round_, 0, "FAILED_PRECONDITION", "STALE_GRADIENT", STALE)
    call.answer(round_, 1, "FAILED_PRECONDITION", "WRONG_OWNER", STALE, layout_version=9)
    assert call.after(round_, 1).step is Step.DONE


def test_refusals_raise_typed_errors():
    call = _call()
    err = call.refused(Verdict.REFUSE, "PS 0 (tcp://h:1)", "INVALID_ARGUMENT", "", "bad", "")
    assert isinstance(err, PSError) and err.reason == Reason.INTERNAL.value
    assert err.message == "PS 0 (tcp://h:1): bad"
    err = call.refused(Verdict.CREDENTIALS, "PS 0", "UNAUTHENTICATED", "UNAUTHENTICATED", "",
                       "ELASTIC_PS_AUTH_TOKEN")
    assert isinstance(err, CredentialsRefused) and "ELASTIC_PS_AUTH_TOKEN" in str(err)


ANSWERS = st.sampled_from([
    ("OK", ""), ("UNAVAILABLE", "SLOT_MOVING"), ("UNAVAILABLE", "FENCED"),
    ("FAILED_PRECONDITION", "WRONG_OWNER"), ("FAILED_PRECONDITION", "NOT_INITIALIZED"),
    ("FAILED_PRECONDITION", "STALE_GRADIENT"), None])  # None: no answer in time


@settings(max_examples=300, deadline=None)
@given(answers=st.lists(st.lists(ANSWERS, min_size=1, max_size=3), min_size=1, max_size=400),
       max_attempts=st.integers(1, 10), total_s=st.floats(0.1, 40.0),
       try_s=st.floats(0.0, 5.0), has_master=st.booleans())
def test_a_call_never_spends_more_tries_or_time_than_its_budget(answers, max_attempts, total_s,
                                                                try_s, has_master):
    """Whatever the PS answer, round after round: at most `max_attempts` failed tries, every
    wait ends within the budget, and the call ends (DONE or GIVE_UP) before the script does
    unless it is still within both."""
    clock = Clock()
    call = _call(clock, total_s=total_s, max_attempts=max_attempts, has_master=has_master,
                 timeout_s=try_s or 0.01)
    deadline = clock.now + total_s
    round_ = Round(set(range(len(answers[0]))))
    for script in answers:
        waited = min(try_s, call.try_timeout())
        clock.now += waited  # a try waits at most its timeout, cut to the budget
        for index in sorted(round_.pending):
            got = script[index % len(script)]
            if got is None:
                call.silent(round_, "silent")
            else:
                call.answer(round_, index, *got, STALE, layout_version=1)
        d = call.after(round_, 1)
        assert call.tries <= max_attempts
        if d.step in (Step.DONE, Step.GIVE_UP):
            if d.step is Step.GIVE_UP:
                assert isinstance(d.error, (PSUnavailable, PSError))
            return
        assert d.delay_s >= 0 and clock.now + d.delay_s <= deadline + 1e-9
        assert d.step is not Step.RESEND or call.tries < max_attempts
        clock.now += d.delay_s
        if d.step is Step.NEW_ROUND:
            assert has_master or not d.resplit
            round_ = Round(set(d.resplit) | set(d.declare))
    # the script ran out first: only while the call still had time and tries
    assert clock.now <= deadline + retry.MIN_TRY_S and call.tries < max_attempts
