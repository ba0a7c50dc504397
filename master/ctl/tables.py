"""`elastic-ctl status`: the embedding tables' sizes, asked of each alive PS (GetPSStatus).

The master does not hold table sizes; each PS knows its own rows. One line per table: its
name, rows held over all PS (admitted rows, not ids only counted by admission), the cap, the
memory, and rows evicted by cause; a WARNING line for a table holding more than its
`max_rows` plus the PS count. A PS that does not answer is named, not fatal.
"""
from __future__ import annotations

from protos import ps_pb2
from protos import ps_pb2_grpc
from rpckit import auth


def ps_tables(ps_list, tls_ca: str, token: str, timeout: float) -> tuple[list, list[str]]:
    """([GetPSStatusResponse of each alive PS], [PS that did not answer])."""
    answers, silent = [], []
    for p in ps_list:
        if p.state != "alive" or not p.address:
            continue
        channel = auth.channel(p.address, tls_ca=tls_ca or None, token=token or None)
        try:
            stub = ps_pb2_grpc.ParameterServerStub(channel)
            answers.append(stub.GetPSStatus(ps_pb2.GetPSStatusRequest(), timeout=timeout))
        except Exception:  # noqa: BLE001 - a PS that is down is named, not fatal
            silent.append(f"{p.index}/{p.num_ps}")
        finally:
            channel.close()
    return answers, silent


def format_tables(answers, silent: list[str] = ()) -> str:
    """'' when no PS holds a table."""
    sums: dict[str, dict] = {}
    for status in answers:
        for t in status.tables:
            s = sums.setdefault(t.spec.name, {"rows": 0, "bytes": 0, "ttl": 0, "cap": 0,
                                              "max_rows": t.spec.max_rows, "ps": 0})
            s["rows"] += t.rows
            s["bytes"] += t.bytes
            s["ttl"] += t.evicted.get("ttl", 0)
            s["cap"] += t.evicted.get("cap", 0)
            s["ps"] += 1
    if not sums:
        return ""
    lines = ["", "EMBEDDING TABLES"]
    for name in sorted(sums):
        s = sums[name]
        cap = f" of max {s['max_rows']}" if s["max_rows"] else ""
        lines.append(f"  {name}: {s['rows']} rows{cap} on {s['ps']} PS, "
                     f"{s['bytes'] / 2**20:.1f} MiB, evicted {s['cap']} (cap) {s['ttl']} (ttl)")
    for name in sorted(sums):
        s = sums[name]
        # each PS's share follows the slots it owns: more than max_rows plus the PS count
        # means a share that did not follow the layout (or a move's copies, for a moment)
        if s["max_rows"] and s["rows"] > s["max_rows"] + s["ps"]:
            lines.append(f"  WARNING: table {name} holds {s['rows']} rows, over its max_rows "
                         f"{s['max_rows']} plus {s['ps']} PS")
    if silent:
        lines.append(f"  (PS not answering: {', '.join(silent)})")
    return "\n".join(lines)


def table_lines(ps_list, args) -> str:
    """The tables section for `elastic-ctl status` (its parsed flags in `args`)."""
    tls_ca, token = auth.client_options(args.tls_ca, args.auth_token, args.auth_token_file)
    return format_tables(*ps_tables(ps_list, tls_ca, token, min(args.timeout, 3.0)))
