"""Checkpoints of one PS's partition: numbered files, written atomically, verified on load.

Each PS writes its own files `ps-<index>-of-<num_ps>-<number>.ckpt` into the checkpoint
directory (several PS can share one directory and checkpoint in parallel). A file is written
as `.<name>.tmp-<pid>`, flushed and fsynced, then renamed (atomic on POSIX), and the directory
is fsynced: a reader sees a whole checkpoint or none. A file is

    MAGIC | torch.save payload | TRAILER_MAGIC | payload length (8 bytes) | sha256 (32 bytes)

so a truncated or damaged file is recognized. On start the newest file that verifies is
restored; one that does not is logged, renamed to `*.corrupt`, and the one before it is used.

Since format 2 (`EPSCKPT2`) the payload keeps tensor bytes out of the pickle, so that neither
writing nor restoring needs a second copy of the partition in memory:

    EPSCKPT2 | skeleton length (8 bytes) | skeleton | tensor bytes ... | trailer (as above)

The skeleton is a `torch.save` of the state with every tensor replaced by `{"__tensor__": i}`
and the list of (dtype, shape) of the tensors, whose raw bytes follow in order. Writing sends
each tensor's own memory to the file; restoring reads each tensor's bytes straight into the
tensor it becomes, hashing as it goes, and refuses the whole file when the trailer does not
match. Files of format 1 (`EPSCKPT1`, a plain `torch.save`) are still read.

Delta files (`--delta-interval`, ps.deltas) hold only what changed since the previous file and
are written the same way; restore is the newest full checkpoint plus its deltas in order.
"""
from __future__ import annotations

import hashlib
import io
import logging
import math
import os
import re
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .deltas import DeltaFiles
from .store.params import ParamStore
from pswire.frames import as_buffer

log = logging.getLogger(__name__)

MAGIC = b"EPSCKPT1"   # format 1: MAGIC | torch.save payload | trailer (read only)
MAGIC2 = b"EPSCKPT2"  # format 2: tensors' bytes outside the pickle (written)
TRAILER_MAGIC = b"EPSEND01"
TRAILER_LEN = len(TRAILER_MAGIC) + 8 + 32
TENSOR_KEY = "__tensor__"
_DTYPES = {str(d): d for d in (torch.float32, torch.float64, torch.float16, torch.bfloat16,
                               torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8,
                               torch.bool)}
_READ_CHUNK = 16 << 20


class CorruptCheckpoint(Exception):
    pass


@dataclass
class CheckpointInfo:
    path: Path
    number: int
    bytes: int = 0
    seconds: float = 0.0
    time_ms: int = 0  # when the snapshot was taken (Unix ms)
    applied: dict = field(default_factory=dict)  # client_id -> last push seq it holds
    delta: bool = False  # a delta file (ps.deltas), not a full checkpoint


class _HashingWriter:
    """A write-only file wrapper that hashes and counts what goes through it."""

    def __init__(self, f):
        self.f = f
        self.sha = hashlib.sha256()
        self.n = 0

    def write(self, data) -> int:
        self.sha.update(data)
        self.n += len(memoryview(data).cast("B"))
        return self.f.write(data)

    def flush(self) -> None:
        self.f.flush()


def encode(state: dict, f) -> int:
    """Write a checkpoint file body (format 2) to the open binary file `f`; returns its size.
    Tensor bytes are written from the tensors' own memory, never copied."""
    tensors: list[torch.Tensor] = []
    skeleton = io.BytesIO()
    torch.save({"state": _strip(state, tensors),
                "tensors": [(str(t.dtype), list(t.shape)) for t in tensors]}, skeleton)
    f.write(MAGIC2)
    w = _HashingWriter(f)
    w.write(struct.pack("<Q", skeleton.tell()))
    w.write(skeleton.getbuffer())
    for t in tensors:
        if t.numel():
            w.write(as_buffer(t))
    f.write(TRAILER_MAGIC + struct.pack("<Q", w.n) + w.sha.digest())
    return len(MAGIC2) + w.n + TRAILER_LEN


def decode(data: bytes) -> dict:
    """The state in a checkpoint file's bytes; CorruptCheckpoint if it does not verify."""
    return read(io.BytesIO(data), len(data))


def read(f, size: int) -> dict:
    """The state in an open checkpoint file of `size` bytes; CorruptCheckpoint if it does not
    verify. Format 2 is read tensor by tensor into the tensors it becomes (peak memory: the
    state once); format 1 is read whole."""
    if size < len(MAGIC) + TRAILER_LEN:
        raise CorruptCheckpoint("not a checkpoint file (too short)")
    magic = f.read(len(MAGIC))
    if magic == MAGIC:
        return _decode_v1(magic + f.read())
    if magic != MAGIC2:
        raise CorruptCheckpoint("not a checkpoint file (bad header)")
    sha = hashlib.sha256()
    payload = size - len(MAGIC2) - TRAILER_LEN

    def take(n: int) -> bytes:
        data = f.read(n)
        if len(data) != n:
            raise CorruptCheckpoint("the file is truncated")
        sha.update(data)
        return data

    (length,) = struct.unpack("<Q", take(8))
    if length > payload - 8:
        raise CorruptCheckpoint(f"the skeleton length {length} exceeds the file: it is damaged")
    try:
        skeleton = torch.load(io.BytesIO(take(length)), weights_only=True)
        metas = [(_DTYPES[dtype], tuple(int(d) for d in shape))
                 for dtype, shape in skeleton["tensors"]]
        if any(d < 0 for _, shape in metas for d in shape):
            raise CorruptCheckpoint("a tensor of negative shape")
    except CorruptCheckpoint:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure to read it means unusable
        raise CorruptCheckpoint(f"the skeleton does not load: {exc}") from exc
    left = payload - 8 - length
    tensors = []
    for dtype, shape in metas:
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes > left:
            raise CorruptCheckpoint("the tensors described exceed the file: it is damaged")
        left -= nbytes
        t = torch.empty(shape, dtype=dtype)
        if nbytes:
            _read_into(f, t.reshape(-1).view(torch.uint8).numpy(), sha)
        tensors.append(t)
    trailer = f.read(TRAILER_LEN)
    if left or len(trailer) != TRAILER_LEN or not trailer.startswith(TRAILER_MAGIC):
        raise CorruptCheckpoint("the file is truncated (no trailer where expected)")
    (declared,) = struct.unpack("<Q", trailer[len(TRAILER_MAGIC):len(TRAILER_MAGIC) + 8])
    if declared != payload:
        raise CorruptCheckpoint(f"the payload is {payload} bytes, the trailer says {declared}")
    if sha.digest() != trailer[-32:]:
        raise CorruptCheckpoint("the sha256 checksum does not match: the file is damaged")
    return _fill(skeleton["state"], tensors)


def _read_into(f, out, sha) -> None:
    view = memoryview(out).cast("B")
    done = 0
    while done < len(view):
        n = f.readinto(view[done:done + _READ_CHUNK])
        if not n:
            raise CorruptCheckpoint("the file is truncated")
        sha.update(view[done:done + n])
        done += n


def _strip(obj, tensors: list):
    """`obj` with each tensor replaced by {TENSOR_KEY: its index in `tensors`}."""
    if isinstance(obj, torch.Tensor):
        t = obj.detach()
        tensors.append(t if t.is_contiguous() else t.contiguous())
        return {TENSOR_KEY: len(tensors) - 1}
    if isinstance(obj, dict):
        return {k: _strip(v, tensors) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_strip(v, tensors) for v in obj)
    return obj


def _fill(obj, tensors: list):
    if isinstance(obj, dict):
        if len(obj) == 1 and TENSOR_KEY in obj:
            try:
                return tensors[obj[TENSOR_KEY]]
            except (IndexError, TypeError):
                raise CorruptCheckpoint("the skeleton names a tensor the file lacks") from None
        return {k: _fill(v, tensors) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_fill(v, tensors) for v in obj)
    return obj


def _decode_v1(data: bytes) -> dict:
    trailer = data[-TRAILER_LEN:]
    if not trailer.startswith(TRAILER_MAGIC):
        raise CorruptCheckpoint("the file is truncated (no trailer)")
    (length,) = struct.unpack("<Q", trailer[len(TRAILER_MAGIC):len(TRAILER_MAGIC) + 8])
    payload = memoryview(data)[len(MAGIC):-TRAILER_LEN]
    if length != len(payload):
        raise CorruptCheckpoint(f"the payload is {len(payload)} bytes, the trailer says {length}")
    if hashlib.sha256(payload).digest() != trailer[-32:]:
        raise CorruptCheckpoint("the sha256 checksum does not match: the file is damaged")
    try:
        return torch.load(io.BytesIO(payload), weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any failure to read it means unusable
        raise CorruptCheckpoint(f"the payload does not load: {exc}") from exc


class CheckpointDir:
    """The checkpoint files of PS `index` of `num_ps` in `directory`."""

    def __init__(self, directory: str | Path, index: int, num_ps: int, keep: int = 3):
        self.directory = Path(directory)
        self.index = index
        self.num_ps = num_ps
        self.keep = max(1, keep)
        # any PS count: a file records the hash slots it holds (ps/slots/ownership.py), and a PS
        # set resized since restores through them (docs/ps.md, "Slots and resize")
        self._pattern = re.compile(rf"ps-{index}-of-\d+-(\d+)\.ckpt$")
        self.deltas = DeltaFiles(self.directory, index, num_ps)

    def name(self, number: int) -> str:
        return f"ps-{self.index}-of-{self.num_ps}-{number:08d}.ckpt"

    def files(self) -> list[tuple[int, Path]]:
        """(number, path) of this PS's checkpoint files, oldest first."""
        out = []
        for p in self.directory.iterdir() if self.directory.is_dir() else ():
            m = self._pattern.match(p.name)
            if m:
                out.append((int(m.group(1)), p))
        return sorted(out)

    def write(self, state: dict, number: int, name: str | None = None) -> CheckpointInfo:
        """Write `state` as checkpoint `number` (a full one unless `name`, a delta's, is
        given), atomically."""
        start = time.perf_counter()
        self.directory.mkdir(parents=True, exist_ok=True)
        final = self.directory / (name or self.name(number))
        tmp = self.directory / f".{final.name}.tmp-{os.getpid()}"
        try:
            with open(tmp, "wb") as f:
                size = encode(state, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _fsync_dir(self.directory)
        self._prune()
        return CheckpointInfo(final, number, size, time.perf_counter() - start,
                              int(time.time() * 1000))

    def _prune(self) -> None:
        files = self.files()
        for _, path in files[: max(0, len(files) - self.keep)]:
            path.unlink(missing_ok=True)
        self.deltas.prune({number for number, _ in files[-self.keep:]})

    def clean_temporaries(self) -> None:
        """Remove half-written files left by a process that died while writing."""
        for p in self.directory.glob(f".ps-{self.index}-of-*-*.tmp-*"):
            p.unlink(missing_ok=True)

    def load_newest(self) -> tuple[dict, CheckpointInfo] | None:
        """The newest checkpoint that verifies (older ones are tried when it does not)."""
        for number, path in reversed(self.files()):
            try:
                state = read_file(path)
            except (CorruptCheckpoint, OSError) as exc:
                log.error("refusing checkpoint %s: %s; it is renamed to %s.corrupt and the "
                          "previous checkpoint is tried", path.name, exc, path.name)
                try:
                    path.rename(path.with_name(path.name + ".corrupt"))
                except OSError:
                    pass
                continue
            return state, CheckpointInfo(path, number, path.stat().st_size)
        return None


def read_file(path: Path) -> dict:
    """The state in the checkpoint (or delta) file at `path`; CorruptCheckpoint if it does
    not verify."""
    with open(path, "rb") as f:
        return read(f, os.fstat(f.fileno()).st_size)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class Checkpointer:
    """Takes checkpoints of a ParamStore into a CheckpointDir, one at a time, and restores one.

    The snapshot is a pinned view taken under the store's exclusive gate (pushes pause only
    while it takes references; pulls not at all); the file is written from that view while
    pushes go on, each copying a pinned tensor before its first change (ParamStore).
    """

    def __init__(self, store: ParamStore, directory: CheckpointDir):
        self.store = store
        self.dir = directory
        self._lock = threading.Lock()
        self.written = 0
        self.last: CheckpointInfo | None = None
        self.restored: CheckpointInfo | None = None
        self._last_mutations = -1
        self._next_number = 1
        self._base: int | None = None  # the full checkpoint the live state's deltas chain from
        self._why_no_base = "no full checkpoint was written or restored yet"
        self._restores = store.restores  # a restore over the state means: write a full next
        self.deltas_written = 0
        store.file_tables_with(self.file_now)  # a change of tables' bounds is filed at once

    def file_now(self) -> CheckpointInfo | None:
        """Write what the store holds now: a delta (a full file when no chain is open)."""
        return self.write(delta=True)

    def restore(self) -> CheckpointInfo | None:
        self.dir.clean_temporaries()
        files = self.dir.files()
        self._next_number = max(files[-1][0] if files else 0,
                                self.dir.deltas.newest_number()) + 1
        found = self.dir.load_newest()
        self._last_mutations = self._mutations()
        if found is None:
            if files:
                log.error("no checkpoint in %s could be used; starting empty", self.dir.directory)
            return None
        state, info = found
        info.time_ms = int(state.get("taken_ms") or info.path.stat().st_mtime * 1000)
        info.applied = {str(cid): int(seq) for cid, seq, _ in state.get("applied", [])}
        self.store.restore(state)
        self._base = info.number
        info = self._apply_deltas(info)
        # slots a move wrote here before its commit: the master's first layout settles them
        self.store.ownership.settle = True
        self._restores = self.store.restores
        self.restored = self.last = info
        self._last_mutations = self._mutations()
        return info

    def _apply_deltas(self, info: CheckpointInfo) -> CheckpointInfo:
        """Apply the deltas of full checkpoint `info` in order; returns the last file's info."""
        chain = self.dir.deltas.chain(info.number)
        for at, (number, path) in enumerate(chain):
            try:
                state = read_file(path)
            except (CorruptCheckpoint, OSError) as exc:
                self.dir.deltas.orphan([p for _, p in chain[at:]],
                                       f"{path.name} does not verify: {exc}")
                self._unchain(f"delta {path.name} did not verify at restore")
                break
            self.store.apply_delta(state)
            info = CheckpointInfo(path, number, path.stat().st_size,
                                  time_ms=int(state.get("taken_ms") or 0), delta=True)
            info.applied = {str(cid): int(seq) for cid, seq, _ in state.get("applied", [])}
            log.info("applied delta %s", path.name)
        return info

    def _unchain(self, why: str) -> None:
        """No delta can follow the files written so far: the next file is full, for `why`."""
        self._base, self._why_no_base = None, why

    def _mutations(self) -> int:
        s, tables = self.store.stats, self.store.tables.values()  # + reads that change a table
        return (s.pushes + s.row_pushes + int(self.store.initialized)
                + sum(t.tick for t in tables if t.spec.stateful_reads))

    def write(self, only_if_changed: bool = False, delta: bool = False) -> CheckpointInfo | None:
        """Write a full checkpoint, or with `delta` only what changed since the last file
        (a full one when there is no chain to add to: none written or restored yet, a
        restore over the state since, a failed write, a broken chain at restore; or when the
        changes are no smaller than the tables: the log line says which)."""
        with self._lock:
            mutations = self._mutations()
            if only_if_changed and mutations == self._last_mutations:
                return None
            # taken before the snapshot: an update that lands in between is in it, yet its
            # loss would be counted (the count errs toward lost, never toward trained)
            taken_ms = int(time.time() * 1000)
            number = self._next_number
            if self.store.restores != self._restores:
                self._restores = self.store.restores
                self._unchain("the state was replaced since the last file (a restore)")
            asked, why = delta, "" if self._base is not None else self._why_no_base
            delta = delta and not why
            with self.store.snapshot_view(delta=delta, clean=True) as state:
                delta = state["delta"]  # no smaller than the tables: a full file
                why = state.pop("why_full", why)
                state["taken_ms"] = taken_ms
                try:
                    if delta:
                        state["base"] = self._base
                        info = self.dir.write(state, number,
                                              self.dir.deltas.name(number, self._base))
                    else:
                        info = self.dir.write(state, number)
                except BaseException:
                    # what this file held is in no file: write a full next
                    self._unchain(f"writing file {number} failed")
                    raise
            if not delta:
                self._base = number
            info.time_ms, info.delta = taken_ms, delta
            self._next_number += 1
            self.written += 1
            self.deltas_written += int(delta)
            self.last = info
            self._last_mutations = mutations
            log.info("%s %s: %d bytes in %.3fs%s", "delta" if delta else "checkpoint",
                     info.path.name, info.bytes, info.seconds,
                     f" (full, not a delta: {why})" if asked and not delta else "")
            return info

    def run_periodic(self, interval: float, stop: threading.Event, delta: bool = False) -> None:
        """Write a checkpoint (a delta with `delta`) every `interval` seconds when something
        changed, until `stop`."""
        while not stop.wait(interval):
            try:
                self.write(only_if_changed=True, delta=delta)
            except Exception:  # noqa: BLE001 - keep serving; the next try may succeed
                log.exception("periodic checkpoint failed")
