"""`elastic-job`: run a job from its spec, simulate the policy against a market trace, or print
the Kubernetes objects the kubernetes engine starts from. One function per subcommand.

    elastic-job run job.yaml [--json PATH] [--tls-cert C --tls-key K] [--tls-ca CA]
                [--auth-token-file F]
    elastic-job simulate job.yaml --trace TRACE.csv --records N [--json PATH]
                [--worker-rps X --ps-capacity-rps Y | --bench-train BENCH.json]
    elastic-job manifests job.yaml [--token TOKEN]

A bad spec or trace exits 2 with a message naming the field (or the row and column), before
anything starts.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
from pathlib import Path

from engines.markets import MarketTrace, TraceError

from .errors import SpecError
from .options import check_trace
from .spec import JobSpec, load_spec

MAX_RECORDS = 1 << 50


class UsageError(Exception):
    """A command line that cannot run; exit 2 with the message."""


def _spec(path: str) -> JobSpec:
    try:
        return load_spec(path)
    except SpecError as e:
        raise UsageError(f"{path}: {e}") from None


def run_job(args) -> int:
    spec = _spec(args.spec)  # a bad spec exits 2 before anything starts
    if spec.engine == "kubernetes":  # its masters run in the cluster, not on this machine
        raise UsageError(f"run: engine kubernetes starts in the cluster: elastic-job manifests "
                         f"{args.spec} | kubectl apply -f -")
    if spec.engine == "ray" and importlib.util.find_spec("ray") is None:
        raise UsageError("run: engine 'ray' needs Ray: pip install 'elastic-ps[ray]'")
    from .run import run_job as run  # the engine and gRPC only when asked for
    from .run import stored_job_problem

    security = _run_security(args)
    problem = stored_job_problem(spec)
    if problem:
        raise UsageError(f"run: {problem}")
    return run(args.spec, args.json, security=security)


def _run_security(args):
    """The masters' TLS and token flags, checked as the master would (exit 2, before anything
    starts); paths made absolute, as the masters run in the job's folder."""
    from types import SimpleNamespace

    from rpckit import auth

    from .run import RunSecurity

    paths = {k: str(Path(v).resolve()) if v else "" for k, v in (
        ("tls_cert", args.tls_cert), ("tls_key", args.tls_key), ("tls_ca", args.tls_ca),
        ("token_file", args.auth_token_file))}
    problems = auth.flag_problems(SimpleNamespace(
        auth_token="", auth_token_file=paths["token_file"], tls_cert=paths["tls_cert"],
        tls_key=paths["tls_key"], tls_ca=paths["tls_ca"]))
    if paths["tls_cert"] and not paths["tls_ca"]:
        problems.append("--tls-cert needs --tls-ca: elastic-job, the PS and the workers verify "
                        "the masters against it")
    if paths["tls_ca"] and not paths["tls_cert"]:
        problems.append("--tls-ca without --tls-cert: the masters would serve plaintext")
    if problems:
        raise UsageError("run: " + "; ".join(problems))
    return RunSecurity(**paths)


MAX_TOKEN = 4096


def manifests(args) -> int:
    from .manifests import manifests as objects, render  # yaml only, no client

    spec = _spec(args.spec)
    token = args.token
    if token is not None and not (16 <= len(token) <= MAX_TOKEN and token.isprintable()
                                  and not any(c.isspace() for c in token)):
        raise UsageError(f"--token must be 16 to {MAX_TOKEN} printable characters, no spaces")
    try:
        print(render(objects(spec, Path(args.spec).read_text(), token)), end="")
    except SpecError as e:
        raise UsageError(f"{args.spec}: {e}") from None
    return 0


def simulate_job(args) -> int:
    from . import simulate as sim  # the simulator only when asked for

    spec = _spec(args.spec)
    try:
        trace = MarketTrace.load(args.trace)
        check_trace("--trace", trace, spec.workers.market_names)
    except TraceError as e:
        raise UsageError(f"--trace {args.trace}: {e}") from None
    except SpecError as e:
        raise UsageError(f"{args.trace}: {e}") from None
    worker_rps, ps_rps = _speeds(args)
    if not 1 <= args.records <= MAX_RECORDS:
        raise UsageError(f"--records is {args.records}; give 1 to {MAX_RECORDS}")
    model = sim.Model(worker_rps=worker_rps, ps_capacity_rps=ps_rps,
                      startup_s=_positive("--startup-s", args.startup_s, zero_ok=True),
                      preempt_grace_s=_positive("--preempt-grace-s", args.preempt_grace_s,
                                                zero_ok=True),
                      max_hours=_positive("--max-hours", args.max_hours))
    try:
        policy, baselines = sim.compare(spec, trace, args.records, model)
    except SpecError as e:
        raise UsageError(f"{args.spec}: {e}") from None
    print(sim.table(spec, args.records, model, policy, baselines))
    if args.json:
        doc = {"policy": policy.as_result(),
               "baselines": {name: o.as_result() for name, o in baselines.items()}}
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    return 0


def _positive(flag: str, value: float, *, zero_ok: bool = False) -> float:
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        raise UsageError(f"{flag} is {value:g}; give a number above 0")
    return value


def _speeds(args) -> tuple[float, float]:
    """Per-worker records/s and per-PS capacity: from the flags, else from a bench_train JSON."""
    worker, ps = args.worker_rps, args.ps_capacity_rps
    if args.bench_train:
        from .bench import speeds_from_bench_train

        try:
            got_worker, got_ps = speeds_from_bench_train(args.bench_train)
        except ValueError as e:
            raise UsageError(f"--bench-train {args.bench_train}: {e}") from None
        worker = got_worker if worker is None else worker
        ps = got_ps if ps is None else ps
    if worker is None or ps is None:
        raise UsageError("simulate needs --worker-rps and --ps-capacity-rps (records/s), or "
                         "--bench-train with a bench_train --json file")
    return _positive("--worker-rps", worker), _positive("--ps-capacity-rps", ps)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="elastic-job", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="start the master through the engine and drive the job "
                         "to its end")
    run.add_argument("spec", help="the job spec (YAML)")
    run.add_argument("--json", help="also write the summary here")
    run.add_argument("--tls-cert", default="", help="the masters serve gRPC over TLS with this "
                     "PEM certificate (with --tls-key and --tls-ca)")
    run.add_argument("--tls-key", default="", help="the PEM private key of --tls-cert")
    run.add_argument("--tls-ca", default="", help="the PEM CA that signed it: given to the PS "
                     "and workers the masters launch, and used by this command")
    run.add_argument("--auth-token-file", default="", help="the job's token (first line of "
                     "this file): required by the masters, passed on to the PS and workers")
    run.set_defaults(fn=run_job)
    s = sub.add_parser("simulate", help="the policy and fixed baselines on a simulated clock "
                       "against a market trace")
    s.add_argument("spec", help="the job spec (YAML)")
    s.add_argument("--trace", required=True, help="market trace CSV (t_s,market,capacity)")
    s.add_argument("--records", required=True, type=int, help="records the job trains")
    s.add_argument("--json", help='write {"policy": R, "baselines": {NAME: R}} here')
    s.add_argument("--worker-rps", type=float, help="records/s one worker makes")
    s.add_argument("--ps-capacity-rps", type=float,
                   help="records/s one PS serves at full CPU (the set: this times its size)")
    s.add_argument("--bench-train", help="take both speeds from a bench_train --json file "
                   "(its elastic-1w runs)")
    s.add_argument("--startup-s", type=float, default=30.0,
                   help="seconds from a launch to a running process (default %(default)s)")
    s.add_argument("--preempt-grace-s", type=float, default=30.0,
                   help="seconds from a preemption notice to SIGKILL (default %(default)s)")
    s.add_argument("--max-hours", type=float, default=72.0,
                   help="give up on a run after this many simulated hours (default "
                        "%(default)s)")
    s.set_defaults(fn=simulate_job)
    m = sub.add_parser("manifests", help="the Kubernetes objects the kubernetes engine creates "
                       "first, as YAML")
    m.add_argument("spec", help="the job spec (YAML; engine: kubernetes)")
    m.add_argument("--token", help="the job's token in its Secret (default: a new random one)")
    m.set_defaults(fn=manifests)
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    try:
        code = args.fn(args)
    except UsageError as e:
        print(f"elastic-job: {e}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)


if __name__ == "__main__":
    main()
