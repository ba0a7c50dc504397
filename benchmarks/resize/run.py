"""The driver of bench_resize: a master, the PS set and one training worker as real processes,
resized live and stop-the-world, every phase timed from the driver's clock and the master's
events.

Live: `ResizePS(N)` while the worker trains; growing, indices num_ps..N-1 are started right
after it (`elastic-ps --master M --index K`, no --num-ps); the resize is done at the master's
`ps_resize_finished`; shrinking, the PS above N must then exit 0 on their own.

Stop-the-world: the worker pauses (its last gradients pushed), every PS gets SIGTERM (final
checkpoints, exit 0), `ResizePS(N)` while none is up, the PS start again from their checkpoint
directories (old indices restore theirs, new ones start empty; shrinking, the old indices
above N start too, hand their slots over with no traffic and exit 0), the master moves the
slots, and at `ps_resize_finished` the worker resumes with a new client. The time counted is
from the pause to the first step answered after it.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from cluster.launch import PS_LISTENING, Launcher, PSProc
from protos import master_pb2 as pb
from protos import ps_pb2, ps_pb2_grpc
from rpckit import auth

MOVED = re.compile(r"(?P<slots>\d+) slots in (?P<seconds>[\d.]+) s")


@dataclass
class Phase:
    """One resize and what was seen around it (unix seconds from this machine's clock)."""
    way: str                 # "live" or "stop-the-world"
    before: int
    after: int
    started: float = 0.0     # ResizePS sent (live) or the worker told to pause (stop-the-world)
    finished: float = 0.0    # ps_resize_finished (live) or the first step after the resume
    resize_finished: float = 0.0  # ps_resize_finished, from the master's event
    events: list = field(default_factory=list)  # (kind, time, detail) of the ps_* events
    slots_moved: int = 0
    move_batches: int = 0
    move_seconds: float = 0.0  # sum of the batches' copy times (ps_slots_moved)
    marks: dict = field(default_factory=dict)  # step name -> unix time (stop-the-world)
    exit_codes: dict = field(default_factory=dict)  # PS index -> exit code (those that left)
    rows_after: int = 0      # rows of "emb" over the PS once done

    @property
    def seconds(self) -> float:
        return self.finished - self.started


class Bench:
    def __init__(self, workdir: Path, worker_args: list[str], ps_flags: tuple[str, ...] = ()):
        self.workdir = Path(workdir)
        self.launcher = Launcher(self.workdir)
        self.control = self.workdir / "control"
        self.control.mkdir(parents=True, exist_ok=True)
        self.worker_args = worker_args
        self.ps_flags = ps_flags
        self.ps: dict[int, PSProc] = {}
        self.master = None
        self.worker = None
        self._since = 0  # events read up to this seq
        self._joins = 0

    def __enter__(self) -> "Bench":
        return self

    def __exit__(self, *exc) -> None:
        self.launcher.close()

    # -- processes ---------------------------------------------------------------------------

    def start(self, num_ps: int) -> float:
        """Master, `num_ps` PS and the worker; returns once the worker loaded every row (the
        seconds that took)."""
        self.master = self.launcher.master()
        for i in range(num_ps):
            self.ps[i] = self._start_ps(i, num_ps)
        self._wait("the PS set", lambda: self.stub().ListPS(pb.ListPSRequest(),
                                                             timeout=5).complete)
        self.worker = self.launcher.python(
            "-m", "benchmarks.resize.worker", "--master", self.master.address, "--control",
            str(self.control), *self.worker_args, name="worker")
        self._wait("the worker to load the rows", lambda: (self.control / "ready").exists(),
                   timeout=600, watch=self.worker)
        self._read_events()  # the start's events are not a resize's
        return float((self.control / "ready").read_text())

    def _start_ps(self, index: int, num_ps: int = 0, wait: bool = True) -> PSProc:
        """A new PS of `index`, with a checkpoint directory of its own (it starts empty, even
        where an earlier PS of that index, removed by a shrink, left files)."""
        self._joins += 1
        return self.launcher.ps(self.master.address, *self.ps_flags, index=index,
                                num_ps=num_ps, checkpoint_dir=f"ps{index}-{self._joins}",
                                wait=wait)

    def go(self) -> None:
        (self.control / "go").touch()

    def answered(self) -> int:
        try:
            return int((self.control / "progress").read_text() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def train(self, steps: int) -> None:
        """Let the worker answer `steps` more steps."""
        target = self.answered() + steps
        self._wait(f"the worker to reach step {target}", lambda: self.answered() >= target,
                   timeout=max(120, steps), watch=self.worker)

    def stop_worker(self) -> dict:
        (self.control / "stop").touch()
        self._wait("the worker's result", lambda: (self.control / "result.json").exists(),
                   timeout=120, watch=self.worker, poll=0.1)
        self.worker.wait(60)
        return json.loads((self.control / "result.json").read_text())

    # -- resizes -----------------------------------------------------------------------------

    def live(self, target: int) -> Phase:
        phase = Phase("live", len(self.ps), target)
        phase.started = time.time()
        self.stub().ResizePS(pb.ResizePSRequest(num_ps=target), timeout=10)
        joining = [self._start_ps(i, wait=False) for i in range(phase.before, target)]
        for proc, i in zip(joining, range(phase.before, target)):
            self.ps[i] = self.launcher.wait_ready(proc)
        self._await_finished(phase)
        phase.finished = phase.resize_finished
        self._await_leavers(phase)
        phase.rows_after = self.rows("emb")
        return phase

    def stop_the_world(self, target: int) -> Phase:
        phase = Phase("stop-the-world", len(self.ps), target)
        marks = phase.marks
        phase.started = time.time()
        (self.control / "pause").touch()
        self._wait("the worker to pause", lambda: (self.control / "paused").exists(),
                   watch=self.worker)
        marks["paused"] = time.time()
        procs = dict(self.ps)
        for proc in procs.values():
            proc.signal(15)
        codes = {i: proc.wait(60) for i, proc in procs.items()}
        if any(codes.values()):
            raise RuntimeError(f"a PS did not exit 0 on SIGTERM: {codes}")
        marks["ps_down"] = time.time()
        self.stub().ResizePS(pb.ResizePSRequest(num_ps=target), timeout=10)
        # the old indices restore their checkpoints; only once they registered do the new
        # ones start (empty): a PS that left --num-ps out sends the count it read at its
        # start, and one whose restore outlasted the first moves to a new index was refused
        # for good (reported in docs/benchmarks.md, "Live PS resize")
        old = [self._restart(i, procs) for i in range(phase.before)]
        for i, proc in enumerate(old):
            self.ps[i] = self.launcher.wait_ready(proc)
        self._wait("the old PS to register", lambda: self._registered(range(phase.before)))
        marks["old_ps_registered"] = time.time()
        new = {i: self._start_ps(i, wait=False) for i in range(phase.before, target)}
        for i, proc in new.items():
            self.ps[i] = self.launcher.wait_ready(proc)
        marks["ps_up"] = time.time()
        self._await_finished(phase)
        marks["resize_finished"] = phase.resize_finished
        self._await_leavers(phase)
        marks["leavers_gone"] = time.time()
        phase.rows_after = self.rows("emb")
        (self.control / "pause").unlink()
        marks["resumed"] = time.time()
        # the worker removes `paused` once its first step after the resume was answered
        self._wait("the worker's first step after the resume",
                   lambda: not (self.control / "paused").exists(), watch=self.worker)
        marks["first_step"] = phase.finished = time.time()
        return phase

    def _restart(self, index: int, procs: dict[int, PSProc]) -> PSProc:
        """PS `index` started again from its checkpoint directory (a new one: empty)."""
        proc = procs.get(index)
        if proc is None:
            return self._start_ps(index, wait=False)
        proc.leave_num_ps_out()  # the layout says (it may have changed since)
        proc.ready = None  # started now; the caller waits for its line (all in parallel)
        proc.start()
        proc.ready = PS_LISTENING
        return proc

    def _registered(self, indices) -> bool:
        listed = self.stub().ListPS(pb.ListPSRequest(), timeout=5)
        at = {p.index: p.data_address for p in [*listed.ps, *listed.joining]}
        return all(at.get(i) == self.ps[i].data_address for i in indices)

    def _await_finished(self, phase: Phase, timeout: float = 300.0) -> None:
        def finished() -> bool:
            for event in self._read_events():
                t = event.time_ms / 1000
                phase.events.append((event.kind, t, event.detail))
                if event.kind == "ps_slots_moved":
                    m = MOVED.search(event.detail)
                    if m:
                        phase.slots_moved += int(m["slots"])
                        phase.move_seconds += float(m["seconds"])
                        phase.move_batches += 1
                elif event.kind == "ps_resize_finished":
                    phase.resize_finished = t
            return bool(phase.resize_finished)

        self._wait(f"ps_resize_finished ({phase.before} -> {phase.after} PS)", finished,
                   timeout=timeout, poll=0.05)

    def _await_leavers(self, phase: Phase) -> None:
        for i in [i for i in self.ps if i >= phase.after]:
            proc = self.ps.pop(i)
            phase.exit_codes[i] = proc.wait(60)

    def _read_events(self) -> list:
        events = self.master.events(since=self._since)
        kept = [e for e in events if e.seq > self._since]
        if events:
            self._since = max(e.seq for e in events)
        return [e for e in kept if e.kind.startswith("ps_")]

    # -- what the PS hold ----------------------------------------------------------------------

    def rows(self, table: str) -> int:
        total = 0
        for proc in self.ps.values():
            with auth.channel(proc.grpc_address) as channel:
                status = ps_pb2_grpc.ParameterServerStub(channel).GetPSStatus(
                    ps_pb2.GetPSStatusRequest(), timeout=10)
            total += sum(t.rows for t in status.tables if t.spec.name == table)
        return total

    def stub(self):
        return self.master.stub()

    @staticmethod
    def _wait(what: str, predicate, timeout: float = 120.0, watch=None,
              poll: float = 0.02) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if watch is not None and not watch.alive:
                raise RuntimeError(f"{watch.name} exited ({watch.returncode}) while waiting "
                                   f"for {what}:\n{watch.output(tail=3000)}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
            time.sleep(poll)
