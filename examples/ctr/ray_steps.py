"""The Ray demo's steps (examples/ctr/schedule.py runs them) and what they claim.

    25 %  drain the spot node for preemption (Ray's DrainNode, reason preemption, a deadline):
          its workers get the notice (SIGTERM) and hand their leases back exactly; the master
          replaces them on on-demand (spot admits no launch now)
     --   right after: the drained node is removed (the cloud took it)
    55 %  a new spot node joins: the master moves the workers back to spot (the on-demand ones
          hand back, new ones start on spot)

Each step's `check` reads the master (GetPlan: what runs where and how it ended; GetStatus:
which worker is which; GetLeases: who trained what); `claims` reads the same at the end.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from examples.ctr.schedule import Step, StepFailed
from examples.ctr.steps import Context
from examples.ctr.summary import LOST_CAUSES, churn_claims

DRAIN_DEADLINE_S = 60.0


@dataclass
class RayContext(Context):
    worker_ids: dict = field(default_factory=dict)  # worker name -> the master's worker id

    def status(self):
        """GetStatus, noting every worker's id by name (a worker that left is no longer
        listed, and the claims need the ids of those that did)."""
        status = super().status()
        if status is not None:
            self.worker_ids.update({w.name: w.worker_id for w in status.workers})
        return status

    def workers(self, market: str, since_ms: int = 0, live: bool | None = None) -> list:
        """The plan's workers on `market` launched at or after `since_ms` (live: still
        running, or ended)."""
        plan = self.cluster.plan(timeout=2.0)
        if plan is None:
            return []
        return [p for p in plan.processes if p.role == "worker" and p.market == market
                and p.launched_ms >= since_ms
                and (live is None or (p.ended_ms == 0) == live)]

    def trained(self) -> dict[str, int]:
        """Worker name -> records it trained (done leases, and the acknowledged part of
        those taken back), from the master's lease history."""
        self.status()
        try:
            leases = self.cluster.leases()
        except Exception:  # noqa: BLE001 - the master is busy: asked again at the next poll
            return {}
        return trained_by(leases, self.worker_ids)


def trained_by(leases: list[dict], worker_ids: dict[str, str]) -> dict[str, int]:
    by_id: dict[str, int] = {}
    for row in leases:
        n = row["end_rec"] - row["start_rec"] if row["state"] == "done" else row["records_done"]
        by_id[row["worker_id"]] = by_id.get(row["worker_id"], 0) + n
    return {name: by_id.get(wid, 0) for name, wid in worker_ids.items()}


class Drain(Step):
    """Drain the spot node for preemption; settled once its workers ended (preempted) and
    their on-demand replacements trained."""

    name = "drain spot node"
    part = "fallback"
    settle_timeout_s = 240.0

    def __init__(self, at: float | None):
        super().__init__(at)
        self.victims: list[str] = []
        self.node_id = ""
        self.deadline_ms = 0
        self.fired_ms = 0
        self.first_trained_s: float | None = None  # drain -> a replacement's first records
        self.replacements: list[str] = []

    def describe(self) -> str:
        return (f"drain the spot node for preemption (deadline {DRAIN_DEADLINE_S:g} s): its "
                "workers hand back, replacements start on on-demand")

    def done(self) -> str:
        return (f"node {self.node_id[:12]} drained (preemption, deadline in "
                f"{DRAIN_DEADLINE_S:g} s) under {', '.join(self.victims)}")

    def effect(self) -> str:
        return (f"{', '.join(self.victims)} ended (preempted) and on-demand replacements "
                f"{', '.join(self.replacements) or '...'} trained")

    def ready(self, ctx: RayContext) -> str:
        spot = {p.name for p in ctx.workers("spot", live=True)}
        status = ctx.status()
        holding = {w.name for w in status.workers if w.name in spot and w.state == "alive"
                   and (w.leases_held or w.leases)} if status is not None else set()
        return "" if len(holding) >= 2 else "both spot workers holding leases"

    def fire(self, ctx: RayContext) -> bool:
        self.victims = sorted(p.name for p in ctx.workers("spot", live=True))
        self.node_id = ctx.cluster.spot.node_id
        self.fired_ms = int(time.time() * 1000)
        self._fired_at = time.monotonic()
        try:
            self.deadline_ms = ctx.cluster.drain_spot(DRAIN_DEADLINE_S)
        except RuntimeError as exc:
            raise StepFailed(str(exc)) from None
        return True

    def check(self, ctx: RayContext) -> bool:
        ended = {p.name: p for p in ctx.workers("spot", live=False)}
        if not all(v in ended for v in self.victims):
            return False
        self.replacements = sorted(p.name for p in ctx.workers("on-demand", self.fired_ms))
        trained = ctx.trained()
        going = [n for n in self.replacements if trained.get(n, 0) > 0]
        if going and self.first_trained_s is None:
            self.first_trained_s = round(time.monotonic() - self._fired_at, 1)
        return len(going) >= 2


class Reclaim(Step):
    """The drained node goes away, as a reclaimed spot machine does."""

    name = "remove drained node"
    part = "fallback"

    def __init__(self, at: float | None, drain: Drain):
        super().__init__(at)
        self.drain = drain

    def describe(self) -> str:
        return "remove the drained node (the cloud took it back)"

    def done(self) -> str:
        return f"node {self.drain.node_id[:12]} removed"

    def effect(self) -> str:
        return "Ray no longer lists it alive"

    def fire(self, ctx: RayContext) -> bool:
        ctx.cluster.remove_drained()
        return True

    def check(self, ctx: RayContext) -> bool:
        return not ctx.cluster.node_alive(self.drain.node_id)


class Return(Step):
    """A new spot node joins; settled once workers launched on spot after it trained and the
    on-demand workers ended."""

    name = "spot returns"
    part = "return"
    settle_timeout_s = 240.0

    def __init__(self, at: float | None):
        super().__init__(at)
        self.joined_ms = 0
        self.node_id = ""
        self.back: list[str] = []

    def describe(self) -> str:
        return "a new spot node joins: the workers move back to spot"

    def done(self) -> str:
        return f"spot node {self.node_id[:12]} joined"

    def effect(self) -> str:
        return (f"workers back on spot ({', '.join(self.back) or '...'} trained there) and "
                "none left on on-demand")

    def fire(self, ctx: RayContext) -> bool:
        self.joined_ms = int(time.time() * 1000)
        self.node_id = ctx.cluster.add_spot().node_id
        return True

    def check(self, ctx: RayContext) -> bool:
        if ctx.workers("on-demand", live=True):
            return False
        trained = ctx.trained()
        self.back = sorted(p.name for p in ctx.workers("spot", self.joined_ms)
                           if trained.get(p.name, 0) > 0)
        return len(self.back) >= 2


def claims(run, drain: Drain, back: Return, plan, worker_ids: dict[str, str],
           trained: dict[str, int]) -> dict:
    """The fallback and the return, each a checkable value. `run` is the demo's Run (events,
    exit codes, lease audit filled in); `plan` the master's GetPlan at the end of training."""
    procs = {p.name: p for p in plan.processes} if plan is not None else {}
    notices = {}
    for e in run.events:
        if e.kind == "node_preempted":
            detail = json.loads(e.detail or "{}")
            notices[detail.get("name")] = detail.get("deadline_ms")
    run.sigtermed = [(n, worker_ids.get(n, "")) for n in drain.victims]
    run.exit_codes = {n: p.exit_code for n, p in procs.items() if p.exited}
    handback = churn_claims(run, 0, len(drain.victims))
    victim_ids = {worker_ids.get(n) for n in drain.victims}
    taken_back = [e.cause for e in run.events if e.kind == "lease_requeued"
                  and e.worker_id in victim_ids]
    decisions = dict(plan.decisions_by_reason) if plan is not None else {}
    replaced = [n for n in drain.replacements if procs.get(n) and procs[n].market == "on-demand"]
    spot_after = [p for p in procs.values() if p.role == "worker" and p.market == "spot"
                  and p.launched_ms >= back.joined_ms > 0]
    ondemand = [p for p in procs.values() if p.role == "worker" and p.market == "on-demand"]
    return {
        "drained_workers": drain.victims,
        "drain_deadline_ms": drain.deadline_ms,
        "noticed_with_the_drain_deadline": bool(drain.victims) and all(
            notices.get(n) == drain.deadline_ms for n in drain.victims),
        "ended_preempted": all(procs.get(n) is not None and procs[n].cause == "preempted"
                               for n in drain.victims) and bool(drain.victims),
        "handback": handback["sigtermed"],
        "handed_back_left_and_exited_0": bool(handback["sigtermed"])
        and handback["every_sigtermed_worker_left_and_exited_0"],
        "their_leases_requeued_by_cause": {c: taken_back.count(c) for c in set(taken_back)},
        "no_failure_spent": all(c == "preempted" for c in taken_back) and not any(
            p.cause in ("crashed", "lost", *LOST_CAUSES) for p in procs.values())
        and "replace_lost" not in decisions,
        "replacements_on_demand": replaced,
        "replaced_on_demand_and_trained": len(replaced) >= 2 and all(
            trained.get(n, 0) > 0 for n in replaced) and decisions.get("replace_preempted", 0) > 0,
        "drain_to_replacement_trained_s": drain.first_trained_s,
        "market_returned_decisions": decisions.get("market_returned", 0),
        "back_on_spot": sorted(p.name for p in spot_after),
        "back_on_spot_and_trained": len(spot_after) >= 2 and all(
            trained.get(p.name, 0) > 0 for p in spot_after)
        and decisions.get("market_returned", 0) > 0,
        "on_demand_workers_ended_exit_0": bool(ondemand) and all(
            p.ended_ms and p.exited and p.exit_code == 0 for p in ondemand),
    }


def claims_ok(c: dict) -> bool:
    return bool(c["noticed_with_the_drain_deadline"] and c["ended_preempted"]
                and c["handed_back_left_and_exited_0"] and c["no_failure_spent"]
                and c["replaced_on_demand_and_trained"] and c["back_on_spot_and_trained"]
                and c["on_demand_workers_ended_exit_0"])


def describe(c: dict) -> list[str]:
    took = c["drain_to_replacement_trained_s"]
    lines = ["  spot drained, fallback to on-demand:",
             f"    {', '.join(c['drained_workers']) or 'no worker'} noticed (node_preempted) "
             f"with the drain's deadline: {c['noticed_with_the_drain_deadline']}, ended as "
             f"preempted: {c['ended_preempted']}"]
    for s in c["handback"]:
        lines.append(f"    {s['name']} ({s['worker_id']}) SIGTERMed by the drain: left "
                     f"(worker_left, preempted): {s['left_preempted']}, exit code "
                     f"{s['exit_code']}")
    lines += [f"    their leases requeued by cause: {c['their_leases_requeued_by_cause'] or '-'}; "
              f"no failure spent (no lease lost or failed, no process crashed or lost): "
              f"{c['no_failure_spent']}",
              f"    replacements on on-demand {', '.join(c['replacements_on_demand']) or '-'} "
              f"trained: {c['replaced_on_demand_and_trained']} (drain to their first records "
              f"trained: {f'{took:.1f} s' if took is not None else 'never'})",
              "  spot returns:",
              f"    market_returned decisions: {c['market_returned_decisions']}; workers back "
              f"on spot {', '.join(c['back_on_spot']) or '-'} trained: "
              f"{c['back_on_spot_and_trained']}; the on-demand workers ended with exit code 0: "
              f"{c['on_demand_workers_ended_exit_0']}"]
    return lines
