"""The demo's summary as checkable values: what the worker churn and the high-availability part
claim (each claim a value a test can read back from `--json`), their lines for people, a run
and its schedule in lines (`describe`, `describe_schedule`: the default and the Ray demo), and
a run as JSON.

`run` is `examples.ctr.demo.Run`: the epochs, ledger, lease-history audit, kills
(`examples.ctr.failover.Kill`) and what the master and the PS said at the start and the end.
"""
from __future__ import annotations


# why a dead worker's leases come back: it was declared lost, or a lease's deadline passed
LOST_CAUSES = ("lost", "timeout")


def churn_claims(run, planned_sigkills: int, planned_sigterms: int = 0) -> dict:
    """What the churn part claims, from the master's events and the exit codes: each
    SIGKILLed worker (one that held leases when it was killed) was declared lost
    (`worker_lost`) and the leases it held came back (`lease_requeued` of its leases, cause
    lost or timeout); each SIGTERMed one left (`worker_left`, cause preempted) and exited 0."""
    killed = []
    for name, worker_id in run.sigkilled:
        lost = any(e.kind == "worker_lost" and e.worker_id == worker_id for e in run.events)
        requeued = sum(1 for e in run.events if e.kind == "lease_requeued"
                       and e.worker_id == worker_id and e.cause in LOST_CAUSES)
        killed.append({"name": name, "worker_id": worker_id, "worker_lost": lost,
                       "leases_requeued": requeued})
    stopped = [{"name": name, "worker_id": worker_id,
                "left_preempted": any(e.kind == "worker_left" and e.worker_id == worker_id
                                      and e.cause == "preempted" for e in run.events),
                "exit_code": run.exit_codes.get(name)}
               for name, worker_id in getattr(run, "sigtermed", [])]
    return {
        "sigkilled": killed,
        "every_planned_sigkill_done": len(killed) == planned_sigkills,
        "every_sigkilled_worker_lost_and_its_leases_requeued": bool(killed) and all(
            k["worker_lost"] and k["leases_requeued"] > 0 for k in killed),
        "sigtermed": stopped,
        "every_planned_sigterm_done": len(stopped) == planned_sigterms,
        "every_sigtermed_worker_left_and_exited_0": all(
            s["left_preempted"] and s["exit_code"] == 0 for s in stopped),
    }


def churn_ok(claims: dict) -> bool:
    return bool(claims["every_planned_sigkill_done"]
                and claims["every_sigkilled_worker_lost_and_its_leases_requeued"]
                and claims.get("every_planned_sigterm_done", True)
                and claims.get("every_sigtermed_worker_left_and_exited_0", True))


def describe_churn(claims: dict) -> list[str]:
    lines = ["  worker churn:"]
    for k in claims["sigkilled"]:
        lines.append(f"    {k['name']} ({k['worker_id']}) SIGKILLed holding leases: declared "
                     f"lost (worker_lost): {k['worker_lost']}, its leases requeued "
                     f"(lease_requeued, cause lost/timeout): {k['leases_requeued']}")
    for s in claims.get("sigtermed", []):
        lines.append(f"    {s['name']} ({s['worker_id']}) SIGTERMed holding leases: left "
                     f"(worker_left, preempted): {s['left_preempted']}, exit code "
                     f"{s['exit_code']}")
    if not claims["every_planned_sigkill_done"]:
        lines.append("    a planned SIGKILL was not done (no worker held a lease)")
    if not claims.get("every_planned_sigterm_done", True):
        lines.append("    a planned SIGTERM was not done (no second worker held a lease)")
    return lines


def ha_claims(run, planned: list[str]) -> dict:
    """What the HA part of the summary claims, each as a checkable value."""
    killed_ps = [k.index for k in run.kills if k.role == "ps"]
    expected = {i: g + (1 if i in killed_ps else 0) for i, g in run.generations.items()}
    return {
        "kills": [k.to_json() for k in run.kills],
        "skipped": run.skipped,
        "every_planned_kill_done": sorted(k.role for k in run.kills) == sorted(planned),
        "updates_lost": run.ledger.updates_lost if run.ledger is not None else None,
        "generations_before": run.generations,
        "generations_after": run.generations_after,
        "generation_up_by_one_for_the_killed_index": bool(killed_ps)
        and run.generations_after == expected,
        "leaders": run.leaders,
        "leader_changed": len(run.leaders) == 2 and run.leaders[0] != run.leaders[1],
        "flowing_again_after_every_kill": all(k.flowing_s is not None for k in run.kills),
        # the killed primary, started again, is a backup of the next generation
        "old_primary_rejoined_as_backup": bool(killed_ps) and all(
            (k.rejoined_role, k.rejoined_generation) == ("backup", k.generation + 1)
            for k in run.kills if k.role == "ps"),
        "backups_compared": run.backups_compared,
        "backups_differ": run.backups_differ,
    }


def ha_ok(claims: dict) -> bool:
    """Whether every HA claim held: both kills happened, nothing was lost, the killed index
    moved on by one generation, the leader changed, training flowed again after each kill,
    the killed primary came back as a backup, and the backups hold what their primaries
    hold."""
    return bool(claims["every_planned_kill_done"] and claims["updates_lost"] == 0
                and claims["generation_up_by_one_for_the_killed_index"]
                and claims["leader_changed"] and claims["flowing_again_after_every_kill"]
                and claims["old_primary_rejoined_as_backup"] and not claims["backups_differ"])


def describe_ha(claims: dict) -> list[str]:
    lines = ["  high availability (a master standby, a backup per PS index):"]
    for k in claims["kills"]:
        took = f"{k['takeover_s']:.2f} s" if k["takeover_s"] is not None else "never"
        flow = f"{k['flowing_s']:.2f} s" if k["flowing_s"] is not None else "never"
        if k["role"] == "master":
            lines.append(f"    master leader {k['victim']} SIGKILLed: {k['successor']} took over "
                         f"{took} after the kill (master_started), first shard handed out "
                         f"{flow} after it")
        else:
            lines.append(f"    PS {k['index']} primary {k['victim']} SIGKILLed with a backup in "
                         f"sync: promoted {took} after the kill (ps_promoted, generation "
                         f"{k['generation']} -> {k['generation'] + 1}), first push answered "
                         f"{flow} after it; started again, it serves as a "
                         f"{k['rejoined_role'] or 'nothing (never in sync)'} of generation "
                         f"{k['rejoined_generation']}")
    lines += [f"    HA step skipped: {why}" for why in claims["skipped"]]
    lines.append(f"    PS generations {claims['generations_before']} -> "
                 f"{claims['generations_after']}: up by one for the killed index only: "
                 f"{claims['generation_up_by_one_for_the_killed_index']}")
    lines.append(f"    leader {' -> '.join(claims['leaders'])}: changed: "
                 f"{claims['leader_changed']}")
    lines.append(f"    updates lost (the ledger's updates_lost): {claims['updates_lost']}")
    lines.append(f"    in-sync backups holding their primary's state at the end: "
                 f"{claims['backups_compared'] - len(claims['backups_differ'])} of "
                 f"{claims['backups_compared']}")
    lines += [f"      {why}" for why in claims["backups_differ"]]
    return lines


def run_json(run) -> dict:
    return {
        "name": run.name, "wall_s": round(run.wall_s, 2), "auc": run.auc,
        "exactly_once": run.exactly_once,
        "audit": {str(e): errs for e, errs in run.audit.items()},
        "exit_codes": run.exit_codes,
        "epochs": [{"epoch": e.epoch, "records_done": e.records_done,
                    "records_total": e.records_total, "handouts": e.handouts,
                    "shards": e.done, "duplicates": e.duplicates,
                    "records_redone": e.records_redone} for e in run.epochs],
        "goodput": run.ledger.goodput if run.ledger is not None else None,
    }


def describe(run) -> list[str]:
    auc = f"final AUC {run.auc:.4f}" if run.curve else "AUC not scored"
    lines = [f"  {run.name}: wall {run.wall_s:.1f} s, {auc}, every record of every epoch "
             f"counted done exactly once: {run.exactly_once}"]
    for e in run.epochs:
        requeues = ", ".join(f"{k} {v}" for k, v in sorted(e.requeues.items())) or "none"
        lines.append(f"    epoch {e.epoch}: {e.handouts} hand-outs for {e.done} shards, "
                     f"{e.records_done}/{e.records_total} records, {e.records_rehanded} handed "
                     f"out again of which {e.records_redone} possibly trained twice, "
                     f"{e.duplicates} duplicates; requeues: {requeues}")
    for epoch, errors in sorted(run.audit.items()):
        lines.append(f"    epoch {epoch}, lease history: " + "; ".join(errors))
    if run.ledger is not None:
        lines.append(f"    goodput {run.ledger.goodput:.1%} ({run.ledger.records_done} records "
                     f"done, at most {run.ledger.records_redone} trained twice), "
                     f"{run.ledger.worker_seconds_total:.0f} worker-seconds")
    return lines


def describe_schedule(run) -> list[str]:
    lines = [f"  the schedule ({len(run.steps)} steps; training held {run.held_s:.1f} s in all "
             "for it):"]
    for s in run.steps:
        if s["state"] == "settled":
            lines.append(f"    {s['name']}: fired at {s['fired_fraction']:.0%} of the records "
                         f"({s['fired_s']:.1f} s), its effect seen {s['settled_s']:.1f} s")
        else:
            lines.append(f"    {s['name']}: {s['state'].upper()}: {s['why']}")
    return lines
