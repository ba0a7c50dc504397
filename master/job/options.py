"""`engine_options`: what each engine accepts, checked with the rest of the spec.

local: `market_trace` (a CSV, relative to the spec's folder; checked row by row now, so a bad
row stops the job before anything starts) and `preempt_grace_s` (SIGTERM to SIGKILL).
ray: `address` (`auto`: a running cluster, or a local one when none runs) and `market_label`
(the node label naming a node's market).
kubernetes: `namespace`, `image`, `market_selectors` (per market, the node selector its pods
get, e.g. `{spot: {node.kubernetes.io/capacity-type: spot}}`) and `resources` (per role, what
its pods request, e.g. `{worker: {cpu: "4", memory: 8Gi}}`).
"""
from __future__ import annotations

import re
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from engines.markets import MarketTrace, TraceError

from .errors import SpecError
from .fields import Fields, kind

DEFAULT_PREEMPT_GRACE_S = 30.0
ROLES = ("master", "ps", "worker")
# a Kubernetes resource name (cpu, memory, nvidia.com/gpu) and quantity (500m, 8Gi, 1.5)
_RESOURCE = re.compile(r"([a-z0-9.-]+/)?[a-z0-9]([a-z0-9-]*[a-z0-9])?")
_QUANTITY = re.compile(r"[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?")


def engine_options(engine: str, value: Any, markets: tuple[str, ...],
                   base_dir: Path | str | None) -> Mapping[str, Any]:
    f = Fields("engine_options", value)
    if engine == "local":
        options = _local(f, markets, base_dir)
    elif engine == "ray":
        options = {"address": f.text("address", "auto"),
                   "market_label": f.text("market_label", "market")}
    else:
        options = {"namespace": f.text("namespace", "default"),
                   "image": f.text("image", "elastic-ps:latest"),
                   "market_selectors": _selectors(f, markets),
                   "resources": _resources(f)}
    f.done()
    return MappingProxyType(options)


def _local(f: Fields, markets: tuple[str, ...], base_dir) -> dict:
    options = {"preempt_grace_s": f.number("preempt_grace_s", DEFAULT_PREEMPT_GRACE_S,
                                           0.0, 3600.0),
               "market_trace": None}
    raw = f.get("market_trace")
    if raw is not None:
        where = f.at("market_trace")
        path = Path(f.text("market_trace"))
        if not path.is_absolute() and base_dir is not None:
            path = Path(base_dir) / path
        options["market_trace"] = str(path)
        check_trace(where, load_trace(where, path), markets)
    return options


def load_trace(where: str, path: Path | str) -> MarketTrace:
    try:
        return MarketTrace.load(path)
    except TraceError as e:
        raise SpecError(where, f"{path}: {e}") from None


def check_trace(where: str, trace: MarketTrace, markets: tuple[str, ...]) -> None:
    """A trace naming a market the job does not list is most likely a typo: refuse it."""
    unknown = sorted(set(trace.markets) - set(markets))
    if unknown:
        raise SpecError(where, f"the trace names market {unknown[0]!r}, which workers.markets "
                               f"does not list ({', '.join(markets)})")


def _selectors(f: Fields, markets: tuple[str, ...]) -> Mapping[str, Mapping[str, str]]:
    sel = Fields(f.at("market_selectors"), f.get("market_selectors"))
    out = {}
    for market in sel.raw:
        if market not in markets:
            raise SpecError(sel.at(market), f"unknown market {market!r}; workers.markets lists "
                                            f"{', '.join(markets)}")
        labels = Fields(sel.at(market), sel.get(market))
        out[market] = MappingProxyType({k: labels.text(k) for k in labels.raw})
        labels.done()
    sel.done()
    return MappingProxyType(out)


def _resources(f: Fields) -> Mapping[str, Mapping[str, str]]:
    roles = Fields(f.at("resources"), f.get("resources"))
    out = {}
    for role in roles.raw:
        if role not in ROLES:
            raise SpecError(roles.at(role), f"unknown role {role!r}; one of {', '.join(ROLES)}")
        wants = Fields(roles.at(role), roles.get(role))
        asked = {}
        for name in wants.raw:
            value = wants.get(name)
            at = wants.at(name)
            if not _RESOURCE.fullmatch(name):
                raise SpecError(at, "is not a resource name (cpu, memory, nvidia.com/gpu, ...)")
            if isinstance(value, bool) or not isinstance(value, (str, int, float)) \
                    or not _QUANTITY.fullmatch(str(value)):
                raise SpecError(at, f"must be a quantity (e.g. 2, 500m, 8Gi), got {kind(value)}")
            asked[name] = str(value)
        wants.done()
        out[role] = MappingProxyType(asked)
    roles.done()
    return MappingProxyType(out)
