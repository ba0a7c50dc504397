"""Where the masters of `elastic-job run` listen comes from the job's engine (`reserve`), not
from the command: every master gets the host the engine gives and a port of its own, and
every master's command names all of them (`--job-masters`, what the processes they launch
are given). The local engine's host is the loopback unless told otherwise; the Ray engine's,
its node's address as Ray lists it, is tested in tests/engines/test_ray.py. Nothing is
launched here: the commands are read before any start."""
from __future__ import annotations

import yaml

from engines import process
from engines.local import LocalEngine
from master.job.run import JobRun

from .jobs import write_spec


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_the_masters_listen_where_the_engine_puts_them(tmp_path):
    spec = write_spec(tmp_path, standbys=2)
    # another name for the loopback: the masters' host can only be the engine's
    job = JobRun(str(spec), out=lambda _: None,
                 engine=LocalEngine(tmp_path / "masters", host="localhost"))
    try:
        hosts = [h for h, _ in job.places]
        ports = [p for _, p in job.places]
        assert job.names == ["master", "master-standby1", "master-standby2"]
        assert hosts == ["localhost"] * 3 and len(set(ports)) == 3 and all(ports)
        assert job.addresses == [f"localhost:{p}" for p in ports]
        for n in range(3):
            argv = job.master_argv(n)
            assert argv[1:3] == ["-m", "master"]
            assert (flag(argv, "--host"), flag(argv, "--port")) == ("localhost", str(ports[n]))
            assert flag(argv, "--job-masters") == ",".join(job.addresses)
            assert "127.0.0.1" not in argv
    finally:
        job.close()


def test_a_fixed_master_port_goes_to_the_first_and_the_default_engine_gives_the_loopback(
        tmp_path):
    (port,) = process.free_ports("127.0.0.1", 1)
    path = write_spec(tmp_path, standbys=1)
    spec = yaml.safe_load(path.read_text())
    spec["master"]["port"] = port
    path.write_text(yaml.safe_dump(spec))
    job = JobRun(str(path), out=lambda _: None)
    try:
        assert isinstance(job.engine, LocalEngine)
        assert job.places[0] == ("127.0.0.1", port)
        assert job.places[1][0] == "127.0.0.1" and job.places[1][1] not in (0, port)
    finally:
        job.close()
