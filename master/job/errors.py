"""The one error a job spec or a market trace refuses with, naming what to fix."""
from __future__ import annotations


class SpecError(ValueError):
    """A spec field that cannot run; `field` is its dotted path, e.g. `workers.min`."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
