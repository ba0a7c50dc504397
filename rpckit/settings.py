"""Settings from flags and environment variables: one helper for every binary.

A binary describes its settings as a frozen dataclass; `FlagParser.flag("--some-flag", ...)`
adds a flag whose default is `ELASTIC_PS_SOME_FLAG` when set, else the dataclass default, and
`FlagParser.settings(cls, argv)` parses and builds the dataclass. The flag always wins.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any, Callable, Iterable, TypeVar

ENV_PREFIX = "ELASTIC_PS_"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
T = TypeVar("T")


def env_name(flag: str) -> str:
    return ENV_PREFIX + flag.lstrip("-").replace("-", "_").upper()


def _as_bool(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


class FlagParser(argparse.ArgumentParser):
    """argparse with environment-variable defaults and a typed settings object."""

    def __init__(self, prog: str, description: str):
        super().__init__(prog=prog, description=f"{description} Every flag also reads "
                         f"{ENV_PREFIX}<FLAG> (e.g. {ENV_PREFIX}PORT); the flag wins.")

    def flag(self, name: str, default: Any, help: str, *, type: Callable | None = None,
             choices: Iterable[str] | None = None) -> None:
        """`--name`, defaulting to $ELASTIC_PS_NAME, else `default`; a bool default makes a
        switch. The type is the default's unless given."""
        raw = os.environ.get(env_name(name))
        if isinstance(default, bool):
            value = _as_bool(raw) if raw is not None else default
            self.add_argument(name, action="store_true", default=value, help=help)
            return
        kind = type or (default.__class__ if default is not None else str)
        self.add_argument(name, type=kind, default=raw if raw is not None else default,
                          choices=list(choices) if choices else None, help=help)

    def settings(self, cls: type[T], argv: list[str] | None,
                 check: Callable[[T], list[str]] | None = None) -> T:
        """Parse argv into `cls` (a dataclass whose fields are the flags' dest names); bad
        flags or problems found by `check` exit 2 with the reasons."""
        ns = vars(self.parse_args(argv))
        value = cls(**{f.name: ns[f.name] for f in dataclasses.fields(cls) if f.name in ns})
        problems = check(value) if check else []
        if problems:
            self.error("; ".join(problems))
        return value


def describe(settings: object, redact: Iterable[str] = (), rewrite: dict | None = None) -> str:
    """One line of every setting for the start-up log; `redact` fields are shown as ***."""
    values = dataclasses.asdict(settings)
    for name in redact:
        if values.get(name):
            values[name] = "***"
    values.update(rewrite or {})
    return " ".join(f"{k}={v}" for k, v in values.items())
