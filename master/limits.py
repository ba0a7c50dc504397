"""What one request may carry: the bounds on every number and string the master accepts.

Everything here is checked where a request enters the core, before anything changes, so no
client input reaches the database in a form a later commit would refuse (a NUL byte in
PostgreSQL text, a number past a BIGINT column, a deadline past int64) and no accepted value
makes a later call fail. Messages quote at most a short prefix of what they were given
(`rpckit.errors.quote`), so a huge field cannot blow up the error it earns.
"""
from __future__ import annotations

import math
import re

from rpckit.errors import invalid, quote

MAX_NAME = 128            # dataset and worker names (the columns are VARCHAR(128))
MAX_LABELS = 32
MAX_LABEL_KEY = 63
MAX_LABEL_VALUE = 256
MAX_REASON = 64           # a leave reason is stored as a lease's cause (VARCHAR(64))
MAX_ADDRESS = 256         # PS addresses (VARCHAR(256))
MAX_MESSAGE = 500         # kept of a FAILED report's message; the rest is cut
MAX_REPORTS = 4096        # reports in one call
MAX_NUM_PS = 1024
MAX_RECORDS = 1 << 50     # num_records and shard_size
MAX_EPOCHS = 1 << 20      # fits the INTEGER epoch columns with room to spare
# |seed| < 2^62 and epoch < 2^20: the shuffle key seed + epoch never leaves int64
MAX_SEED = 1 << 62
MAX_LEASE_TIMEOUT_S = 7 * 86400.0  # a week: the deadline (Unix ms) stays far inside int64
MAX_EVENTS_PAGE = 10_000
MAX_ID = (1 << 63) - 1    # lease ids, event seqs, generations: the BIGINT columns' top
MAX_INT32 = (1 << 31) - 1  # an int32 field's top: only its sign needs checking

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_DATASET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]*")
_REASON = re.compile(r"[A-Za-z0-9._-]+")
_ADDRESS = re.compile(r"[!-~]+")  # printable ASCII, no spaces: host:port, tcp://h:p, ipc://...
_HOST_PORT = re.compile(r"(?:\[[0-9A-Za-z:.%_-]+\]|[A-Za-z0-9._-]+):([0-9]{1,5})")


def check_text(what: str, value: str, limit: int, *, empty_ok: bool = False) -> None:
    """A free-form identifier: 1..limit characters (0 with `empty_ok`), no control chars."""
    if not value:
        if empty_ok:
            return
        raise invalid(f"{what} is empty; give 1-{limit} characters")
    if len(value) > limit:
        raise invalid(f"{what} {quote(value)} is {len(value)} characters; the limit is {limit}")
    if _CONTROL.search(value):
        raise invalid(f"{what} {quote(value)} contains control characters (NUL, newline, ...)")


def check_name(kind: str, name: str) -> None:
    """A dataset or worker name. A dataset name is also a word of letters, digits and ._:/-."""
    check_text(f"{kind} name", name, MAX_NAME)
    if kind == "dataset" and not _DATASET_NAME.fullmatch(name):
        raise invalid(
            f"dataset name {quote(name)} must start with a letter or digit and hold only "
            "letters, digits and the characters ._:/-"
        )


def check_labels(labels: dict[str, str]) -> None:
    if len(labels) > MAX_LABELS:
        raise invalid(f"{len(labels)} labels given; at most {MAX_LABELS} are kept")
    for key, value in labels.items():
        check_text("label key", key, MAX_LABEL_KEY)
        check_text(f"label {quote(key)}", value, MAX_LABEL_VALUE, empty_ok=True)


def check_reason(reason: str) -> str:
    """A leave reason, stored as the cause of the leases it returns; empty is 'unspecified'."""
    reason = reason.strip() or "unspecified"
    if len(reason) > MAX_REASON or not _REASON.fullmatch(reason):
        raise invalid(
            f"leave reason {quote(reason)} must be up to {MAX_REASON} ASCII letters, digits or "
            "-_. (e.g. preempted, scaled-down, finished)"
        )
    return reason


def check_address(what: str, address: str, *, empty_ok: bool = False) -> None:
    check_text(what, address, MAX_ADDRESS, empty_ok=empty_ok)
    if address and not _ADDRESS.fullmatch(address):
        raise invalid(f"{what} {quote(address)} must be printable ASCII without spaces "
                      "(host:port or tcp://host:port)")


def check_endpoint(what: str, address: str, scheme: str = "", *, empty_ok: bool = False) -> None:
    """An address the master or a client dials: `scheme` (e.g. tcp://) then host:port, the
    port in 1..65535, so a registration never names a place no one can reach."""
    check_address(what, address, empty_ok=empty_ok)
    if not address:
        return
    rest = address[len(scheme):] if address.startswith(scheme) else ""
    found = _HOST_PORT.fullmatch(rest)
    if found is None or not 1 <= int(found.group(1)) <= 65535:
        raise invalid(f"{what} {quote(address)} must be {scheme}host:port with a port in "
                      "1..65535")


def check_int(what: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        bounds = f"> 0 and at most {high}" if low == 1 else f"in {low}..{high}"
        raise invalid(f"{what} must be {bounds} (got {quote(value)})")


def check_seconds(what: str, value: float, high: float) -> None:
    if not (math.isfinite(value) and 0 <= value <= high):
        raise invalid(f"{what} must be a finite number of seconds in 0..{high:g} "
                      f"(got {quote(value)})")


def clean_message(message: str) -> str:
    """A report's free-text message as it may be stored: cut to MAX_MESSAGE characters, each
    control character (NUL included) replaced, so any message a client sends can be kept."""
    return _CONTROL.sub("\ufffd", message[:MAX_MESSAGE])
