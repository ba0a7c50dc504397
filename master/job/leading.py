"""A leader's job, when its master was started with one (`elastic-master --job job.yaml`):
read the job's durable record (or begin it from the spec), make its engine, adopt what runs,
and start driving. A master without `--job` calls nothing here and launches nothing.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import yaml

from engines.local import LocalEngine

from .book import JobBook
from .commands import Security
from .driver import JobDriver
from .spec import load_spec, parse_spec

log = logging.getLogger(__name__)
STOP_GRACE_S = 30.0


def make_engine(spec, workdir: Path, started_s: float):
    """The engine the spec names (one of spec.ENGINES: parse_spec refuses any other), its
    market clock counting from `started_s`."""
    if spec.engine == "kubernetes":
        from engines.kubernetes import in_cluster  # the client only when asked for

        return in_cluster(spec.name, spec.engine_options, workdir=str(workdir),
                          stop_grace_s=STOP_GRACE_S, hold_s=spec.scaling.spot_wait_s)
    if spec.engine == "ray":
        return ray_engine(spec, workdir, stop_grace_s=STOP_GRACE_S)
    capacity = None
    if spec.engine_options.get("market_trace"):
        from engines.markets import MarketTrace
        capacity = MarketTrace.load(spec.engine_options["market_trace"]).capacity
    return local_engine(spec, workdir, capacity=capacity, started_s=started_s)


def local_engine(spec, workdir: Path, capacity=None, started_s: float | None = None):
    """engine: local, its markets limited by `capacity` (None: no limit)."""
    grace = float(spec.engine_options.get("preempt_grace_s", 30.0))
    # a stop the job asks for waits at least STOP_GRACE_S: a PS writes its final checkpoint
    return LocalEngine(workdir, capacity=capacity, started_s=started_s,
                       preempt_grace_s=grace, stop_grace_s=max(grace, STOP_GRACE_S))


def ray_engine(spec, workdir: Path, stop_grace_s: float = STOP_GRACE_S):
    """engine: ray (the `ray` extra; imported only when a spec asks for it)."""
    from engines.ray import RayEngine

    options = spec.engine_options
    return RayEngine(workdir, address=options["address"],
                     market_label=options["market_label"], stop_grace_s=stop_grace_s)


def stored_spec(path: str) -> str:
    """What the job row keeps of a spec file: its text and folder (relative paths in it)."""
    source = Path(path).resolve()
    return json.dumps({"text": source.read_text(), "base_dir": str(source.parent)})


def spec_of(stored: str):
    data = json.loads(stored)
    return parse_spec(yaml.safe_load(data["text"]), data["base_dir"])


def start_driver(settings, store, core, committer, address: str) -> JobDriver | None:
    """The running driver of this leader's job, or None when the master has no job."""
    if not settings.job:
        return None
    row, procs = store.job()
    if row is None:
        load_spec(settings.job)  # checked before anything is written (elastic-job did too)
        text = stored_spec(settings.job)
    else:
        text = row["spec"]  # the job as it began: a leader that takes over continues it
    spec = spec_of(text)
    masters = settings.job_masters or address

    def open_book() -> JobBook:
        book = JobBook(core.journal, row, procs)
        if not book.exists:
            book.begin(spec.name, text, masters)
        return book

    book = committer.call(open_book)
    workdir = Path(settings.job_dir or Path(settings.job).resolve().parent / f"{spec.name}-run")
    engine = make_engine(spec, workdir, book.started_ms / 1000)
    security = Security(tls_ca=settings.tls_ca, token_file=settings.auth_token_file)
    # the masters' addresses as elastic-job gave them to this master: a standby has the same
    # list as the leader before it, a new elastic-job run on a job still running a new one
    driver = JobDriver(spec, core, committer, book, engine,
                       masters=settings.job_masters or book.masters or masters,
                       workdir=workdir, security=security)
    driver.adopt()
    log.info("job %s: driving (%s engine, state %s, logs in %s)", spec.name, spec.engine,
             book.state, workdir)
    return driver.start()
