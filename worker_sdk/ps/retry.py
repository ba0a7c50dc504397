"""What every data-plane answer means to a worker's call: the one place that decides to retry.

The exchange (exchange.py) only sends requests and collects answers; the call
(reroute.RoutedCall) does what `CallRetry` decides. It reads an answer by its code and reason
(never its message), keeps the call's budgets, and owns no socket and no clock of its own
(`clock` is injected), so it is tested answer by answer without a network.

| what a PS did                                        | verdict     | what the call does next |
| ---------------------------------------------------- | ----------- | ----------------------- |
| answered OK                                          | TAKE        | keeps the answer |
| refused with a reason the call allows (STALE_GRADIENT) | TAKE      | keeps it; once every part has its answer the call ends, nothing more is sent |
| UNAVAILABLE or DEADLINE_EXCEEDED, reason SLOT_MOVING | MOVING      | the same seq again soon (15 ms doubling to 100 ms), no try spent |
| UNAVAILABLE or DEADLINE_EXCEEDED, any other reason (FENCED, a PS stopping) | RETRY | the same seq again after the backoff, one try spent, the route read again |
| no answer within the try's timeout, a broken same-host socket | RETRY | the same, the connection dropped first |
| WRONG_OWNER                                          | RESPLIT     | once every part has its answer: a layout at least as new as the PS's, the part split by it, a fresh seq |
| NOT_INITIALIZED                                      | DECLARE     | once every part has its answer: the model declared there again, the part sent again, a fresh seq |
| UNAUTHENTICATED or PERMISSION_DENIED                 | CREDENTIALS | raised at once (rpckit.auth.CredentialsRefused): the same token gets the same answer |
| any other refusal                                    | REFUSE      | raised at once (PSError) |

Bounds: a call makes at most `max_attempts` tries that fail (a SLOT_MOVING wait spends none),
at most MAX_RESPLITS fresh-seq rounds, at most restarts.MAX_ROUNDS declarations, and never
waits past `retry.total_s` from its start (one try's timeout is cut to what is left); then
`PSUnavailable`, naming the PS, the tries and the last failure.
"""
from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import Callable, Collection

from rpckit.auth import credentials_refused
from rpckit.errors import Reason
from rpckit.retry import NEVER_RETRIED_NAMES, RETRYABLE, Backoff, RetryPolicy

from .restarts import MAX_ROUNDS as MAX_DECLARES
from .routes import PSError, PSUnavailable

RETRY_CODES = frozenset(code.name for code in RETRYABLE)
REROUTE_AFTER_S = 0.3  # an unanswered request this old asks the master for a new primary
MIN_TRY_S = 0.05  # the shortest wait for an answer, even when the budget is nearly spent
# A slot's hand-over pauses its writes for well under a second: SLOT_MOVING is retried soon
# and often, apart from the tries and backoff kept for a PS that does not answer
MOVING_BACKOFF_S, MOVING_MAX_BACKOFF_S = 0.015, 0.1
MAX_RESPLITS = 10  # fresh-seq rounds of one call (WRONG_OWNER re-splits, declarations)
# a PS no newer than the client's layout refused what that layout says it owns: the master
# may know better in a moment (a hand-over being recorded); the pause before asking again
AGAIN_PAUSE_S, AGAIN_MAX_PAUSE_S = 0.01, 0.1


class Verdict(enum.Enum):
    TAKE = "take"
    MOVING = "moving"
    RETRY = "retry"
    RESPLIT = "resplit"
    DECLARE = "declare"
    CREDENTIALS = "credentials"
    REFUSE = "refuse"


def verdict(code: str, reason: str, allow: Collection[str] = ()) -> Verdict:
    """What one answer means: `code` the DataResponse code's name ("OK", "UNAVAILABLE", ...),
    `reason` its machine-readable reason ("" for none), `allow` the reasons the call takes
    as answers."""
    if code == "OK":
        return Verdict.TAKE
    if code in RETRY_CODES:
        return Verdict.MOVING if reason == Reason.SLOT_MOVING else Verdict.RETRY
    if code in NEVER_RETRIED_NAMES:
        return Verdict.CREDENTIALS
    if reason == Reason.WRONG_OWNER:
        return Verdict.RESPLIT
    if reason == Reason.NOT_INITIALIZED:
        return Verdict.DECLARE
    if reason and reason in allow:
        return Verdict.TAKE
    return Verdict.REFUSE


class Step(enum.Enum):
    DONE = "done"              # every part has its answer: the call returns them
    WAIT_MOVING = "moving"     # only slot hand-overs in the way: the same seq soon
    RESEND = "resend"          # the same seq again after `delay_s`, to re-read routes
    NEW_ROUND = "new_round"    # a fresh seq: re-split `resplit`, declare on `declare`
    GIVE_UP = "give_up"        # raise `error`


@dataclass(frozen=True)
class Decision:
    step: Step
    delay_s: float = 0.0  # sleep this long first
    # RESEND: the connections to drop (no usable answer), then their routes read again,
    # the lookup bounded by `lookup_s`
    reset: frozenset[int] = frozenset()
    lookup_s: float = 0.0
    # NEW_ROUND: the parts refused WRONG_OWNER (split by a layout at least `min_version`;
    # `again`: read the master even if the client's layout is that new) and those to declare
    resplit: tuple[int, ...] = ()
    min_version: int = 0
    again: bool = False
    declare: tuple[int, ...] = ()
    error: Exception | None = None


DONE = Decision(Step.DONE)


@dataclass
class Round:
    """What one seq's answers said so far (the call fills it as answers arrive)."""

    pending: set[int]  # parts with no usable answer yet: sent again with the same seq
    moving: set[int] = field(default_factory=set)  # of pending: answered SLOT_MOVING
    resplit: dict[int, int] = field(default_factory=dict)  # index -> the PS's layout version
    declare: set[int] = field(default_factory=set)  # answered NOT_INITIALIZED
    attempt: int = 1  # sends of this seq
    why: str = ""  # the last failure, for log lines and the give-up message
    unexpected: bool = False  # a failure other than a slot hand-over


class CallRetry:
    """The decisions of one call, from its first send to its answers or its error."""

    def __init__(self, policy: RetryPolicy, max_attempts: int, has_master: bool,
                 clock: Callable[[], float] = time.monotonic):
        self.policy = policy
        self.max_attempts = max_attempts
        self.has_master = has_master
        self.clock = clock
        self.backoff = Backoff(policy, clock)
        self.moving = Backoff(RetryPolicy(MOVING_BACKOFF_S, MOVING_MAX_BACKOFF_S,
                                          policy.total_s), clock)
        self.tries = 0  # tries that failed (SLOT_MOVING waits are not counted)
        self.rounds = 0  # fresh-seq rounds after the first
        self.declared = 0
        self.took_refusal = False  # an allowed refusal was taken: nothing more is sent

    @property
    def elapsed(self) -> float:
        return self.backoff.elapsed

    def left(self) -> float:
        return self.policy.total_s - self.elapsed

    def try_timeout(self) -> float:
        """How long this try waits for its answers: the try's timeout, cut to the budget."""
        return max(MIN_TRY_S, min(self.policy.call_timeout_s, self.left()))

    def look_for_primary(self, waited_s: float) -> bool:
        """Whether a request unanswered for `waited_s` asks the master for a new primary."""
        return self.has_master and waited_s >= REROUTE_AFTER_S

    def answer(self, round_: Round, index: int, code: str, reason: str,
               allow: Collection[str], why: str = "", layout_version: int = 0) -> Verdict:
        """Record PS `index`'s answer in `round_` and say what it means; `why` names it for
        the log (only retried answers are named), `layout_version` the one a WRONG_OWNER
        refusal says the PS knows."""
        seen = verdict(code, reason, allow)
        if seen is Verdict.MOVING or seen is Verdict.RETRY:
            round_.why = why
            if seen is Verdict.MOVING:
                round_.moving.add(index)
            else:
                round_.unexpected = True
            return seen
        round_.pending.discard(index)
        if seen is Verdict.RESPLIT:
            round_.resplit[index] = layout_version
        elif seen is Verdict.DECLARE:
            round_.declare.add(index)
        elif seen is Verdict.TAKE and code != "OK":
            self.took_refusal = True
        return seen

    def silent(self, round_: Round, why: str) -> None:
        """A part got no usable answer (none in time, or its socket broke)."""
        round_.why, round_.unexpected = why, True

    def refused(self, verdict_: Verdict, where: str, code: str, reason: str, message: str,
                token_source: str) -> Exception:
        """The error a CREDENTIALS or REFUSE answer raises."""
        if verdict_ is Verdict.CREDENTIALS:
            return credentials_refused(where, code, token_source, reason)
        return PSError(code, reason or Reason.INTERNAL, f"{where}: {message}")

    def after(self, round_: Round, layout_version: int) -> Decision:
        """What comes after a try: its answers collected, or its time run out."""
        if round_.pending:
            decision = self._same_seq(round_)
            if decision.step is not Step.GIVE_UP:
                round_.attempt += 1
            return decision
        if self.took_refusal or not (round_.resplit or round_.declare):
            return DONE
        return self._new_round(round_, layout_version)

    def _same_seq(self, round_: Round) -> Decision:
        if round_.moving == round_.pending:  # only hand-overs in the way: soon, no try spent
            delay = self.moving.next_delay()
            if delay is None or self.left() <= 0:
                return self._give_up(round_)
            round_.moving = set()
            return Decision(Step.WAIT_MOVING, delay)
        self.tries += 1
        delay = None if self.tries >= self.max_attempts else self.backoff.next_delay()
        if delay is None:
            return self._give_up(round_)
        reset = frozenset(round_.pending - round_.moving)
        round_.moving = set()
        lookup = min(self.policy.call_timeout_s, self.left() - delay)
        return Decision(Step.RESEND, delay, reset=reset, lookup_s=max(0.0, lookup))

    def _give_up(self, round_: Round) -> Decision:
        pending = ", ".join(str(i) for i in sorted(round_.pending))
        return Decision(Step.GIVE_UP, error=PSUnavailable(
            f"PS {pending} gave no usable answer for {self.elapsed:.1f}s ({round_.attempt} "
            f"tries; retry budget {self.policy.total_s:.0f}s, {self.max_attempts} tries); last: "
            f"{round_.why}. Is the PS running? A PS restarted from its checkpoint is found "
            "again through the master while the budget lasts"))

    def _new_round(self, round_: Round, layout_version: int) -> Decision:
        if self.rounds >= MAX_RESPLITS:
            refused = ", ".join(str(i) for i in sorted(round_.resplit or round_.declare))
            return Decision(Step.GIVE_UP, error=PSUnavailable(
                f"PS {refused} still answered WRONG_OWNER after {MAX_RESPLITS} re-routes (the "
                f"client's layout is version {layout_version}): the PS set is resizing faster "
                "than this call could follow, or the master's layout and the PS disagree "
                "(elastic-ctl status)"))
        delay, newest, again = 0.0, 0, False
        if round_.resplit:
            first = min(round_.resplit)
            why = f"PS {first} refused WRONG_OWNER at layout v{round_.resplit[first]}"
            if not self.has_master:
                return Decision(Step.GIVE_UP, error=PSError(
                    "FAILED_PRECONDITION", Reason.WRONG_OWNER,
                    f"{why}; this client was given its PS endpoints, not a master, so it "
                    "cannot learn where the slot went: give it the master's address"))
            newest = max(round_.resplit.values())
            again = layout_version >= newest
            if again:
                delay = min(AGAIN_PAUSE_S * 2 ** self.rounds, AGAIN_MAX_PAUSE_S)
        else:
            why = f"PS {min(round_.declare)} answered NOT_INITIALIZED"
        if self.left() - delay <= 0:
            return Decision(Step.GIVE_UP, error=PSUnavailable(
                f"{why}; the call's retry budget is spent"))
        if round_.declare:
            self.declared += 1
            if self.declared > MAX_DECLARES:
                first = min(round_.declare)
                return Decision(Step.GIVE_UP, error=PSUnavailable(
                    f"PS {first} answered NOT_INITIALIZED again after the model was declared "
                    f"there {MAX_DECLARES} times in this call: is it restarting over and over?"))
        self.rounds += 1
        return Decision(Step.NEW_ROUND, delay, resplit=tuple(sorted(round_.resplit)),
                        min_version=newest, again=again, declare=tuple(sorted(round_.declare)),
                        lookup_s=max(MIN_TRY_S, self.left() - delay))
