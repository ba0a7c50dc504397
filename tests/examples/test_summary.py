"""The demo's churn and HA claims fail when what they claim did not happen
(examples/ctr/summary.py)."""
from __future__ import annotations

from dataclasses import replace

from examples.ctr.demo import Run
from examples.ctr.failover import Kill
from examples.ctr.summary import (churn_claims, churn_ok, describe_churn, describe_ha,
                                  ha_claims, ha_ok)
from protos import master_pb2 as pb

PLANNED = ["master", "ps"]


def good_run() -> Run:
    return Run("with churn", ledger=pb.GetLedgerResponse(updates_lost=0),
               kills=[Kill("master", "a:1", 1000, takeover_ms=5000, flowing_ms=5100,
                           successor="b:1"),
                      Kill("ps", "c:1", 9000, index=0, generation=1, takeover_ms=10000,
                           flowing_ms=10400, rejoined_role="backup", rejoined_generation=2)],
               generations={0: 1, 1: 1}, generations_after={0: 2, 1: 1},
               leaders=["a:1", "b:1"], backups_compared=1)


def test_a_run_where_everything_held_is_ok_and_says_so():
    claims = ha_claims(good_run(), PLANNED)
    assert ha_ok(claims)
    text = "\n".join(describe_ha(claims))
    assert "first shard handed out 4.10 s after it" in text
    assert "generation 1 -> 2), first push answered 1.40 s" in text
    assert "it serves as a backup of generation 2" in text


def test_each_broken_claim_makes_the_run_not_ok():
    broken = [
        replace(good_run(), ledger=pb.GetLedgerResponse(updates_lost=12)),
        replace(good_run(), generations_after={0: 1, 1: 1}),       # no promotion
        replace(good_run(), generations_after={0: 2, 1: 2}),       # the wrong index moved too
        replace(good_run(), leaders=["a:1", "a:1"]),
        replace(good_run(), kills=good_run().kills[:1]),           # the PS kill never happened
        replace(good_run(), backups_differ=["PS 1: ..."]),
    ]
    late = good_run()
    late.kills[1].flowing_ms = 0                                   # no push answered after it
    second_primary = good_run()
    second_primary.kills[1].rejoined_role = "primary"
    never_back = good_run()
    never_back.kills[1].rejoined_role = ""
    for run in broken + [late, second_primary, never_back]:
        assert not ha_ok(ha_claims(run, PLANNED)), run


def killed_run(events) -> Run:
    return Run("with churn", sigkilled=[("worker-2", "w-3")],
               events=[pb.Event(kind=k, worker_id=w, cause=c) for k, w, c in events])


LOST = [("worker_registered", "w-3", ""), ("lease_requeued", "w-3", "lost"),
        ("lease_requeued", "w-3", "lost"), ("worker_lost", "w-3", "lost")]


def test_a_sigkilled_worker_declared_lost_with_its_leases_requeued_is_ok_and_says_so():
    claims = churn_claims(killed_run(LOST), planned_sigkills=1)
    assert churn_ok(claims)
    assert claims["sigkilled"] == [{"name": "worker-2", "worker_id": "w-3", "worker_lost": True,
                                    "leases_requeued": 2}]
    text = "\n".join(describe_churn(claims))
    assert "worker-2 (w-3) SIGKILLed holding leases: declared lost (worker_lost): True" in text
    # a lease whose deadline passed came back too
    assert churn_ok(churn_claims(killed_run(
        [("lease_requeued", "w-3", "timeout"), ("worker_lost", "w-3", "lost")]), 1))


def test_each_broken_churn_claim_makes_the_run_not_ok():
    broken = [
        killed_run(LOST[:3]),                                      # never declared lost
        killed_run([("worker_lost", "w-3", "lost")]),              # nothing came back
        killed_run([("lease_requeued", "w-3", "preempted"),        # handed back, not lost
                    ("worker_lost", "w-3", "lost")]),
        killed_run([("lease_requeued", "w-4", "lost"),             # another worker's leases
                    ("worker_lost", "w-4", "lost"), ("worker_lost", "w-3", "lost")]),
    ]
    for run in broken:
        assert not churn_ok(churn_claims(run, planned_sigkills=1)), run.events
    # the planned SIGKILL never happened (no worker held a lease before training ended)
    nobody = Run("with churn", events=[pb.Event(kind="worker_lost", worker_id="w-3")])
    assert not churn_ok(churn_claims(nobody, planned_sigkills=1))
    assert not churn_ok(churn_claims(killed_run(LOST), planned_sigkills=2))


def stopped_run(events, exit_code=0) -> Run:
    return Run("with churn", sigtermed=[("worker-3", "w-4")], exit_codes={"worker-3": exit_code},
               events=[pb.Event(kind=k, worker_id=w, cause=c) for k, w, c in events])


def test_a_sigtermed_worker_that_left_preempted_and_exited_0_is_ok_and_says_so():
    run = stopped_run([("worker_left", "w-4", "preempted")])
    run.sigkilled, run.events = [("worker-2", "w-3")], run.events + killed_run(LOST).events
    claims = churn_claims(run, planned_sigkills=1, planned_sigterms=1)
    assert churn_ok(claims)
    assert claims["sigtermed"] == [{"name": "worker-3", "worker_id": "w-4",
                                    "left_preempted": True, "exit_code": 0}]
    assert "worker-3 (w-4) SIGTERMed holding leases: left (worker_left, preempted): True, " \
        "exit code 0" in "\n".join(describe_churn(claims))


def test_each_broken_sigterm_claim_makes_the_run_not_ok():
    broken = [stopped_run([("worker_left", "w-4", "finished")]),   # not the notice's leave
              stopped_run([("worker_left", "w-4", "preempted")], exit_code=1),
              stopped_run([])]                                     # never left
    for run in broken:
        run.sigkilled, run.events = [("worker-2", "w-3")], run.events + killed_run(LOST).events
        assert not churn_ok(churn_claims(run, 1, 1)), run
    nobody = killed_run(LOST)                                      # the SIGTERM never happened
    assert not churn_ok(churn_claims(nobody, 1, 1))
