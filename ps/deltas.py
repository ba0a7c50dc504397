"""Delta checkpoint files: only what changed since the previous file, chained to a full one.

A full checkpoint (`ps-I-of-N-<number>.ckpt`, ps.checkpoint) holds the whole partition. A
delta holds the dense tensors, the at-most-once table and, per embedding table, only the rows
touched since the previous file (full or delta), the ids of that file's rows that left since,
and the admission sketch's changed counters (ps.store.tables.files.delta); it is named

    ps-I-of-N-<number>-base-<base>.delta

where `base` is the number of the full checkpoint its chain starts from and `number` comes
from the same sequence as the full files', so a chain is ordered by number. A delta is
written and verified exactly like a full file (same format: temporary file, fsync, rename,
sha256 trailer), so a SIGKILL while one is written leaves the previous files whole.

Restore is the newest full checkpoint that verifies plus its deltas in order. A delta that
does not verify ends the chain: it and the later deltas of that chain are renamed `*.orphan`
(a later one without it would skip its changes), and the next checkpoint written is full.
Deltas fold into the next full checkpoint (written from the live state, which includes them);
deltas whose full was pruned are pruned with it.
"""
from __future__ import annotations

import logging
import re
from pathlib import Path

log = logging.getLogger(__name__)


class DeltaFiles:
    """The delta files of PS `index` of `num_ps` in `directory`."""

    def __init__(self, directory: Path, index: int, num_ps: int):
        self.directory = directory
        self._pattern = re.compile(rf"ps-{index}-of-\d+-(\d+)-base-(\d+)\.delta$")
        self._prefix = f"ps-{index}-of-{num_ps}-"

    def name(self, number: int, base: int) -> str:
        return f"{self._prefix}{number:08d}-base-{base:08d}.delta"

    def files(self) -> list[tuple[int, int, Path]]:
        """(number, base, path) of every delta, oldest first."""
        out = []
        for p in self.directory.iterdir() if self.directory.is_dir() else ():
            m = self._pattern.match(p.name)
            if m:
                out.append((int(m.group(1)), int(m.group(2)), p))
        return sorted(out)

    def chain(self, base: int) -> list[tuple[int, Path]]:
        """(number, path) of the deltas on top of full checkpoint `base`, in order."""
        return [(n, p) for n, b, p in self.files() if b == base and n > base]

    def newest_number(self) -> int:
        files = self.files()
        return files[-1][0] if files else 0

    def orphan(self, paths: list[Path], why: str) -> None:
        """Take a broken chain's deltas out of use (kept for a person to look at)."""
        for p in paths:
            log.error("delta %s is not applied (%s); renamed to %s.orphan", p.name, why, p.name)
            try:
                p.rename(p.with_name(p.name + ".orphan"))
            except OSError:
                pass

    def prune(self, kept_bases: set[int]) -> None:
        """Remove deltas whose full checkpoint is no longer kept."""
        for _, base, p in self.files():
            if base not in kept_bases:
                p.unlink(missing_ok=True)
