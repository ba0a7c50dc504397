"""Reading a parsed YAML mapping one field at a time, each named by its dotted path, so a
refusal says which line to fix (`workers.markets[1].price: is -1; must be in [0, 1e+06]`)."""
from __future__ import annotations

import math
import re
import shlex
from typing import Any

from .errors import SpecError

MAX_TEXT = 4096
MAX_ARGS = 256

class Fields:
    """The fields of one mapping: each read once, whatever is left over is an unknown field."""

    def __init__(self, path: str, value: Any):
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise SpecError(path or "(top level)", f"must be a mapping, got {kind(value)}")
        for key in value:
            if not isinstance(key, str):
                raise SpecError(path or "(top level)", f"field name {key!r} is not a string")
        self.path, self.raw, self.read = path, value, set()

    def at(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def get(self, key: str, default: Any = None, *, required: bool = False) -> Any:
        self.read.add(key)
        if key not in self.raw or self.raw[key] is None:
            if required:
                raise SpecError(self.at(key), "is required")
            return default
        return self.raw[key]

    def done(self, allowed: tuple[str, ...] | None = None) -> None:
        unknown = sorted(set(self.raw) - self.read)
        if unknown:
            known = ", ".join(sorted(allowed or self.read))
            raise SpecError(self.at(unknown[0]), f"unknown field (known here: {known})")

    def integer(self, key: str, default: int, lo: int, hi: int) -> int:
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(self.at(key), f"must be an integer, got {kind(value)}")
        if not lo <= value <= hi:
            raise SpecError(self.at(key), f"is {value}; must be in [{lo}, {hi}]")
        return value

    def number(self, key: str, default: float | None, lo: float, hi: float, *,
               above_lo: bool = False, required: bool = False) -> float:
        value = self.get(key, default, required=required)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SpecError(self.at(key), f"must be a number, got {kind(value)}")
        value = float(value)
        low_ok = value > lo if above_lo else value >= lo
        if not (math.isfinite(value) and low_ok and value <= hi):
            bound = f"({lo}" if above_lo else f"[{lo}"
            raise SpecError(self.at(key), f"is {value:g}; must be in {bound}, {hi:g}]")
        return value

    def text(self, key: str, default: str | None = None, *, required: bool = False,
             pattern: re.Pattern | None = None, hint: str = "") -> str:
        value = self.get(key, default, required=required)
        return text(self.at(key), value, pattern, hint)


def kind(value: Any) -> str:
    return "nothing" if value is None else f"{type(value).__name__} {str(value)[:40]!r}"


def text(where: str, value: Any, pattern: re.Pattern | None = None, hint: str = "") -> str:
    if not isinstance(value, str):
        raise SpecError(where, f"must be a string, got {kind(value)}")
    if not value.strip():
        raise SpecError(where, "is empty")
    if len(value) > MAX_TEXT or any(ord(c) < 32 and c != "\t" for c in value):
        raise SpecError(where, f"must be one line of at most {MAX_TEXT} characters")
    if pattern is not None and not pattern.fullmatch(value):
        raise SpecError(where, f"{value[:40]!r} {hint}")
    return value


def words(where: str, value: Any, *, empty_ok: bool) -> tuple[str, ...]:
    """A command line: a list of strings, or one string split as a shell would (no shell runs)."""
    if isinstance(value, str):
        try:
            value = shlex.split(value)
        except ValueError as e:
            raise SpecError(where, f"cannot be split into words: {e}") from None
    if value is None:
        value = []
    if not isinstance(value, list):
        raise SpecError(where, f"must be a list of strings or a string, got {kind(value)}")
    if not value and not empty_ok:
        raise SpecError(where, "is empty; give the program and its arguments")
    if len(value) > MAX_ARGS:
        raise SpecError(where, f"has {len(value)} words; at most {MAX_ARGS}")
    words = []
    for i, word in enumerate(value):
        if i == 0 or not isinstance(word, str) or word:
            word = text(f"{where}[{i}]", word)  # the program itself may not be empty
        words.append(word)
    return tuple(words)
