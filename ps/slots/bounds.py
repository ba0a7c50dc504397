"""What a `MoveSlots` call (ps/server.py) may carry, checked before ps/slots/calls.py acts on it.

The master is the only caller, but the control service is reachable by anyone with the token:
a request that names no known action, a slot outside the job's slots, a negative version or
attempt, an address the PS could not dial or a key that is not a CURVE key is refused
INVALID_ARGUMENT before anything is recorded, frozen or dialled.
"""
from __future__ import annotations

import re

from protos import ps_pb2
from rpckit.auth import is_curve_key
from rpckit.errors import invalid, quote

Move = ps_pb2.MoveSlotsRequest
ACTIONS = {Move.IMPORT, Move.ABORT, Move.LAYOUT, Move.PREPARE}
MAX_ADDRESS = 256
MAX_VERSION = (1 << 63) - 1
# tcp://host:port (host a name, an IPv4 address or a bracketed IPv6 one), as PS register it
_DATA_ADDRESS = re.compile(
    r"tcp://(?:\[[0-9A-Za-z:.%_-]+\]|[A-Za-z0-9._-]+):([0-9]{1,5})")


def check_move(req: ps_pb2.MoveSlotsRequest, num_slots: int) -> None:
    if req.action not in ACTIONS:
        raise invalid(f"MoveSlots action {req.action} is not IMPORT, ABORT, LAYOUT or "
                      "PREPARE")
    if not 0 <= req.layout_version <= MAX_VERSION:
        raise invalid(f"layout_version must be >= 0 (got {req.layout_version})")
    if not 0 <= req.attempt <= MAX_VERSION:
        raise invalid(f"attempt must be >= 0 (got {req.attempt})")
    if req.action == Move.LAYOUT:
        # "start:end," per range, at most one range per slot
        if len(req.owned) > 16 * num_slots:
            raise invalid(f"owned is {len(req.owned)} characters: more ranges than the "
                          f"{num_slots} slots")
        return
    if req.action == Move.PREPARE:  # a hint: names nothing
        if req.slots or req.owned or req.src_data_address:
            raise invalid("a PREPARE names no slots, ranges or source")
        return
    if not 1 <= len(req.slots) <= num_slots:
        raise invalid(f"a slot move names 1..{num_slots} slots (got {len(req.slots)})")
    bad = [s for s in req.slots if not 0 <= s < num_slots]
    if bad:
        raise invalid(f"slot {bad[0]} is outside 0..{num_slots - 1}")
    if req.action == Move.IMPORT:
        _check_source(req)


def _check_source(req: ps_pb2.MoveSlotsRequest) -> None:
    address = req.src_data_address
    found = _DATA_ADDRESS.fullmatch(address) if len(address) <= MAX_ADDRESS else None
    if found is None or not 1 <= int(found.group(1)) <= 65535:
        raise invalid(f"src_data_address {quote(address)} must be tcp://host:port")
    if req.src_public_key and not is_curve_key(req.src_public_key):
        raise invalid("src_public_key must be empty or a CURVE public key (40 Z85 characters)")
