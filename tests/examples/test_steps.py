"""The demo steps' shared reads (examples/ctr/steps.py): the master's events read page by
page, none skipped (a fake master: GetEvents answers the events after `since`)."""
from __future__ import annotations

from examples.ctr.steps import Context
from protos import master_pb2 as pb


class Master:
    def __init__(self, count: int, page: int):
        self.events = [pb.Event(seq=n, kind="lease_requeued") for n in range(1, count + 1)]
        self.page = page

    def GetEvents(self, request, timeout=None):  # noqa: N802 - the RPC's name
        after = [e for e in self.events if e.seq > request.since][:self.page]
        return pb.GetEventsResponse(events=after, next=after[-1].seq if after else request.since)


class Cluster:
    def __init__(self, master: Master):
        self.master = master

    def stub(self) -> Master:
        return self.master


def test_every_event_is_read_once_across_pages_and_polls():
    master = Master(count=7, page=3)
    ctx = Context(Cluster(master), run=None)
    assert [e.seq for e in ctx.read_events()] == list(range(1, 8))
    master.events.append(pb.Event(seq=8, kind="worker_lost"))
    assert [e.seq for e in ctx.read_events()] == list(range(1, 9))
    assert [e.seq for e in ctx.read_events()] == list(range(1, 9))
