"""GetEvents and GetLeases pages (master/server.py `_page`): bounded in bytes, never empty while
rows are left, without a server."""
from __future__ import annotations

from master.server import EVENTS_PAGE_BYTES, _page
from protos import master_pb2 as pb


def _events(n: int, detail_bytes: int) -> list[dict]:
    return [{"seq": i, "kind": "k", "detail": "x" * detail_bytes} for i in range(1, n + 1)]


def _fill(rows):
    reply = pb.GetEventsResponse()
    last = _page(iter(rows), lambda row: pb.Event(**row), reply.events)
    return reply, last


def test_a_page_stops_before_its_bytes_pass_the_bound():
    reply, last = _fill(_events(5, EVENTS_PAGE_BYTES // 3))
    assert [e.seq for e in reply.events] == [1, 2] and last.seq == 2
    assert reply.ByteSize() <= EVENTS_PAGE_BYTES


def test_a_page_holds_one_row_larger_than_the_bound_and_none_of_no_rows():
    reply, last = _fill(_events(2, EVENTS_PAGE_BYTES * 2))
    assert [e.seq for e in reply.events] == [1] and last.seq == 1
    reply, last = _fill([])
    assert list(reply.events) == [] and last is None


def test_small_rows_all_fit():
    reply, last = _fill(_events(50, 10))
    assert [e.seq for e in reply.events] == list(range(1, 51)) and last.seq == 50
