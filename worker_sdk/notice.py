"""How the SDK tells the user what it is doing, without the user configuring logging.

Recoveries (re-registration, a PS re-route, a retry given up) and long waits are logged by the
SDK's modules under the `worker_sdk` logger. A training script that never configured logging
would see none of it (Python's last-resort handler shows WARNING and above only), so
`ensure_visible()` gives the `worker_sdk` logger a stderr handler at INFO when, and only
when, the root logger has no handler: one line per recovery appears by default, and an
application that configures logging keeps full control (its handlers, its levels).
`ELASTIC_PS_LOG_LEVEL` overrides the level of that default handler (e.g. WARNING).
"""
from __future__ import annotations

import logging
import os
import sys

log = logging.getLogger(__name__)
LOGGER = "worker_sdk"
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _DefaultHandler(logging.StreamHandler):
    """Ours: stands aside once the application configures the root logger."""

    def emit(self, record: logging.LogRecord) -> None:
        if logging.getLogger().handlers:  # configured since: hand control back
            sdk = logging.getLogger(LOGGER)
            sdk.removeHandler(self)
            if sdk.level == self.level:
                sdk.setLevel(logging.NOTSET)
            return
        super().emit(record)


def ensure_visible() -> None:
    """Show the SDK's INFO lines on stderr when the application configured no logging."""
    sdk = logging.getLogger(LOGGER)
    if any(isinstance(h, _DefaultHandler) for h in sdk.handlers):
        return
    if logging.getLogger().handlers:
        return  # the application decides what is shown
    level = os.environ.get("ELASTIC_PS_LOG_LEVEL", "INFO").upper()
    handler = _DefaultHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.setLevel(level if level in ("DEBUG", "INFO", "WARNING", "ERROR") else "INFO")
    sdk.addHandler(handler)
    if sdk.level == logging.NOTSET or sdk.level > handler.level:
        sdk.setLevel(handler.level)


class WaitNotice:
    """Says what a wait is waiting for: once at INFO after FIRST_S, then a WARNING every
    EVERY_S, and once more when it ends, so a wrong address is never a silent minute."""

    FIRST_S = 2.0
    EVERY_S = 10.0

    def __init__(self, what: str, logger: logging.Logger = log):
        self.what = what
        self.log = logger
        self.next_at = self.FIRST_S
        self.said = False

    def still(self, why: str, waited: float, limit: float) -> None:
        if waited < self.next_at:
            return
        (self.log.warning if self.said else self.log.info)(
            "waiting for %s for %.0f s (gives up after %.0f s): %s", self.what, waited, limit,
            why)
        self.said = True
        self.next_at = waited + self.EVERY_S

    def done(self) -> None:
        if self.said:
            self.log.info("found %s", self.what)
