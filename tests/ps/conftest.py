"""Fixtures: an in-process PS data plane (real processes: the `launcher` fixture)."""
from __future__ import annotations

import pytest

from ps.dataplane import data_plane
from ps.store.params import ParamStore


class InProcessPS:
    def __init__(self, store: ParamStore, threads: int = 2):
        self.store = store
        self.plane = data_plane(store, host="127.0.0.1", port=0, threads=threads,
                               max_frame_bytes=64 << 20)
        self.port = self.plane.bind()
        self.endpoint = f"tcp://127.0.0.1:{self.port}"
        self.plane.start()

    def stop(self) -> None:
        self.plane.stop()


@pytest.fixture
def inproc_ps():
    """A factory of in-process PS (store + data plane on 127.0.0.1:0), stopped afterwards."""
    started: list[InProcessPS] = []

    def make(store: ParamStore | None = None, threads: int = 2) -> InProcessPS:
        ps = InProcessPS(store or ParamStore(), threads)
        started.append(ps)
        return ps

    yield make
    for ps in started:
        ps.stop()

