"""What the master launches for a job: each role's command line and environment.

Workers run the spec's command with `ELASTIC_PS_MASTER` (every master of the job),
`ELASTIC_PS_WORKER_NAME` (the process's name) and `ELASTIC_PS_LABELS=market=NAME`, so the
SDK registers where it runs and `elastic-ctl cost` prices it (DESIGN, round 4). A PS is
`python -m ps` registered with the masters under its index, listening where the engine says
(its `ps_host_flags`); the first PS set of a job is told its size (`--num-ps`), a later PS
takes the master's layout.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from engines import process


@dataclass(frozen=True)
class Security:
    """What a launched process needs to reach a master started with TLS or a token."""

    tls_ca: str = ""
    token_file: str = ""

    def env(self) -> dict[str, str]:
        out = {}
        if self.tls_ca:
            out["ELASTIC_PS_TLS_CA"] = self.tls_ca
        if self.token_file:
            out["ELASTIC_PS_AUTH_TOKEN_FILE"] = self.token_file
        return out

    def ps_flags(self) -> list[str]:
        return ["--auth-token-file", self.token_file] if self.token_file else []


def worker(spec, name: str, market: str, masters: str,
           security: Security = Security()) -> tuple[list[str], dict[str, str]]:
    env = {**dict(spec.workers.env), **security.env(), "ELASTIC_PS_MASTER": masters,
           "ELASTIC_PS_WORKER_NAME": name, "ELASTIC_PS_LABELS": f"market={market}"}
    return list(spec.workers.command), process.clean_env(env)


def ps(spec, name: str, index: int, masters: str, workdir: Path, *, host_flags: list[str],
       num_ps: int = 0, security: Security = Security()) -> tuple[list[str], dict[str, str]]:
    """`host_flags`: where it listens and what it advertises, the engine's `ps_host_flags`
    (the local engine: this machine's loopback; Ray: the node's address; Kubernetes: every
    address, advertising the pod's IP); `num_ps`: the PS set's size for the job's first PS set
    (0: the master's layout says).
    Without replicas every process of an index restores from the index's checkpoints; with
    them each has its own (a backup copies its primary)."""
    ckpt = workdir / (f"ps{index}-ckpt" if not spec.ps.replicas else f"{name}-ckpt")
    if not host_flags:
        raise ValueError(f"{name}: the engine gave no address for the PS (ps_host_flags)")
    argv = [sys.executable, "-m", "ps", *host_flags,
            "--port", "0", "--data-port", "0",
            "--index", str(index), *(["--num-ps", str(num_ps)] if num_ps else []),
            "--checkpoint-dir", str(ckpt), "--master", masters, *security.ps_flags(),
            *spec.ps.args]
    return argv, process.clean_env(security.env())
