"""The PS's side of moving hash slots between PS (docs/ps.md, "Slots and resize").

- ownership.py: which slots this PS serves, and the WRONG_OWNER / SLOT_MOVING refusals;
- moves.py: what a move does to the store (export, install, apply a layout, abort);
- wire.py: an export on the wire (a SlotExport header and raw tensor frames), checked whole;
- calls.py: the master's MoveSlots calls (IMPORT, ABORT, LAYOUT) over the store and the chain;
- bounds.py: what a MoveSlots call may carry, checked before calls.py acts on it;
- set_size.py: the PS count a PS started without --num-ps runs with (the master's layout).

The master plans the moves (master/ps/mover.py, master/ps/layout.py). Nothing is imported
here: ps/store/params.py imports ownership.py, which must not pull the store back in.
"""
