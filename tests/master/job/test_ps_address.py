"""Where a PS the master launches listens and what it advertises comes from the engine
(`ps_host_flags`), not from the master: the local engine's is its host (the loopback unless
told otherwise). A real driver, database and local engine launch a real PS process; its
command line is read back from the system. (The Ray engine's, its node's address as Ray lists
it, is tested in tests/engines/test_ray.py.)"""
from __future__ import annotations

import time
from pathlib import Path

from engines.local import LocalEngine
from master.job.book import JobBook
from master.job.driver import JobDriver
from master.job.leading import make_engine
from master.job.spec import parse_spec

from .test_adopt import SPEC

PS_SPEC = {**SPEC, "ps": {"count": 1}}


def argv_of(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


def test_the_local_engine_gives_the_loopback_and_the_driver_uses_what_the_engine_gives(
        tmp_path, leader_parts):
    _, core, committer = leader_parts
    spec = parse_spec(PS_SPEC)
    assert make_engine(spec, tmp_path / "default", time.time()).ps_host_flags == \
        ["--host", "127.0.0.1"]
    # another name for the loopback: what the PS gets can only be the engine's
    engine = LocalEngine(tmp_path / "run", host="localhost")
    assert engine.ps_host_flags == ["--host", "localhost"]
    book = committer.call(lambda: JobBook(core.journal))
    committer.call(lambda: book.begin("t", "{}", "127.0.0.1:1"))
    driver = JobDriver(spec, core, committer, book, engine, masters="127.0.0.1:1",
                       workdir=tmp_path / "run")
    try:
        driver.step()
        (ps,) = [h for h in engine.running() if h.role == "ps"]
        argv = argv_of(int(ps.id.split(":")[0]))
        command = argv[argv.index("ps") - 2:]  # after the engine's sh wrapper
        assert command[1:3] == ["-m", "ps"]
        assert command[3:5] == ["--host", "localhost"]
        assert "127.0.0.1" not in command[3:command.index("--master")]
    finally:
        engine.stop_all(graceful=False, timeout=20)
        engine.close()
