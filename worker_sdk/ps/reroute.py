"""A call routed by the slot layout: sent, collected, and carried on as `CallRetry` decides.

Each call of `DataClient` is a set of `parts.Part`, one per PS index, that an operation (an
`Op`: pull, push, rows, Step, InitParameters) turns into requests. `RoutedCall` sends them
through the exchange (exchange.py), collects the answers, hands each to the call's
`retry.CallRetry` and does what it decides after every try: wait and send the same seq again
(a PS silent, stopping, fenced, or handing a slot over), look up a new primary while a request
waits, re-split refused parts by a newer layout, declare the model again, or give up. It
decides nothing itself.

A PS that no longer owns a slot of its part refuses the whole part, applying nothing, with
reason `WRONG_OWNER` and the layout version it knows. Then, and only once every part of the
call has its answer (so a PS never sees a newer seq of this client while an older one may
still be in flight there), the call takes a layout at least that new from the master (through
the `router.Router`), splits the refused parts by it and sends them with a fresh seq. A refusal
with the duplicate flag says that PS applied this (client_id, seq) before its slots moved: only
the part's reads are sent again. A PS that restarted empty (NOT_INITIALIZED) gets the model
declared again and its part sent again the same way (worker_sdk/ps/restarts.py).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable

from protos import ps_pb2
from pswire.frames import code_name
from rpckit.errors import Reason

from .. import metrics
from .parts import Part
from .retry import Decision, Round, Step, Verdict

log = logging.getLogger(__name__)


@dataclass
class Answer:
    index: int  # the PS that answered
    part: Part  # what its request carried
    resp: ps_pb2.DataResponse
    frames: list


@dataclass
class Result:
    answers: list[Answer]  # every part answered, from whichever round
    applied_before: list[Answer]  # refused WRONG_OWNER as duplicates: mutations applied once


class Op:
    """What a call sends: its requests, built from parts."""

    allow: tuple[Reason, ...] = ()  # refusals answered instead of raised (besides WRONG_OWNER)

    def build(self, index: int, part: Part) -> tuple[ps_pb2.DataRequest, list]:
        raise NotImplementedError

    def prepare(self, parts: dict[int, Part]) -> None:
        """Before a re-route round is sent (a push may need its staleness checked first)."""


def duplicate(resp: ps_pb2.DataResponse) -> bool:
    """Whether a refusal says this (client_id, seq)'s mutations were applied there already."""
    kind = resp.WhichOneof("body")
    if kind == "push":
        return resp.push.duplicate
    if kind == "push_rows":
        return resp.push_rows.duplicate
    if kind == "step":
        return resp.step.push.duplicate
    return False


class RoutedCall:
    """A call sent (its first round) whose answers `wait` collects, doing what its
    `retry.CallRetry` decides after every try. `declare_again(indices, why)` declares the model
    on PS that restarted empty (`DataClient.declare_again`)."""

    def __init__(self, router, parts: dict[int, Part], op: Op,
                 declare_again: Callable[[list[int], str], None]):
        self._router = router
        self._exchange = router.exchange
        self._op = op
        self._declare_again = declare_again
        self._retry = self._exchange.new_retry()
        self._layout = router.layout  # what the parts in flight were routed by
        self._result = Result([], [])
        self._error: BaseException | None = None
        self._done = False
        self._begin(parts)

    def _begin(self, parts: dict[int, Part]) -> None:
        """A round: the parts' requests built, given a fresh seq and sent."""
        self._parts = parts
        self._requests = {i: self._op.build(i, p) for i, p in parts.items()}
        self._seq = self._exchange.stamp(self._requests)
        self._round = Round(set(parts))
        self._taken: list[tuple[int, ps_pb2.DataResponse, list]] = []
        self._refused: dict[int, ps_pb2.DataResponse] = {}  # WRONG_OWNER, NOT_INITIALIZED
        self._offers: dict[int, str] = {}  # same-host endpoints the answers named
        self._wire: dict = {}  # each request as encoded (Exchange.send)
        self._send()

    def _send(self) -> None:
        """The same seq to every part without a usable answer."""
        self._waiting = {}  # pollable -> (index, transport)
        for index in self._round.pending:
            req, frames = self._requests[index]
            transport = self._exchange.send(index, req, frames, self._wire)
            self._waiting[transport.pollable] = (index, transport)

    def wait(self) -> Result:
        """Every part's answer, from whichever round; raises what the call gave up with.
        Waiting again returns (or raises) the same."""
        if not self._done:
            try:
                self._run()
            except BaseException as exc:
                self._error = exc
            finally:
                self._done = True
        if self._error is not None:
            raise self._error
        return self._result

    def arrived(self) -> bool:
        """Whether every answer of the call is in, without waiting for one: the answers
        already there are taken (a try that is not over is not counted failed). True only
        when the call is over; `wait` then returns at once."""
        if self._done:
            return True
        if self._waiting:
            self._exchange.collect(self._waiting, self._seq, 0.0, self._take, self._broken,
                                   once=True)
        if self._waiting:
            return False
        try:  # every answer in: the retry decides (a refusal may start another round)
            self.wait()
        except BaseException:  # noqa: BLE001 - `wait` raises it again for the caller
            pass
        return True

    def _run(self) -> None:
        while True:
            self._collect()
            decision = self._retry.after(self._round, self._layout.version)
            if not self._round.pending:
                self._answered()
            step = decision.step
            if step is Step.DONE:
                return
            if step is Step.GIVE_UP:
                if self._round.pending:
                    self._exchange.gave_up(self._round.attempt, self._retry.elapsed,
                                           self._round.why)
                raise decision.error
            if decision.delay_s:
                time.sleep(decision.delay_s)
            if step is Step.NEW_ROUND:
                parts = self._next_round(decision)
                if not parts:
                    return
                self._begin(parts)
                continue
            if step is Step.RESEND:  # the connections start over, at the routes read again
                self._exchange.failed(decision.reset)
                if decision.lookup_s > 0:
                    self._exchange.refresh(self._round.pending, timeout_s=decision.lookup_s)
            self._send()

    def _collect(self) -> None:
        """One try's answers, into the round (and `_taken`, `_refused`)."""
        retry, waiting = self._retry, self._waiting
        started = time.monotonic()
        self._promoted = False
        self._exchange.collect(waiting, self._seq, retry.try_timeout(), self._take,
                               self._broken, self._tick if retry.has_master else None)
        promoted = "; a new PS primary was promoted" if self._promoted else ""
        for index, transport in waiting.values():  # the address the try went to, not a new one
            retry.silent(self._round, f"no answer from PS {index} at {transport.endpoint} "
                                      f"within {time.monotonic() - started:.1f}s{promoted}")

    def _take(self, index: int, resp: ps_pb2.DataResponse, frames: list) -> None:
        if resp.code:
            code = code_name(resp.code)
            why = f"PS {index} answered {code}: {resp.message}"
        else:  # the usual answer: no name lookup, nothing to say
            code, why = "OK", ""
        seen = self._retry.answer(self._round, index, code, resp.reason, self._op.allow,
                                  why, resp.layout_version)
        if seen is Verdict.TAKE:
            self._offers[index] = resp.local_endpoint
            self._taken.append((index, resp, frames))
        elif seen is Verdict.RESPLIT or seen is Verdict.DECLARE:
            self._offers[index] = resp.local_endpoint
            self._refused[index] = resp
        elif seen is Verdict.CREDENTIALS or seen is Verdict.REFUSE:
            raise self._retry.refused(seen, self._exchange.where(index), code, resp.reason,
                                      resp.message, self._exchange.token_source)

    def _broken(self, index: int) -> None:
        self._retry.silent(self._round, f"PS {index}'s same-host socket broke")

    def _tick(self, waited_s: float) -> bool:
        """While answers are missing: a new primary found for one of them ends the try."""
        if not self._retry.look_for_primary(waited_s):
            return False
        if not self._exchange.primary_moved({i for i, _ in self._waiting.values()}):
            return False
        self._promoted = True
        return True

    def _answered(self) -> None:
        """The round's seq has every answer: log it, keep them, heed the same-host offers."""
        self._exchange.answered(self._round.attempt, self._retry.elapsed, self._round.why,
                                self._round.unexpected)
        for index, endpoint in self._offers.items():
            self._exchange.offer(index, endpoint)
        self._result.answers.extend(Answer(index, self._parts[index], resp, frames)
                                    for index, resp, frames in self._taken)

    def _next_round(self, decision: Decision) -> dict[int, Part]:
        """The parts of the next round: the refused ones split by a newer layout, those of PS
        declared again as they were (the refusal applied nothing)."""
        parts = self._reroute(decision) if decision.resplit else {}
        if decision.declare:
            first = min(decision.declare)
            why = f"PS {first} answered NOT_INITIALIZED: {self._refused[first].message}"
            self._declare_again(list(decision.declare), why)
            for index in decision.declare:
                _merge_into(parts, index, self._parts[index])
        return parts

    def _reroute(self, decision: Decision) -> dict[int, Part]:
        first = decision.resplit[0]
        why = f"PS {first} refused WRONG_OWNER at layout " \
              f"v{self._refused[first].layout_version}: {self._refused[first].message}"
        old = self._layout
        layout = self._router.await_layout(decision.min_version, decision.lookup_s, why,
                                           decision.again)
        todo: dict[int, Part] = {}
        for index in decision.resplit:
            resp, part = self._refused[index], self._parts[index]
            applied = duplicate(resp)
            if applied:
                self._result.applied_before.append(Answer(index, part, resp, []))
                part = part.reads_only()
            tensors, rows = part.counts()
            log.info("PS %d refused WRONG_OWNER at layout v%d; re-routed %d tensors and %d rows "
                     "by layout v%d%s", index, resp.layout_version, tensors, rows,
                     layout.version, " (its pushes were applied there already)"
                     if applied else "")
            metrics.rerouted()
            for target, sub in self._router.resplit(part, layout, old, index).items():
                _merge_into(todo, target, sub)
        self._layout = layout
        todo = {i: p for i, p in todo.items() if not p.empty}
        if todo:
            self._op.prepare(todo)
        return todo


def _merge_into(parts: dict[int, Part], index: int, part: Part) -> None:
    if index in parts:
        parts[index].merge(part)
    else:
        parts[index] = part
