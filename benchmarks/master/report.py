"""The master benchmarks' report: markdown tables of the results and the verdicts against
the targets (docs/benchmarks.md)."""
from __future__ import annotations

import statistics

from benchmarks.master.events import EVENTS_PAGE
from benchmarks.master.load import BATCH
from benchmarks.master.servers import SERVER_THREADS
from benchmarks.master.throughput import DLROVER_REF

TARGET_X_DLROVER = 3.0
TARGET_PCT_ECHO = 70.0
TARGET_FLAT = 1.5
TARGET_RSS_MB = 300.0


def _head(*columns: str) -> list[str]:
    """A markdown table's header: columns right-aligned unless named with a leading "<"."""
    return ["| " + " | ".join(c.lstrip("<") for c in columns) + " |",
            "| " + " | ".join("---" if c.startswith("<") else "---:" for c in columns) + " |"]


def _throughput(th: dict, args) -> list[str]:
    lines = [
        f"Throughput: durable SQLite (fresh file per run), 10^6 shards of 10 records, "
        f"shuffled, {args.duration:g} s per run, {args.rounds} round(s); "
        f"echo = bare gRPC echo, {SERVER_THREADS} threads, same run, alternating",
        "",
        *_head("clients", "<path", "shards/s", "calls/s", "p50 ms", "p99 ms", "echo calls/s",
               "% of echo", "x DLRover ref (800-1,100/s)", "x DLRover measured",
               "server CPU (cores) / echo's", "server CPU us a call / echo's",
               "thread switches a call / echo's"),
    ]
    for r in th["summary"]:
        measured = r.get("x_dlrover_measured")
        lines.append(
            f"| {r['clients']} | {r['path']} | {r['shards_per_s']:,.0f} | "
            f"{r['calls_per_s']:,.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
            f"{r['echo_calls_per_s']:,.0f} | {r['pct_of_echo']:.0f} % | "
            f"{r['x_dlrover'][1]:.1f}-{r['x_dlrover'][0]:.1f}x | "
            + (f"{measured:.1f}x" if measured else "-")
            + f" | {r['server_cpu']:.2f} / {r['echo_cpu']:.2f} | {r['server_us']:.0f} / "
            f"{r['echo_us']:.0f} | {r['server_switches']:.1f} / {r['echo_switches']:.1f} |"
        )
    lines.append("")
    return lines


def _cost(cost: dict, args) -> list[str]:
    lines = ["Cost per shard operation (GetShard + ReportShard DONE), in-process, "
             "min over rounds:", "",
             *_head("<mode", "shards", "us/op (min)", "us/op (median)", "create dataset ms")]
    for r in cost["rows"]:
        lines.append(f"| {r['mode']} | {r['shards']:,} | {r['us_per_op']:.1f} | "
                     f"{r['us_per_op_median']:.1f} | {r['create_ms']:.1f} |")
    lines.append("")
    for mode, ratio in sorted(cost["ratio_max_vs_min"].items()):
        lines.append(f"ratio largest/smallest, {mode}: {ratio:.2f}")
    lines.append("")
    return lines


def _rss(rss: dict, args) -> list[str]:
    return [
        f"Master RSS: {rss['rss_final_mb']:.0f} MB with {rss['shards']:,} shards, "
        f"{rss['workers']:,} workers registered, {rss['leases_held']:,} leases held, "
        f"{rss['churned_shards']:,} shards done (start {rss['rss_start_mb']:.0f} MB, "
        f"after the dataset {rss['rss_dataset_mb']:.0f} MB, after the workers "
        f"{rss['rss_workers_mb']:.0f} MB; CreateDataset of {rss['shards']:,} shards took "
        f"{rss['create_s'] * 1e3:.0f} ms)", ""]


def _progress(prog: dict, args) -> list[str]:
    rows = prog["summary"]
    lines = [
        f"Cost of progress reports: {rows[0]['clients']} clients, batched path "
        f"(GetShard max_shards={BATCH} carrying DONE), {args.duration:g} s per run, "
        f"{rows[0]['rounds']} round(s), alternating batched / with heartbeats / "
        "piggybacked, fresh master each run; PROGRESS = half of each lease",
        "",
        *_head("<variant", "shards/s (mean)", "<shards/s per run", "x batched (mean)",
               "<x batched per round", "calls/s", "p50 ms", "p99 ms",
               "server CPU us a shard", "refused", "errors"),
    ]
    for r in rows:
        lines.append(
            f"| {r['kind']} | {r['shards_per_s']:,.0f} | "
            + ", ".join(f"{x:,.0f}" for x in r["shards_per_s_runs"])
            + f" | {r['ratio']:.2f} | " + ", ".join(f"{x:.2f}" for x in r["ratio_rounds"])
            + f" | {r['calls_per_s']:,.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
            f"{r['server_us_per_shard']:.0f} | {r['refused']} | {r['errors']} |")
    lines.append("")
    return lines


def _events(ev: dict, args) -> list[str]:
    n = ev["events"]
    lines = [
        f"Events: append through Journal.event + Store.apply (SQLite file, WAL, "
        f"synchronous=FULL), read back in pages; min (median) of {len(ev['append'])} "
        "run(s)", "",
        *_head("<measure", "events", "seconds (min)", "seconds (median)", "events/s"),
    ]

    def row(label: str, count: int, runs: list[float]) -> str:
        return (f"| {label} | {count:,} | {min(runs):.2f} | {statistics.median(runs):.2f} "
                f"| {count / min(runs):,.0f} |")

    lines.append(row(f"append, {ev['per_commit']} a commit", n, ev["append"]))
    lines.append(row("append, 1 a commit", ev["single"], ev["append_single"]))
    lines.append(row(f"read, Store.events pages of {EVENTS_PAGE:,}", n, ev["read_store"]))
    for limit, g in sorted(ev["read_grpc"].items(), key=lambda kv: -int(kv[0])):
        lines.append(row(f"read, GetEvents over gRPC, limit {int(limit):,} "
                         f"({g['calls']} calls)", g["events"], g["seconds"]))
    lines += ["", f"(the master started on the {n:,}-event database in "
              f"{ev['master_start_s']:.2f} s, interpreter start included)", ""]
    return lines


def render(results: dict, args) -> str:
    """The report of the parts that ran, then the verdicts against the targets (docs/benchmarks.md)."""
    sections = {"throughput": _throughput, "cost": _cost, "rss": _rss, "progress": _progress,
                "events": _events}
    lines = []
    for key, section in sections.items():
        if results.get(key):
            lines += section(results[key], args)
    lines += ["Targets (docs/benchmarks.md):"] + ([f"  {t}" for t in targets(results)]
                                         or ["  (none for the parts run)"])
    return "\n".join(lines)


def targets(results: dict) -> list[str]:
    out = []

    def verdict(ok: bool) -> str:
        return "PASS" if ok else "MISS"

    th = results.get("throughput")
    if th:
        top = max(r["clients"] for r in th["summary"])
        for r in th["summary"]:
            if r["clients"] != top:
                continue
            if r["path"] == "dlrover":
                continue
            if r["path"] == "batched":
                need = TARGET_X_DLROVER * DLROVER_REF[1]
                out.append(f"{verdict(r['shards_per_s'] >= need)} batched shards/s at {top} "
                           f"clients {r['shards_per_s']:,.0f} >= {need:,.0f} "
                           f"(3x DLRover 0.6.1's reference 1,100/s, docs/benchmarks.md)")
                measured = r.get("x_dlrover_measured")
                if measured:
                    out.append(f"{verdict(measured >= TARGET_X_DLROVER)} batched shards/s at "
                               f"{top} clients {measured:.1f}x DLRover 0.6.1 measured in this "
                               f"run (>= {TARGET_X_DLROVER:g}x)")
            out.append(f"{verdict(r['pct_of_echo'] >= TARGET_PCT_ECHO)} {r['path']} calls/s "
                       f"at {top} clients {r['pct_of_echo']:.0f} % of echo (>= 70 %)")
    cost = results.get("cost")
    if cost:
        for mode, ratio in sorted(cost["ratio_max_vs_min"].items()):
            out.append(f"{verdict(ratio <= TARGET_FLAT)} cost per op flat, {mode}: "
                       f"ratio {ratio:.2f} <= {TARGET_FLAT}")
    rss = results.get("rss")
    if rss:
        out.append(f"{verdict(rss['rss_final_mb'] <= TARGET_RSS_MB)} master RSS "
                   f"{rss['rss_final_mb']:.0f} MB <= {TARGET_RSS_MB:.0f} MB")
    return out
