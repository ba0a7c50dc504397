"""`elastic-ctl`: look at and steer a running master from a terminal.

    elastic-ctl --master HOST:PORT status
    elastic-ctl --master HOST:PORT events [--since N] [--follow] [--limit N]
    elastic-ctl --master HOST:PORT report [--dataset NAME]
    elastic-ctl --master HOST:PORT cost [--price LABEL=PRICE ...]
    elastic-ctl --master HOST:PORT watch [--interval S]
    elastic-ctl --master HOST:PORT requeue DATASET --quarantined
    elastic-ctl --master HOST:PORT drop DATASET [--force]
    elastic-ctl --master HOST:PORT resize-ps N
    elastic-ctl --master HOST:PORT plan [--json]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import datetime, timezone

import grpc

from protos import master_pb2 as pb
from protos import master_pb2_grpc as pb_grpc
from rpckit import auth
from rpckit.channels import LeaderStub
from rpckit.errors import ServiceError

from .plan import add_parser as add_plan_parser, job_prices
from .tables import table_lines
from .views import PS_HEADERS, ago, cost_rows, dataset_rows, layout_lines, ps_rows


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


def _requeues(m) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(m.items())) or "-"


def format_status(s: pb.GetStatusResponse) -> str:
    out = []
    rows = []
    for d in s.datasets:
        rows.extend(dataset_rows(d))  # finished epochs folded into one line
    out.append("DATASETS")
    out.append(_table(["dataset", "epoch", "state", "todo", "doing", "done", "records",
                       "handouts", "rehanded", "redone", "dups", "requeues", "quarantined"],
                      rows)
               if rows else "  (none)")
    for d in s.datasets:
        for q in d.quarantined:
            out.append(
                f"  quarantined: {d.spec.name} epoch {q.shard.epoch} shard {q.shard.index} "
                f"[{q.shard.start}, {q.shard.end}) after {q.failures} failures; last errors: "
                + " | ".join(q.errors)
            )
    out.append("")
    out.append("WORKERS")
    rows = [
        [w.worker_id, w.name, ",".join(f"{k}={v}" for k, v in sorted(w.labels.items())) or "-",
         ago(w.last_heartbeat_ms, s.time_ms),
         " ".join(f"{x.dataset}:e{x.shard.epoch}/s{x.shard.index}" for x in w.leases) or "-"]
        for w in s.workers
    ]
    out.append(_table(["id", "name", "labels", "last call", "leases"], rows)
               if rows else "  (none)")
    hidden = [f"{n} {what}" for n, what in ((s.workers_not_shown, "workers"),
                                            (s.datasets_not_shown, "datasets")) if n]
    if hidden:  # the master bounds its answer: say what it left out
        out.append(f"  (not shown: {', '.join(hidden)})")
    out.append("")
    out.append("PS LAYOUT")
    out.extend(layout_lines(s))
    out.append("")
    out.append("PARAMETER SERVERS")
    rows = ps_rows(s)  # per index: the primary, its generation, then each backup
    out.append(_table(PS_HEADERS, rows) if rows else "  (none)")
    return "\n".join(out)


def format_event(e: pb.Event) -> str:
    when = datetime.fromtimestamp(e.time_ms / 1000, tz=timezone.utc).strftime("%H:%M:%S.%f")[:-3]
    parts = [f"{e.seq:>6}", when, f"{e.kind:<18}"]
    if e.worker_id:
        parts.append(e.worker_id)
    if e.dataset:
        where = e.dataset
        if e.epoch >= 0:
            where += f" epoch {e.epoch}"
        if e.shard_index >= 0:
            where += f" shard {e.shard_index}"
        parts.append(where)
    if e.cause:
        parts.append(f"cause={e.cause}")
    if e.detail:
        parts.append(e.detail)
    return "  ".join(parts)


def format_report(r: pb.GetLedgerResponse) -> str:
    rows = [
        [e.dataset, str(e.epoch), "finished" if e.finished else "running",
         f"{e.records_done}/{e.records_total}", str(e.records_first_try), str(e.records_handed),
         str(e.records_rehanded), str(e.records_redone), str(e.handouts), str(e.duplicates),
         _requeues(e.requeues),
         f"{e.goodput:.1%}"]
        for e in r.epochs
    ]
    out = ["GOODPUT LEDGER",
           _table(["dataset", "epoch", "state", "done", "first try", "handed", "rehanded",
                   "redone", "handouts", "dups", "requeues", "goodput"], rows)
           if rows else "  (none)",
           "",
           "WORKER-SECONDS BY LABEL",
           _table(["label", "workers", "worker-seconds"],
                  [[x.label, str(x.workers), f"{x.worker_seconds:.1f}"]
                   for x in r.worker_seconds]) if r.worker_seconds else "  (none)",
           "",
           f"total: {r.records_done} records done of {r.records_handed} handed out "
           f"({r.records_rehanded} handed out again, at most {r.records_redone} of them "
           f"trained twice), goodput {r.goodput:.1%} (records trained once / records trained; "
           "records handed back untrained are not waste); "
           f"{r.worker_seconds_total:.1f} worker-seconds; workers lost: {r.workers_lost}; "
           "left: " + (", ".join(f"{k}={v}" for k, v in sorted(r.workers_left.items()))
                       or "none")]
    lost = format_updates_lost(r)
    return "\n".join(out + ([lost] if lost else []))


def format_updates_lost(r: pb.GetLedgerResponse) -> str:
    """The records whose updates a PS lost by restoring a checkpoint: '' when no PS restored
    one, a calm line when the restores lost none, a WARNING when they lost some."""
    if not r.ps_updates_lost:
        return ""
    restores = sum(x.restores for x in r.ps_updates_lost)
    if not r.updates_lost:
        return (f"updates lost: none ({restores} restore(s) from a checkpoint without a backup; "
                "no acknowledged record fell in their windows)")
    per = "; ".join(
        f"ps {x.index}: {x.records} records in {x.restores} restore(s), last window "
        f"{datetime.fromtimestamp(x.from_ms / 1000):%H:%M:%S}-"
        f"{datetime.fromtimestamp(x.to_ms / 1000):%H:%M:%S}" for x in r.ps_updates_lost)
    return (f"WARNING: UPDATES LOST: {r.updates_lost} records counted done whose updates a PS "
            f"no longer holds (restored from a checkpoint without a backup): {per}")


def parse_prices(items: list[str]) -> dict[str, float]:
    prices = {}
    for item in items:
        label, _, price = item.rpartition("=")
        try:
            prices[label] = float(price)
        except ValueError:
            raise SystemExit(f"elastic-ctl: --price {item!r}: expected LABEL=PRICE, "
                             "e.g. market=spot=0.12 (per worker-hour)") from None
        if not label or "=" not in label and label != "(no labels)":
            raise SystemExit(f"elastic-ctl: --price {item!r}: LABEL is key=value")
    return prices


def format_cost(r: pb.GetLedgerResponse, prices: dict[str, float], default: float) -> str:
    rows, total = cost_rows(r, prices, default)
    table = [[label, f"{seconds / 3600:.3f}", f"{price:.4f}", f"{seconds / 3600 * price:.4f}"]
             for label, seconds, price in rows]
    # the cost of a record trained twice is what a trained record costs on average; records
    # handed back untrained cost no training, so they are priced nowhere
    trained = r.records_done + r.records_redone
    wasted = total * r.records_redone / trained if trained else 0.0
    per_m = total / r.records_done * 1e6 if r.records_done else 0.0
    note = ("" if prices else "\n(a worker with several labels is listed under each; the "
            "total counts it once)")
    return "\n".join([
        "COST (from the goodput ledger)",
        _table(["label", "worker-hours", "price/hour", "cost"], table) if table else "  (none)",
        "",
        f"total {total:.4f} for {r.worker_seconds_total / 3600:.3f} worker-hours; per million "
        f"records done {per_m:.4f}; spent on records trained more than once (at most "
        f"{r.records_redone} records; 1 - goodput {r.goodput:.1%}): {wasted:.4f}{note}",
    ])


def cmd_report(stub, args) -> int:
    print(format_report(stub.GetLedger(pb.GetLedgerRequest(dataset=args.dataset),
                                       timeout=args.timeout)))
    return 0


def cmd_cost(stub, args) -> int:
    # no --price: the job's own prices per market, when the master drives a job
    prices = parse_prices(args.price) or job_prices(stub, args.timeout)
    ledger = stub.GetLedger(pb.GetLedgerRequest(dataset=args.dataset), timeout=args.timeout)
    print(format_cost(ledger, prices, args.default_price))
    return 0


def cmd_status(stub, args) -> int:
    status = stub.GetStatus(pb.GetStatusRequest(), timeout=args.timeout)
    print(format_status(status) + table_lines(status.ps, args))
    lost = format_updates_lost(stub.GetLedger(pb.GetLedgerRequest(), timeout=args.timeout))
    if lost:
        print(lost)
    return 0


def cmd_events(stub, args) -> int:
    since = args.since
    while True:
        reply = stub.GetEvents(pb.GetEventsRequest(since=since, limit=args.limit),
                               timeout=args.timeout)
        for e in reply.events:
            print(format_event(e), flush=True)
        since = reply.next
        if not args.follow:
            return 0
        if not reply.events:
            time.sleep(args.interval)


def cmd_watch(stub, args) -> int:
    for _ in range(args.count or sys.maxsize):
        text = format_status(stub.GetStatus(pb.GetStatusRequest(), timeout=args.timeout))
        if sys.stdout.isatty():
            print("\033[2J\033[H", end="")
        print(f"{datetime.now():%H:%M:%S}  master {args.master}\n{text}\n", flush=True)
        time.sleep(args.interval)
    return 0


def cmd_drop(stub, args) -> int:
    reply = stub.DropDataset(pb.DropDatasetRequest(dataset=args.dataset, force=args.force),
                             timeout=args.timeout)
    ended = f"; {reply.leases_ended} leases out were ended" if reply.leases_ended else ""
    print(f"dropped dataset {args.dataset!r} ({reply.epochs} epochs started, "
          f"{'finished' if reply.finished else 'not finished'}){ended}")
    return 0


def cmd_requeue(stub, args) -> int:
    if not args.quarantined:
        print("elastic-ctl: say what to requeue: --quarantined", file=sys.stderr)
        return 2
    reply = stub.Requeue(pb.RequeueRequest(dataset=args.dataset, quarantined=True),
                         timeout=args.timeout)
    print(f"{reply.requeued} quarantined piece(s) of {args.dataset!r} are back in TODO")
    return 0


def cmd_resize_ps(stub, args) -> int:
    reply = stub.ResizePS(pb.ResizePSRequest(num_ps=args.num_ps), timeout=args.timeout)
    print(format_resize(reply, args.master))
    return 0


def format_resize(reply: pb.ResizePSResponse, master: str) -> str:
    if not reply.changed:
        return (f"the PS layout already has the target {reply.target_num_ps} (layout version "
                f"{reply.layout_version}, {reply.num_ps} PS, {reply.moves_pending} slot moves "
                "pending)")
    out = [f"resize to {reply.target_num_ps} PS recorded: layout version "
           f"{reply.layout_version} has {reply.num_ps} PS; {reply.moves_planned} of "
           f"{reply.ps_slots} slots to move"]
    if reply.target_num_ps > reply.num_ps:
        out.append(f"start the new PS: elastic-ps --master {master} --index K for K in "
                   f"{reply.num_ps}..{reply.target_num_ps - 1} (--num-ps may be left out)")
    if reply.moves_pending:
        wait = (" once the new PS have registered" if reply.target_num_ps > reply.num_ps
                else "; the PS that leave exit once they hold no slot")
        out.append(f"the master moves the {reply.moves_pending} slots live, while training "
                   f"goes on{wait}: follow it with elastic-ctl status (PS LAYOUT)")
    return "\n".join(out)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="elastic-ctl", description="Inspect and steer a master.")
    p.add_argument("--master", default=os.environ.get("ELASTIC_PS_MASTER", "localhost:50051"),
                   help="master address HOST:PORT, or a comma-separated list of the leader "
                   "and its standbys (env ELASTIC_PS_MASTER)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per call")
    p.add_argument("--tls-ca", default=None, metavar="FILE",
                   help="PEM CA to verify a TLS master (env ELASTIC_PS_TLS_CA)")
    p.add_argument("--auth-token", default=None, metavar="TOKEN",
                   help="the job's token (env ELASTIC_PS_AUTH_TOKEN)")
    p.add_argument("--auth-token-file", default=None, metavar="FILE",
                   help="read the token from this file (env ELASTIC_PS_AUTH_TOKEN_FILE)")
    sub = p.add_subparsers(dest="command", required=True)
    _add_reading(sub)
    _add_steering(sub)
    add_plan_parser(sub)
    return p


def _add_reading(sub) -> None:
    """The subcommands that only read the master."""
    sub.add_parser("status", help="datasets, workers and PS").set_defaults(fn=cmd_status)
    ev = sub.add_parser("events", help="the elasticity timeline")
    ev.add_argument("--since", type=int, default=0, help="only events after this seq")
    ev.add_argument("--limit", type=int, default=1000,
                    help="events per call to the master (at most 10000; default 1000)")
    ev.add_argument("--follow", "-f", action="store_true", help="keep printing new events")
    ev.add_argument("--interval", type=float, default=0.5,
                    help="with --follow: seconds between asks when nothing new came "
                    "(default 0.5)")
    ev.set_defaults(fn=cmd_events)
    w = sub.add_parser("watch", help="status, refreshed")
    w.add_argument("--interval", type=float, default=1.0,
                   help="seconds between refreshes (default 1.0)")
    w.add_argument("--count", type=int, default=0, help="stop after N refreshes (0: never)")
    w.set_defaults(fn=cmd_watch)
    rp = sub.add_parser("report", help="the goodput ledger")
    rp.add_argument("--dataset", default="", help="one dataset (default: all)")
    rp.set_defaults(fn=cmd_report)
    co = sub.add_parser("cost", help="what the worker-hours cost, from the ledger")
    co.add_argument("--dataset", default="",
                    help="count one dataset's records (default: all); the worker-hours are "
                    "the whole job's either way")
    co.add_argument("--price", action="append", default=[], metavar="LABEL=PRICE",
                    help="price per worker-hour of workers with this label, e.g. "
                    "market=spot=0.12 (repeatable); worker time no priced label covers (unlabelled "
                    "workers too) is priced at --default-price on a line of its own")
    co.add_argument("--default-price", type=float, default=1.0,
                    help="price per worker-hour of workers no --price covers (default 1.0)")
    co.set_defaults(fn=cmd_cost)


def _add_steering(sub) -> None:
    """The subcommands that change the job."""
    dr = sub.add_parser("drop", help="forget a dataset (its name can then be created again)")
    dr.add_argument("dataset", help="the dataset's name (as in elastic-ctl status)")
    dr.add_argument("--force", action="store_true",
                    help="drop it even while leases are out (their workers' reports are "
                    "then ignored; stop the workers first)")
    dr.set_defaults(fn=cmd_drop)
    rq = sub.add_parser("requeue", help="put quarantined shards back into TODO")
    rq.add_argument("dataset", help="the dataset's name (as in elastic-ctl status)")
    rq.add_argument("--quarantined", action="store_true",
                    help="requeue the shards quarantined after --max-shard-failures failures "
                    "(required: the only kind there is)")
    rq.set_defaults(fn=cmd_requeue)
    rz = sub.add_parser("resize-ps", help="set the PS count the job should have (the PS "
                        "layout's target; docs/ps.md, 'Slots and resize')")
    rz.add_argument("num_ps", type=int, metavar="N",
                    help="the PS count to reach, 1..min(1024, the master's --ps-slots): more "
                    "than now plans slot moves to new indices (start them with elastic-ps "
                    "--index K), fewer moves the slots of the indices >= N away (those PS "
                    "then exit)")
    rz.set_defaults(fn=cmd_resize_ps)


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    try:
        security = auth.client_security(args.tls_ca, args.auth_token, args.auth_token_file,
                                        flags=True)
    except auth.SecurityConfigError as exc:
        print(f"elastic-ctl: {exc}", file=sys.stderr)
        sys.exit(2)
    channel = LeaderStub(args.master, pb_grpc.MasterStub, tls_ca=security.tls_ca,
                         token=security.token, token_source=security.token_source)
    try:
        code = args.fn(channel, args)  # the stub follows the leader of the list
    except ServiceError as exc:  # a refused token, a TLS mismatch: the message names the fix
        print(f"elastic-ctl: {exc.message}", file=sys.stderr)
        code = 1
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.UNAVAILABLE:
            print(f"elastic-ctl: cannot reach the master at {args.master}: {exc.details()}",
                  file=sys.stderr)
        else:
            print(f"elastic-ctl: {exc.code().name}: {exc.details()}", file=sys.stderr)
        code = 1
    except KeyboardInterrupt:
        code = 130
    finally:
        channel.close()
    sys.exit(code)


if __name__ == "__main__":
    main()
