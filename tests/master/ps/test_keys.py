"""The PS registry keeps each PS's data-plane CURVE public key, durably."""
from __future__ import annotations

import pytest
import zmq

from master.convert import ps_to_pb
from rpckit.errors import ServiceError
from tests.master.harness import Harness


def test_the_data_public_key_is_kept_across_a_restart():
    h = Harness()
    key = zmq.curve_keypair()[0].decode()
    h.core.register_ps("h:1", "tcp://h:2", 0, 2, key)
    h.core.register_ps("h:3", "tcp://h:4", 1, 2)  # a plaintext PS: no key
    h.commit()
    h.restart()
    rows, _, complete = h.core.list_ps()
    assert complete
    assert [ps_to_pb(r).data_public_key for r in rows] == [key, ""]


@pytest.mark.parametrize("bad", ["short", "x" * 41, "\x00" * 40, "é" * 40, '"' * 40])
def test_a_malformed_key_is_refused_and_registers_nothing(bad):
    h = Harness()
    with pytest.raises(ServiceError) as err:
        h.core.register_ps("h:1", "tcp://h:2", 0, 1, bad)
    assert err.value.code == "INVALID_ARGUMENT"
    assert h.core.list_ps()[0] == []
