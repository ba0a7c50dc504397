"""What security costs: the same calls with no security, with the token only, and with TLS +
the token (gRPC over TLS, the data plane encrypted with CURVE), side by side.

    python scripts/bench_security.py                       # defaults: 1M and 8M parameters
    python scripts/bench_security.py --seconds 1 --rounds 1 --sizes 1M   # a quick look

Data plane: one `DataClient` in this process loops `pull` all + `push` a gradient of the same
size against a real `python -m ps --standalone`, over TCP and over the same-host socket (a PS
under TLS serves none, so its "same-host" rows go over TCP too).
Control plane: one client thread loops `ListPS` (cheap: what is measured is the call) against a
real `python -m master`. The three modes run one after another in every round, and the rounds
alternate them again, so they share the machine's conditions. Certificates are made at run time.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.ps.model import parse_size
from benchmarks.report import git_commit, machine, write_json
from cluster.certs import make_tls_files
from cluster.launch import Launcher
from protos import master_pb2, master_pb2_grpc, ps_pb2, ps_pb2_grpc
from rpckit import auth
from worker_sdk.ps.data_client import DataClient

TOKEN = "bench-token-0123456789abcdef"
MODES = ("plain", "token", "tls+token")


def _flags(mode: str, tls) -> tuple[str, ...]:
    flags: tuple[str, ...] = ()
    if mode != "plain":
        flags += ("--auth-token", TOKEN)
    if mode == "tls+token":
        flags += ("--tls-cert", tls.cert, "--tls-key", tls.key)
    return flags


def _client_kw(mode: str, tls) -> dict:
    return {"token": TOKEN if mode != "plain" else "",
            "tls_ca": tls.ca if mode == "tls+token" else ""}


def _rate(step, seconds: float) -> float:
    for _ in range(3):
        step()
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        count += 1
    return count / (time.perf_counter() - start)


def _start_ps(launcher: Launcher, mode: str, tls, tag: str):
    """A fresh standalone PS in `mode`: (proc, data address, CURVE key, token)."""
    ps = launcher.ps(None, *_flags(mode, tls), "--checkpoint-interval", "0",
                     checkpoint_dir=f"ckpt-{tag}-{mode.replace('+', '-')}")
    kw = _client_kw(mode, tls)
    with auth.channel(ps.grpc_address, tls_ca=kw["tls_ca"], token=kw["token"]) as ch:
        key = ps_pb2_grpc.ParameterServerStub(ch).GetPSStatus(
            ps_pb2.GetPSStatusRequest(), timeout=10).data_public_key
    return ps, ps.data_address, key, kw["token"]


def data_plane(launcher: Launcher, tls, sizes: list[int], seconds: float, rounds: int) -> list:
    rows = []
    for size in sizes:
        # a PS holds the model of its first InitParameters: fresh ones for each size
        servers = {mode: _start_ps(launcher, mode, tls, str(size)) for mode in MODES}
        model = {"w0": torch.zeros(size // 2), "w1": torch.zeros(size - size // 2)}
        grads = {n: torch.full_like(t, 1e-6) for n, t in model.items()}
        for transport in ("tcp", "same-host"):
            rates: dict[str, list[float]] = {m: [] for m in MODES}
            for r in range(rounds):
                order = MODES if r % 2 == 0 else tuple(reversed(MODES))
                for mode in order:
                    _, endpoint, key, token = servers[mode]
                    with DataClient([endpoint], server_keys=[key], auth_token=token, tls_ca="",
                                    timeout_s=60, same_host=transport == "same-host") as c:
                        c.init_parameters(model, "sgd", lr=0.0)  # the first call wins

                        def step() -> None:
                            c.pull()
                            c.push(grads)

                        rates[mode].append(_rate(step, seconds))
            mb = 2 * 4 * size / 1e6
            for mode in MODES:
                median = statistics.median(rates[mode])
                rows.append({"plane": "data", "size": size, "transport": transport,
                             "mode": mode, "steps_per_s": median, "MB_per_s": median * mb,
                             "vs_plain": median / statistics.median(rates["plain"]),
                             "rounds": rates[mode]})
        for proc, *_ in servers.values():
            proc.kill()
    return rows


def control_plane(launcher: Launcher, tls, seconds: float, rounds: int) -> list:
    masters = {m: launcher.master(*_flags(m, tls), name=f"master-{m.replace('+', '-')}")
               for m in MODES}
    rates: dict[str, list[float]] = {m: [] for m in MODES}
    for r in range(rounds):
        for mode in (MODES if r % 2 == 0 else tuple(reversed(MODES))):
            kw = _client_kw(mode, tls)
            with auth.channel(masters[mode].address, tls_ca=kw["tls_ca"],
                              token=kw["token"]) as ch:
                stub = master_pb2_grpc.MasterStub(ch)
                rates[mode].append(_rate(
                    lambda: stub.ListPS(master_pb2.ListPSRequest(), timeout=10), seconds))
    return [{"plane": "control", "call": "ListPS", "mode": m,
             "calls_per_s": statistics.median(rates[m]),
             "vs_plain": statistics.median(rates[m]) / statistics.median(rates["plain"]),
             "rounds": rates[m]} for m in MODES]


def report(rows: list) -> str:
    lines = ["plane    size      transport  mode        rate            vs plain"]
    for row in rows:
        if row["plane"] == "data":
            lines.append(f"data     {row['size']:>9,}  {row['transport']:<9}  {row['mode']:<10}  "
                         f"{row['steps_per_s']:7.1f} steps/s ({row['MB_per_s']:6.0f} MB/s)  "
                         f"{row['vs_plain']:.2f}")
        else:
            lines.append(f"control  ListPS     {'':<9}  {row['mode']:<10}  "
                         f"{row['calls_per_s']:7.0f} calls/s  {row['vs_plain']:.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sizes", default="1M,8M", help="model sizes in parameters (comma-separated)")
    p.add_argument("--seconds", type=float, default=3.0, help="seconds per measurement")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds (median kept)")
    p.add_argument("--out", default="", help="write the results as JSON here")
    args = p.parse_args(argv)
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    print(f"{machine()}; commit {git_commit('rpckit')}", flush=True)
    with tempfile.TemporaryDirectory() as tmp, Launcher(Path(tmp) / "procs") as launcher:
        tls = make_tls_files(Path(tmp) / "tls")
        rows = data_plane(launcher, tls, sizes, args.seconds, args.rounds)
        rows += control_plane(launcher, tls, args.seconds, args.rounds)
    print(report(rows))
    if args.out:
        write_json(args.out, {"machine": machine(), "rows": rows})
