"""The demo's pace file (examples/ctr/pace.py): a worker waits the interval between steps,
waits while held (its pushes answered first), and trains at full speed without a file."""
from __future__ import annotations

from examples.ctr import pace


class Clock:
    def __init__(self):
        self.t = 0.0
        self.slept = []

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.t += s


def test_without_a_file_a_worker_never_waits(tmp_path):
    clock = Clock()
    p = pace.Pace(tmp_path / "missing.json", clock=clock, sleep=clock.sleep)
    assert p.wait(lambda: None) == 0 and p.wait(lambda: None) == 0 and clock.slept == []


def test_a_worker_keeps_the_interval_between_steps(tmp_path):
    path = tmp_path / "pace.json"
    pace.write(path, 0.5, False)
    clock = Clock()
    p = pace.Pace(path, clock=clock, sleep=clock.sleep)
    assert p.wait(lambda: None) == 0.5  # the first step starts the clock
    clock.t += 0.2                       # a step that took 0.2 s
    assert abs(p.wait(lambda: None) - 0.3) < 1e-9
    clock.t += 0.7                       # a step slower than the interval: no wait
    assert p.wait(lambda: None) == 0


def test_a_held_worker_flushes_once_and_waits_until_released(tmp_path):
    path = tmp_path / "pace.json"
    pace.write(path, 0.0, True)
    clock, flushed = Clock(), []

    def sleep(s: float) -> None:
        clock.sleep(s)
        if clock.t >= 1.0:
            pace.write(path, 0.0, False)  # the demo lifts the hold

    p = pace.Pace(path, clock=clock, sleep=sleep)
    waited = p.wait(lambda: flushed.append(1))
    assert flushed == [1] and 1.0 <= waited <= 1.0 + pace.POLL_S + 1e-9
    assert not p.hold and p.wait(lambda: flushed.append(1)) == 0 and flushed == [1]


def test_a_garbled_file_keeps_the_last_pace(tmp_path):
    path = tmp_path / "pace.json"
    pace.write(path, 0.25, False)
    p = pace.Pace(path)
    p.read()
    path.write_text("{not json")
    p.read()
    assert p.interval_s == 0.25 and not p.hold
