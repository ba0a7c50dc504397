"""Where a worker's call goes: the layout it is routed by, each dense tensor's PS, the split.

`Router` is the part of a `DataClient` that the code sending calls needs (worker_sdk/ps/steps.py
and reroute.py): the slot layout routed by now (the exchange's, from the master), the PS index
of each declared dense tensor under it (cached per layout: this is on every step's path), a
call's content split by it, a refused part split again by a newer one, and the wait for that
newer layout. It holds no connection and sends nothing.
"""
from __future__ import annotations

from typing import Iterable, Mapping

from pswire.slots import Layout

from .parts import Part, split


class Router:
    def __init__(self, exchange):
        self.exchange = exchange  # worker_sdk/ps/exchange.py: the layout and the connections
        # the declared dense tensors -> their PS index (kept to the layout by tensor_owner)
        self.owner: dict[str, int] = {}
        self._placed_by: Layout | None = None  # the layout `_placed` was computed from
        self._placed: dict[str, int] = {}  # tensor name -> PS index under it

    @property
    def layout(self) -> Layout:
        return self.exchange.layout

    def set_layout(self, sizes: Mapping[str, int]) -> None:
        """Declare the model's tensors (name -> bytes): each is placed by the slot its name
        hashes to (sizes no longer matter)."""
        self.owner = {name: self.tensor_owner(name) for name in sizes}

    def tensor_owner(self, name: str) -> int:
        """The PS index that holds tensor `name` under the layout routed by now."""
        layout = self.exchange.layout
        if layout is not self._placed_by:
            self._placed_by, self._placed = layout, {}
            self.owner = {n: layout.owner_of_tensor(n) for n in self.owner}
        index = self._placed.get(name)
        if index is None:
            index = self._placed[name] = layout.owner_of_tensor(name)
        return index

    def owners(self, names: Mapping[str, object]) -> Mapping[str, int]:
        """Tensor name -> PS index for every key of `names` (and perhaps more) under the
        layout routed by now: the router's own map, kept as it is (a new layout gets a new
        one), so read it, never change it."""
        if self.exchange.layout is not self._placed_by \
                or not self._placed.keys() >= names.keys():
            for name in names:
                self.tensor_owner(name)
        return self._placed

    def known(self, names: Iterable[str], call: str) -> list[str]:
        """`names` as a list; KeyError naming the fix for one this client never declared."""
        names = list(names)
        for name in names:
            if name not in self.owner:
                raise KeyError(
                    f"{call} of tensor {name!r}: this client does not know which PS holds it "
                    "yet; declare the model first: PSClient.init_parameters(model) (or "
                    "PSClient.attach(model) in a process that only reads it; on a DataClient: "
                    "init_parameters or set_layout)")
        return names

    def split(self, part: Part, every: bool = False) -> dict[int, Part]:
        """A call's content by the PS that own it now (`worker_sdk.ps.parts.split`). A client
        idle for IDLE_REFRESH_S reads the layout again first: a shrink may have removed a PS
        its layout still routes to, which answers WRONG_OWNER only for a few seconds before
        it exits (and a request to a PS that is gone could not be re-routed safely)."""
        self.exchange.refresh_if_idle()
        return split(part, self.exchange.layout, self.tensor_owner, every)

    def resplit(self, part: Part, layout: Layout, old: Layout, refused: int) -> dict[int, Part]:
        """A part PS `refused` answered WRONG_OWNER under `old`, split by `layout`."""
        return split(part, layout, self.tensor_owner, old=old, refused=refused)

    def await_layout(self, min_version: int, timeout_s: float, why: str,
                     again: bool = False) -> Layout:
        """A layout at least `min_version`, routed by from now on (`Exchange.await_layout`)."""
        return self.exchange.await_layout(min_version, timeout_s, why, again)
