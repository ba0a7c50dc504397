"""The bounds of an embedding row id, checked the same way on every process.

Placement itself is the slot layout's (pswire/slots.py: a row's slot is a hash of its id, a
dense tensor's a hash of its name, and the master's layout maps slots to PS). Before round 3
rows lived on `id % num_ps` and tensors were balanced by size; nothing routes that way now.
"""
from __future__ import annotations

# Ids must lie in [0, MAX_ROW_ID]: negative ids are a caller's bug (an overflowed hash, a
# signed cast), and 2**53 - 1 keeps every id exact in a float64 and in JSON.
MAX_ROW_ID = 2**53 - 1


def check_row_ids(ids) -> tuple[int, int] | None:
    """Raise ValueError unless every id is in [0, MAX_ROW_ID]; returns (least, greatest), None
    when there are no ids."""
    if hasattr(ids, "numel"):
        if ids.numel() == 0:
            return None
        keys = ids.numpy() if ids.device.type == "cpu" and not ids.requires_grad else ids
        low, high = int(keys.min()), int(keys.max())
    else:
        ids = list(ids)
        if not ids:
            return None
        low, high = min(ids), max(ids)
    if low < 0:
        raise ValueError(f"embedding ids must be >= 0, got {low}")
    if high > MAX_ROW_ID:
        raise ValueError(f"embedding ids must be <= {MAX_ROW_ID} (2**53 - 1), got {high}")
    return low, high
