"""A data-plane request's scope in the store: the gate held for its whole length, and the check
that this PS owns every slot the request touches (ps/slots/ownership.py).

The data plane begins every client request with `Requests.begin` (the gate shared, so a slot
move's freeze or release, which take it exclusive, cannot change the slots' ownership until
the answer is made) and, once it has decoded what the request touches, asks `owns`: a slot
this PS does not own refuses it WRONG_OWNER, a write to a slot being handed over SLOT_MOVING,
and a retried mutation whose first try was applied here before its slots moved is told so
(`MovedAfterApplied`). A backup applying its primary's mutation begins it unchecked: the
primary checked, and a backup learns the layout later.
"""
from __future__ import annotations

import threading

from ..slots.ownership import WrongOwner


class MovedAfterApplied(WrongOwner):
    """A retried mutation whose first try was applied here before its slots moved: answered
    WRONG_OWNER with the duplicate flag (nothing read; re-route only the reads)."""


class Requests:
    """A `ParamStore`'s request scope: a part of the store, handed the store whose gate,
    ownership and at-most-once table it uses."""

    def __init__(self, store) -> None:
        self.store = store
        self._checked = threading.local()  # per request thread: whether `owns` checks

    def begin(self, check_owner: bool = True):
        """Hold the gate shared for one request, inside a `with`; `check_owner` False: a
        primary's mutation replayed by its backup (no ownership check)."""
        self._checked.on = check_owner
        return self.store.gate.shared()

    def owns(self, client_id: str, seq: int, tensors_w=(), rows_w=(), tensors_r=(), rows_r=(),
             mutation: bool = True) -> None:
        """Inside `begin`: refuse the request unless this PS owns every slot it touches
        (WRONG_OWNER), and its writes unless none of their slots is being handed over
        (SLOT_MOVING); a retried mutation already applied here is told so."""
        own = self.store.ownership
        if (own.all_owned and not own.frozen_any) or not self._checked.on:
            return
        applied = self.store.applied
        try:
            moving = own.check(tensors_w, rows_w, tensors_r, rows_r)
        except WrongOwner as exc:
            if mutation and applied.seen(client_id, seq):
                raise MovedAfterApplied(exc.message, exc.layout_version) from None
            raise
        # a retry of a mutation applied already gets its stored answer, not a refusal
        if moving and not (mutation and applied.seen(client_id, seq)):
            raise own.moving_error(moving)
