"""The gate's shared/exclusive rules, with real threads (ps/store/gate.py)."""
from __future__ import annotations

import threading
import time

from ps.store.gate import Gate

WAIT_S = 5.0


def _started(target) -> tuple[threading.Thread, threading.Event, list]:
    done, errors = threading.Event(), []

    def run():
        try:
            target()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, done, errors


def test_a_writer_waits_for_the_shared_holds_then_goes_before_new_readers():
    gate = Gate()
    order = []
    gate.shared().__enter__()  # a request in flight
    writer, writer_done, writer_errors = _started(lambda: _exclusive(gate, order))
    time.sleep(0.1)
    assert not writer_done.is_set()  # waits for the shared hold
    reader, reader_done, reader_errors = _started(lambda: _shared(gate, order))
    time.sleep(0.1)
    assert not reader_done.is_set()  # a new reader waits behind the waiting writer
    gate.shared().__exit__(None, None, None)
    assert writer_done.wait(WAIT_S) and reader_done.wait(WAIT_S)
    assert not writer_errors and not reader_errors
    assert order == ["exclusive", "shared"]


def test_shared_holds_nest_and_do_not_wait_for_a_waiting_writer():
    gate = Gate()
    order = []
    with gate.shared():
        writer, writer_done, errors = _started(lambda: _exclusive(gate, order))
        time.sleep(0.1)
        with gate.shared():  # nested: must not wait for the writer, which waits for us
            order.append("nested")
        assert not writer_done.is_set()
    assert writer_done.wait(WAIT_S) and not errors
    assert order == ["nested", "exclusive"]


def _exclusive(gate: Gate, order: list) -> None:
    with gate.exclusive():
        order.append("exclusive")


def _shared(gate: Gate, order: list) -> None:
    with gate.shared():
        order.append("shared")
