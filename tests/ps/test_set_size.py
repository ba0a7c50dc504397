"""A PS without --num-ps asks the master's layout for its count (ps/slots/set_size.py)."""
from __future__ import annotations

import threading

import grpc
import pytest

from protos import master_pb2
from tests.fakes import FakeError
from ps.slots.set_size import NoPlace, ask_master


class FakeMaster:
    def __init__(self, *answers):
        self.answers = list(answers)

    def ListPS(self, req, timeout=None):
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def _layout(num_ps, target=0, version=1):
    return master_pb2.ListPSResponse(num_ps=num_ps, target_num_ps=target or num_ps,
                                     layout_version=version)


def test_the_count_comes_from_the_layout_or_its_target():
    stop = threading.Event()
    assert ask_master(FakeMaster(_layout(0, version=0)), 0, stop) == 1  # the job's first PS
    assert ask_master(FakeMaster(_layout(2)), 1, stop) == 2
    assert ask_master(FakeMaster(_layout(2, 4)), 3, stop) == 4
    assert ask_master(FakeMaster(_layout(4, 2)), 3, stop) == 4  # shrinking: still in it


def test_an_index_outside_the_layout_has_no_place():
    with pytest.raises(NoPlace, match="resize-ps 3"):
        ask_master(FakeMaster(_layout(2)), 2, threading.Event())
    with pytest.raises(NoPlace, match="no PS layout yet"):
        ask_master(FakeMaster(_layout(0, version=0)), 1, threading.Event())


def test_an_unreachable_master_is_asked_again_and_a_refusal_ends_it():
    master = FakeMaster(FakeError(grpc.StatusCode.UNAVAILABLE), _layout(3))
    assert ask_master(master, 2, threading.Event(), first_backoff=0.001) == 3
    with pytest.raises(NoPlace, match="UNAUTHENTICATED|token"):
        ask_master(FakeMaster(FakeError(grpc.StatusCode.UNAUTHENTICATED)), 0,
                   threading.Event())
    stop = threading.Event()
    stop.set()
    assert ask_master(FakeMaster(), 0, stop) == 0
