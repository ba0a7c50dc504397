"""A job's spec (`job.yaml`): typed, frozen, and validated whole before anything starts.

`load_spec(path)` / `parse_spec(dict)` return a `JobSpec` or raise `SpecError(field, message)`
naming the field by its dotted path (`workers.markets[1].price`), so `elastic-job` can exit 2
with a message that points at the line to fix. The names and defaults are DESIGN.md's
"Contract, round 4"; docs/operations.md explains each knob.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import yaml

from .errors import SpecError
from .fields import Fields, kind, text, words
from .options import engine_options

ENGINES = ("local", "ray", "kubernetes")
MAX_NAME = 63             # a job name becomes part of process, pod and Ray actor names
MAX_WORKERS = 10_000
MAX_PS = 1024             # master/limits.py MAX_NUM_PS
MAX_MARKETS = 32
MAX_PRICE = 1e6           # per process-hour
MAX_SECONDS = 7 * 86400.0
MAX_DEADLINE_H = 365 * 24.0
MAX_SPEC_BYTES = 1 << 20
# The master sets these for every worker it launches (DESIGN, round 4); a spec may not.
RESERVED_ENV = ("ELASTIC_PS_MASTER", "ELASTIC_PS_WORKER_NAME", "ELASTIC_PS_LABELS")

_NAME = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")   # a DNS label: usable on every engine
_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class MarketSpec:
    name: str
    price: float  # per process-hour


@dataclass(frozen=True)
class MasterSpec:
    db: str = "sqlite:///master.db"
    port: int = 50051      # 0 = any free port
    standbys: int = 0


@dataclass(frozen=True)
class PSSpec:
    count: int = 1
    min: int = 1
    max: int = 1
    replicas: int = 0
    market: str = ""       # resolved by parse_spec: the last (most reliable) worker market
    args: tuple[str, ...] = ()


@dataclass(frozen=True)
class WorkerSpec:
    command: tuple[str, ...]
    markets: tuple[MarketSpec, ...]
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    min: int = 1
    max: int = 1

    def price(self, market: str) -> float:
        for m in self.markets:
            if m.name == market:
                return m.price
        raise KeyError(market)

    @cached_property
    def market_names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.markets)


@dataclass(frozen=True)
class ScalingSpec:
    interval_s: float = 10.0
    min_gain: float = 0.2
    ps_hot_cpu: float = 0.9
    ps_cold_cpu: float = 0.3
    ps_hot_intervals: int = 3
    ps_cooldown_s: float = 300.0
    budget_per_hour: float = 0.0   # 0 = no budget
    spot_wait_s: float = 60.0
    # An extension of the round-4 contract: hours from the job's start by which it must finish
    # (0 = none). While the job is ahead of the uniform-progress line toward it, workers the
    # first market takes away are not replaced on a later one (master/scaling/pace.py).
    deadline_h: float = 0.0


@dataclass(frozen=True)
class JobSpec:
    name: str
    engine: str
    workers: WorkerSpec
    engine_options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    master: MasterSpec = MasterSpec()
    ps: PSSpec = PSSpec()
    scaling: ScalingSpec = ScalingSpec()

    def fixed_cost_per_hour(self, ps_count: int | None = None) -> float:
        """The master, its standbys and the PS set, all on `ps.market`."""
        count = self.ps.count if ps_count is None else ps_count
        return (1 + self.master.standbys + count) * self.workers.price(self.ps.market)

    def floor_cost_per_hour(self) -> float:
        """The least the policy may be held to: ps.max PS and workers.min on the dearest market
        (a fallback may put every worker there); a budget below it could not keep the floors."""
        dearest = max(m.price for m in self.workers.markets)
        return self.fixed_cost_per_hour(self.ps.max) + self.workers.min * dearest


# ---- the sections

def _markets(where: str, value: Any) -> tuple[MarketSpec, ...]:
    if not isinstance(value, list) or not value:
        raise SpecError(where, "must be a non-empty list of {name, price}, first preferred")
    if len(value) > MAX_MARKETS:
        raise SpecError(where, f"has {len(value)} markets; at most {MAX_MARKETS}")
    markets, seen = [], set()
    for i, item in enumerate(value):
        f = Fields(f"{where}[{i}]", item)
        name = f.text("name", required=True, pattern=_NAME,
                      hint="must be lower-case letters, digits and '-' (e.g. spot, on-demand)")
        if name in seen:
            raise SpecError(f.at("name"), f"market {name!r} is listed twice")
        seen.add(name)
        price = f.number("price", None, 0.0, MAX_PRICE, required=True)
        f.done()
        markets.append(MarketSpec(name, price))
    return tuple(markets)


def _env(where: str, value: Any) -> Mapping[str, str]:
    f = Fields(where, value)
    env = {}
    for key, item in f.raw.items():
        at = f.at(key)
        if not _ENV.fullmatch(key):
            raise SpecError(at, "is not a variable name (letters, digits, _; not a digit first)")
        if key in RESERVED_ENV:
            raise SpecError(at, "is set by the master for every worker it launches")
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise SpecError(at, f"must be a string or a number, got {kind(item)}")
        env[key] = text(at, str(item)) if str(item) else ""
    return MappingProxyType(env)


def _workers(value: Any) -> WorkerSpec:
    f = Fields("workers", value)
    command = words(f.at("command"), f.get("command", required=True), empty_ok=False)
    env = _env(f.at("env"), f.get("env"))
    lo = f.integer("min", 1, 0, MAX_WORKERS)
    hi = f.integer("max", max(lo, 1), 1, MAX_WORKERS)
    if lo > hi:
        raise SpecError(f.at("min"), f"is {lo}, above workers.max ({hi})")
    markets = _markets(f.at("markets"), f.get("markets", required=True))
    f.done()
    return WorkerSpec(command=command, env=env, min=lo, max=hi, markets=markets)


def _ps(value: Any, markets: tuple[str, ...]) -> PSSpec:
    f = Fields("ps", value)
    count = f.integer("count", 1, 1, MAX_PS)
    lo = f.integer("min", min(count, 1), 1, MAX_PS)
    hi = f.integer("max", max(count, lo), 1, MAX_PS)
    if lo > hi:
        raise SpecError(f.at("min"), f"is {lo}, above ps.max ({hi})")
    if not lo <= count <= hi:
        raise SpecError(f.at("count"), f"is {count}; must be in [ps.min, ps.max] = [{lo}, {hi}]")
    replicas = f.integer("replicas", 0, 0, 1)
    market = f.text("market", markets[-1])
    if market not in markets:
        raise SpecError(f.at("market"), f"unknown market {market!r}; workers.markets lists "
                                        f"{', '.join(markets)}")
    args = words(f.at("args"), f.get("args"), empty_ok=True)
    f.done()
    return PSSpec(count=count, min=lo, max=hi, replicas=replicas, market=market, args=args)


def _master(value: Any) -> MasterSpec:
    f = Fields("master", value)
    spec = MasterSpec(db=f.text("db", MasterSpec.db),
                      port=f.integer("port", MasterSpec.port, 0, 65535),
                      standbys=f.integer("standbys", 0, 0, 8))
    f.done()
    return spec


def _scaling(value: Any) -> ScalingSpec:
    f, d = Fields("scaling", value), ScalingSpec()
    spec = ScalingSpec(
        interval_s=f.number("interval_s", d.interval_s, 0.0, 3600.0, above_lo=True),
        min_gain=f.number("min_gain", d.min_gain, 0.0, 1.0),
        ps_hot_cpu=f.number("ps_hot_cpu", d.ps_hot_cpu, 0.0, 1.0, above_lo=True),
        ps_cold_cpu=f.number("ps_cold_cpu", d.ps_cold_cpu, 0.0, 1.0),
        ps_hot_intervals=f.integer("ps_hot_intervals", d.ps_hot_intervals, 1, 1000),
        ps_cooldown_s=f.number("ps_cooldown_s", d.ps_cooldown_s, 0.0, MAX_SECONDS),
        budget_per_hour=f.number("budget_per_hour", d.budget_per_hour, 0.0, MAX_PRICE * 1e3),
        spot_wait_s=f.number("spot_wait_s", d.spot_wait_s, 0.0, MAX_SECONDS),
        deadline_h=f.number("deadline_h", d.deadline_h, 0.0, MAX_DEADLINE_H),
    )
    if spec.ps_cold_cpu >= spec.ps_hot_cpu:
        raise SpecError(f.at("ps_cold_cpu"), f"is {spec.ps_cold_cpu:g}; must be below "
                                             f"scaling.ps_hot_cpu ({spec.ps_hot_cpu:g})")
    f.done()
    return spec


def parse_spec(data: Any, base_dir: Path | str | None = None) -> JobSpec:
    """The JobSpec a parsed YAML document describes; relative paths in engine_options are
    taken from `base_dir` (the spec file's folder)."""
    f = Fields("", data)
    name = f.text("name", required=True, pattern=_NAME,
                  hint=f"must be 1-{MAX_NAME} lower-case letters, digits and '-'")
    if len(name) > MAX_NAME:
        raise SpecError("name", f"is {len(name)} characters; at most {MAX_NAME}")
    engine = f.text("engine", "local")
    if engine not in ENGINES:
        raise SpecError("engine", f"unknown engine {engine!r}; one of {', '.join(ENGINES)}")
    workers = _workers(f.get("workers", required=True))
    spec = JobSpec(
        name=name, engine=engine, workers=workers,
        engine_options=engine_options(engine, f.get("engine_options"), workers.market_names,
                                      base_dir),
        master=_master(f.get("master")),
        ps=_ps(f.get("ps"), workers.market_names),
        scaling=_scaling(f.get("scaling")),
    )
    f.done()
    budget = spec.scaling.budget_per_hour
    if budget and budget < spec.floor_cost_per_hour():
        raise SpecError("scaling.budget_per_hour", (
            f"is {budget:g}; holding ps.max PS, the master and workers.min workers on the "
            f"dearest market costs {spec.floor_cost_per_hour():g} per hour (raise it, or 0 = "
            "no budget)"))
    return spec


class _DuplicateKey(Exception):
    pass


class _StrictLoader(yaml.SafeLoader):
    """yaml.safe_load's loader, refusing a key given twice in one mapping (YAML keeps the last,
    so a second `scaling:` block would silently replace the first)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *anchor`: the keys written beside it override the merged ones
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str) and key in seen:
                raise _DuplicateKey(f"line {key_node.start_mark.line + 1}: {key!r} is given "
                                    "twice in the same mapping")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_spec(path: Path | str) -> JobSpec:
    """Read and validate a job.yaml; SpecError names the field (or `(file)` when unreadable)."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_SPEC_BYTES:
            raise SpecError("(file)", f"{path} is over {MAX_SPEC_BYTES} bytes; a job spec is "
                                      "a page of YAML")
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError("(file)", f"cannot read {path}: {e}") from None
    try:
        data = yaml.load(text, Loader=_StrictLoader)
    except _DuplicateKey as e:
        raise SpecError("(file)", f"{path}: {e}") from None
    except yaml.YAMLError as e:
        raise SpecError("(file)", f"{path} is not YAML: {e}") from None
    return parse_spec(data, path.parent)
