"""A call routed by the slot layout, and sent on when a PS says a slot moved (WRONG_OWNER).

Each call of `DataClient` is a set of `parts.Part`, one per PS index, that an operation (an
`Op`: pull, push, rows, Step, InitParameters) turns into requests. A PS that no longer owns a
slot of its part refuses the whole part, applying nothing, with reason `WRONG_OWNER` and the
layout version it knows. Then, and only once every part of the call has its answer (so a PS
never sees a newer seq of this client while an older one may still be in flight there), the
client takes a layout at least that new from the master, splits the refused parts by it and
sends them with a fresh seq. A refusal with the duplicate flag says that PS applied this
(client_id, seq) before its slots moved: only the part's reads are sent again. At most
`MAX_REROUTES` rounds per call, within the call's retry budget; then `PSUnavailable`.
A PS that restarted empty (NOT_INITIALIZED) gets the model declared again and its part sent
again the same way (worker_sdk/ps/restarts.py).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from protos import ps_pb2
from rpckit.errors import Reason

from .. import metrics
from . import restarts
from .parts import Part, split
from .routes import PSUnavailable

log = logging.getLogger(__name__)

MAX_REROUTES = 10


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
    """A call sent (the first round) whose answers `wait` collects, re-routing as it goes."""

    def __init__(self, client, parts: dict[int, Part], op: Op):
        self._client = client
        self._op = op
        self._started = time.monotonic()
        self._layout = client.exchange.layout  # what the parts in flight were routed by
        self._result = Result([], [])
        self._declared = 0  # PS declared again in this call (restarts.MAX_ROUNDS at most)
        self._send(parts)

    def _send(self, parts: dict[int, Part]) -> None:
        self._parts = parts
        requests = {i: self._op.build(i, p) for i, p in parts.items()}
        self._pending = self._client.begin_call(
            requests, self._op.allow + (Reason.WRONG_OWNER, Reason.NOT_INITIALIZED))

    def wait(self) -> Result:
        result = self._result
        for round_ in range(MAX_REROUTES + 1):
            refused, empty = {}, {}
            for index, (resp, frames) in self._pending.wait().items():
                if resp.code != 0 and resp.reason == Reason.WRONG_OWNER:
                    refused[index] = resp
                elif resp.code != 0 and resp.reason == Reason.NOT_INITIALIZED:
                    empty[index] = resp
                else:
                    result.answers.append(Answer(index, self._parts[index], resp, frames))
            # a refusal the op allows (a stale push) ends the call: nothing more is sent
            if not (refused or empty) or any(a.resp.code != 0 for a in result.answers):
                return result
            if round_ == MAX_REROUTES:
                break
            parts = self._reroute(refused, round_) if refused else {}
            for index, part in self._declare_again(empty).items():
                if index in parts:
                    parts[index].merge(part)
                else:
                    parts[index] = part
            if not parts:
                return result
            self._send(parts)
        raise PSUnavailable(
            f"PS {', '.join(str(i) for i in sorted(refused))} still answered WRONG_OWNER "
            f"after {MAX_REROUTES} re-routes (the client's layout is version "
            f"{self._layout.version}): the PS set is resizing faster than this call could "
            "follow, or the master's layout and the PS disagree (elastic-ctl status)")

    def _declare_again(self, empty: dict[int, ps_pb2.DataResponse]) -> dict[int, Part]:
        """PS that restarted empty (NOT_INITIALIZED): the model declared there again from this
        worker's values (worker_sdk/ps/restarts.py), and their parts to send again as they
        were (the refusal applied nothing)."""
        if not empty:
            return {}
        first = min(empty)
        why = f"PS {first} answered NOT_INITIALIZED: {empty[first].message}"
        self._declared += 1
        if self._declared > restarts.MAX_ROUNDS:
            raise PSUnavailable(f"{why}, again after the model was declared there "
                                f"{restarts.MAX_ROUNDS} times in this call: is it restarting "
                                "over and over?")
        self._client.declare_again(sorted(empty), why)
        return {index: self._parts[index] for index in sorted(empty)}

    def _reroute(self, refused: dict[int, ps_pb2.DataResponse], round_: int) -> dict[int, Part]:
        client = self._client
        newest = max(resp.layout_version for resp in refused.values())
        # a PS no newer than our layout refused what it says the PS owns: the master may know
        # better in a moment (a hand-over being recorded); ask again after a short pause
        again = self._layout.version >= newest
        if again:
            time.sleep(min(0.01 * 2 ** round_, 0.1))
        left = client.exchange.retry.total_s - (time.monotonic() - self._started)
        first = min(refused)
        why = f"PS {first} refused WRONG_OWNER at layout v{refused[first].layout_version}: " \
              f"{refused[first].message}"
        if left <= 0:
            raise PSUnavailable(f"{why}; the call's retry budget is spent")
        old, layout = self._layout, client.exchange.await_layout(newest, left, why, again)
        todo: dict[int, Part] = {}
        for index, resp in sorted(refused.items()):
            part = self._parts[index]
            if duplicate(resp):
                self._result.applied_before.append(Answer(index, part, resp, []))
                part = part.reads_only()
            moved = split(part, layout, client.tensor_owner, old=old, refused=index)
            tensors, rows = part.counts()
            log.info("PS %d refused WRONG_OWNER at layout v%d; re-routed %d tensors and %d rows "
                     "by layout v%d%s", index, resp.layout_version, tensors, rows,
                     layout.version, " (its pushes were applied there already)"
                     if duplicate(resp) else "")
            metrics.rerouted()
            for target, sub in moved.items():
                if target in todo:
                    todo[target].merge(sub)
                else:
                    todo[target] = sub
        self._layout = layout
        todo = {i: p for i, p in todo.items() if not p.empty}
        if todo:
            self._op.prepare(todo)
        return todo


def call(client, parts: dict[int, Part], op: Op) -> Result:
    return RoutedCall(client, parts, op).wait()
