"""The data plane's wire format: dtype names, tensor <-> frame, status codes.

A tensor travels as one frame holding the raw bytes of a contiguous tensor (native byte
order: PS and workers run on little-endian machines). Sending takes a view of the tensor's
memory, never a copy; receiving wraps the frame's memory with `torch.frombuffer`.

Small tensors of one message may travel packed instead (`Push.packed_count`,
`PullResult.packed_count`): the first k tensors of the message, all of one dtype, as one frame
of their bytes one after the other, each other tensor in a frame of its own after it. A step of
a small model pushes and pulls a handful of tensors of a few KB each, and a frame costs both
sides more than copying a few KB: `packing` picks the tensors (the small ones of one dtype),
`pack` makes the frame, `decode` reads either form back.
"""
from __future__ import annotations

import math
import threading
import warnings

import numpy as np
import torch

from protos import ps_pb2

from rpckit.errors import ServiceError, invalid, quote

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
_NUMPY_DTYPES = frozenset({torch.float32, torch.float64, torch.float16, torch.int64})
FLOAT_DTYPES = ("float32", "float64", "float16", "bfloat16")
MAX_DIMS = 8
# Strides must fit in int64 even for an empty tensor ([0, 2**40, 2**40] has 0 bytes but
# strides that overflow): shapes whose non-zero extent is beyond this are refused.
MAX_SPAN_BYTES = 2**62

# torch.frombuffer warns about read-only buffers; a received frame is only read.
warnings.filterwarnings("ignore", message="The given buffer is not writable", category=UserWarning)


def dtype_name(t: torch.Tensor) -> str:
    try:
        return DTYPE_NAMES[t.dtype]
    except KeyError:
        raise invalid(f"dtype {t.dtype} is not supported; use one of {', '.join(DTYPES)}") from None


def meta_of(name: str, t: torch.Tensor) -> ps_pb2.TensorMeta:
    return ps_pb2.TensorMeta(name=name, dtype=dtype_name(t), shape=list(t.shape))


def as_buffer(t: torch.Tensor):
    """A zero-copy byte view of a tensor for a zmq frame (made contiguous first if needed)."""
    if t.requires_grad:  # detach() only where numpy() needs it: it makes a tensor object
        t = t.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    if t.numel() == 0:
        return b""
    if t.dtype in _NUMPY_DTYPES:  # one call instead of three: this runs per tensor per step
        return t.numpy().reshape(-1).view(np.uint8)
    return t.reshape(-1).view(torch.uint8).numpy()


def check_meta(meta: ps_pb2.TensorMeta, allowed=tuple(DTYPES)) -> tuple[torch.dtype, tuple, int]:
    """Validate a TensorMeta; returns (dtype, shape, nbytes)."""
    name = meta.dtype
    if name not in allowed:
        raise invalid(f"tensor {meta.name!r}: dtype {name!r} is not one of "
                      f"{', '.join(allowed)}")
    # [:] copies the repeated field in C: iterating it would end in a raised IndexError
    shape = tuple(meta.shape[:])
    if len(shape) > MAX_DIMS or (shape and min(shape) < 0):
        raise invalid(f"tensor {meta.name!r}: shape {list(shape)} is not a valid shape "
                      f"(at most {MAX_DIMS} non-negative dimensions)")
    dtype = DTYPES[name]
    numel = math.prod(shape)
    # what strides are made of, even when another dimension is 0
    span = numel if numel else math.prod(max(d, 1) for d in shape)
    if span * dtype.itemsize > MAX_SPAN_BYTES:
        raise invalid(f"tensor {quote(meta.name)}: shape {list(shape)} is too "
                      "large for any tensor")
    return dtype, shape, numel * dtype.itemsize


_all_finite = None  # pswire.jit.all_finite, imported on first use (numba is heavy to import)


def require_finite(t, what) -> None:
    """Refuse NaN and infinities: one such gradient would poison the tensor (and, through the
    optimizer state, every later update) for good. One compiled pass (pswire.jit) for float32
    and float64, a sum for the other float types; only when that fails is every value
    checked. `t`: a tensor, or a float32 numpy array (`rows_of`'s). `what` names the values in
    the refusal: a string, or a callable making it (a request's path then formats no message
    it does not send)."""
    if isinstance(t, np.ndarray):
        if not t.size or _finite_array(t):
            return
        t = torch.from_numpy(t)  # to say so below
    elif t.numel() == 0:
        return
    elif t.dtype in (torch.float32, torch.float64):  # a torch call costs more than the pass
        if _finite_array((t.detach() if t.requires_grad else t).numpy()):
            return
    elif torch.isfinite(t.sum()):
        return
    if not bool(torch.isfinite(t).all()):
        raise invalid(f"{what() if callable(what) else what} has NaN or infinite values; "
                      "nothing was applied")


def _finite_array(a: np.ndarray) -> bool:
    global _all_finite
    if _all_finite is None:
        from .jit import all_finite as _all_finite
    return bool(_all_finite(a.reshape(-1)))


def _array_of(buf: memoryview, dtype) -> np.ndarray:
    """A received frame's bytes as a 1-D numpy array over its memory, copied when read-only
    (bytes): numba compiles a read-only array as another type, which the warm-up did not load
    (received ZeroMQ frames are writable)."""
    a = np.frombuffer(buf, dtype=dtype)
    return a if a.flags.writeable else a.copy()


def ids_of(frame) -> np.ndarray:
    """A received frame of int64 ids as a numpy array: the form a PS's loops take (a torch
    tensor would be made only to be `.numpy()`ed at every step)."""
    buf = buffer_of(frame)
    if buf.nbytes % 8:
        raise invalid(f"the ids frame has {buf.nbytes} bytes, not a whole number of int64")
    return _array_of(buf, np.int64)


def rows_of(frame, count: int, dim: int, what: str) -> np.ndarray:
    """A received frame of `count` float32 rows of `dim` as a numpy array [count, dim]: the
    form a PS's row updates take, as `ids_of` for ids."""
    buf = buffer_of(frame)
    if buf.nbytes != count * dim * 4:
        raise invalid(f"{what}: the frame has {buf.nbytes} bytes but shape [{count}, {dim}] of "
                      f"float32 needs {count * dim * 4}")
    return _array_of(buf, np.float32).reshape(count, dim)


def marks_of(frame, count: int, what: str) -> np.ndarray:
    """A received mask of `count` ids (uint8, 1 marked, 0 not) as a bool numpy array; a frame
    of another length, or a byte other than 0 or 1, is refused (INVALID_ARGUMENT)."""
    mask = _array_of(buffer_of(frame), np.uint8)
    if mask.size != count:
        raise invalid(f"{what}: the mask has {mask.size} bytes for {count} ids; one byte (0 or "
                      "1) per id read")
    if mask.size and not _flags_only(mask):
        raise invalid(f"{what}: a mask byte is neither 0 nor 1")
    return mask.view(np.bool_)


_jit_flags_only = None  # pswire.jit.flags_only, imported on first use (as `_all_finite`)


def _flags_only(mask: np.ndarray) -> bool:
    """pswire.jit.flags_only (one compiled pass; numpy's max took 20 us a Step's mask)."""
    global _jit_flags_only
    if _jit_flags_only is None:
        from .jit import flags_only as _jit_flags_only
    return bool(_jit_flags_only(mask))


def require_row_grads(grads, count: int, dim: int, table: str) -> None:
    """Refuse row gradients of table `table` that are not float32 [count, dim] (a tensor, or
    numpy as `rows_of` gives them) or not finite."""
    dtype = np.float32 if isinstance(grads, np.ndarray) else torch.float32
    if grads.dtype != dtype or tuple(grads.shape) != (count, dim):
        raise invalid(f"table {table!r}: gradients must be float32 [{count}, {dim}], got "
                      f"{DTYPE_NAMES.get(grads.dtype, grads.dtype)}{list(grads.shape)}")
    require_finite(grads, lambda: f"the row gradients of table {quote(table)}")


def _view(t: torch.Tensor, shape) -> torch.Tensor:
    """`t.view(shape)`; a tuple given whole goes through torch's parser by a TypeError first
    (it tries the one-int overload), so its dimensions are passed one by one. A 1-D shape of a
    1-D tensor (a frame's tensor is 1-D, of the shape's size) is the tensor itself: the first
    view of a fresh frame's tensor took about 20 us in a PS's Step."""
    if len(shape) == 1 and t.dim() == 1 and t.shape[0] == shape[0]:
        return t
    return t.view(*shape) if shape else t.view(())


def buffer_of(frame) -> memoryview:
    """A received frame's bytes (zmq.Frame, memoryview or bytes) as a memoryview, no copy."""
    return frame.buffer if hasattr(frame, "buffer") else memoryview(frame)


def from_frame(frame, dtype: torch.dtype, shape: tuple, what: str) -> torch.Tensor:
    """Wrap a received frame (zmq.Frame, memoryview or bytes) as a tensor, without a copy."""
    buf = buffer_of(frame)
    itemsize = dtype.itemsize
    numel = 1
    for d in shape:
        numel *= d
    if buf.nbytes != numel * itemsize:
        raise invalid(f"{what}: the frame has {buf.nbytes} bytes but shape {list(shape)} of "
                      f"{DTYPE_NAMES[dtype]} needs {numel * itemsize}")
    if numel == 0:
        return torch.empty(shape, dtype=dtype)
    return _view(torch.frombuffer(buf, dtype=dtype), shape)


PACK_BELOW_BYTES = 64 * 1024  # a tensor this large or larger keeps a frame of its own


def packing(tensors: list[torch.Tensor]) -> tuple[list[int], list[int]]:
    """(indexes packed, indexes sent alone): the tensors under PACK_BELOW_BYTES with the dtype
    of the first such one are packed when there are at least two of them; the rest, in their
    order, travel one frame each."""
    packed: list[int] = []
    dtype = None
    for i, t in enumerate(tensors):
        if t.numel() * t.element_size() < PACK_BELOW_BYTES and (dtype is None or t.dtype == dtype):
            dtype = t.dtype
            packed.append(i)
    if len(packed) < 2:
        return [], list(range(len(tensors)))
    chosen = set(packed)
    return packed, [i for i in range(len(tensors)) if i not in chosen]


def pack(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The packed frame's tensor: the tensors' values one after the other (one copy)."""
    return torch.cat([(t.detach() if t.requires_grad else t).reshape(-1) for t in tensors])


def frames_of(metas_count: int, packed_count: int) -> int:
    """How many frames carry `metas_count` tensors of which the first `packed_count` packed."""
    return (1 if packed_count else 0) + metas_count - packed_count


def decode(metas, frames: list, packed_count: int = 0, allowed=tuple(DTYPES),
           what: str = "tensor") -> tuple[list[tuple[str, torch.Tensor]], torch.Tensor | None]:
    """The tensors of `metas` over `frames` (as many as `frames_of` says): [(name, tensor)] in
    the order of `metas`, each wrapping the frames' memory (no copy), and the packed frame's
    flat tensor (None without one). Raises INVALID_ARGUMENT for frames that do not fit."""
    _check_counts(len(metas), packed_count, frames)
    return _apply(_plan(metas, packed_count, allowed), frames, packed_count, what)


def _check_counts(count: int, packed_count: int, frames: list) -> None:
    if not 0 <= packed_count <= count or packed_count == 1:
        raise invalid(f"packed_count {packed_count} does not fit {count} tensors (0, or 2 to "
                      f"{count})")
    if len(frames) != frames_of(count, packed_count):
        packed = f" ({packed_count} packed)" if packed_count else ""
        raise invalid(f"the header describes {count} tensors{packed} but {len(frames)} buffer "
                      "frames followed")


def _plan(metas, packed_count: int, allowed) -> tuple:
    """What `metas` say, checked (raises INVALID_ARGUMENT): (names, the packed tensors'
    dtype, their shapes, their element counts, (name, dtype, shape) of each other one)."""
    checked = [check_meta(m, allowed) for m in metas]
    packed = checked[:packed_count]
    dtype = packed[0][0] if packed else None
    if any(c[0] != dtype for c in packed):
        raise invalid("packed tensors must share one dtype, got "
                      f"{sorted({m.dtype for m in metas[:packed_count]})}")
    return ([m.name for m in metas], dtype, [c[1] for c in packed],
            [c[2] // dtype.itemsize for c in packed],
            [(m.name, c[0], c[1]) for m, c in zip(metas[packed_count:], checked[packed_count:])])


def _apply(plan: tuple, frames: list, packed_count: int, what: str, kept: tuple | None = None):
    """`decode`'s answer from a checked `_plan` over frames of the right count. `kept`: (flat
    buffer, its [(name, view)]) the packed frame is copied into, instead of views of it."""
    names, dtype, shapes, numels, alone = plan
    out, flat = [], None
    if packed_count:
        flat = from_frame(frames[0], dtype, (sum(numels),), f"the packed {what}s")
        if kept is not None:
            if flat.numel():
                kept[0].copy_(flat)
            flat, out = kept[0], kept[1][:]
        else:
            # split_with_sizes: the C method (Tensor.split is a Python wrapper around it)
            out += zip(names, map(_view, flat.split_with_sizes(numels), shapes))
    for (name, dtype, shape), frame in zip(alone, frames[1 if packed_count else 0:]):
        out.append((name, from_frame(frame, dtype, shape, f"{what} {name!r}")))
    return out, flat


KEEP_MAX_BYTES = 16 << 20  # a reusing Decoder's kept buffers, per thread


class Decoder:
    """`decode` for peers whose metas repeat (a PS answering a worker's pulls, a worker's
    pushes to a PS): the checked plan of the last metas seen from each peer is kept, and
    reused while a message's metas equal them (one comparison in C, where the checks are
    Python per tensor). At most `max_peers` are kept (then the oldest half are forgotten).

    `reuse=True` (a PS decoding gradients): the packed tensors are views of a buffer of the
    decoding thread's, kept per peer, into which each message's packed frame is copied (one
    memcpy of a few KB), so the views are made once per peer and plan instead of once per
    message (about 2 us each, most of a small push's decode). The caller must be done with
    what `decode` returned before the same thread decodes the same peer's next message: a PS
    handler thread answers one request at a time, and keeps nothing of a push's gradients."""

    def __init__(self, allowed=tuple(DTYPES), max_peers: int = 256, reuse: bool = False):
        self.allowed, self.max_peers = allowed, max_peers
        self._last: dict = {}  # peer -> (metas, packed_count, their _plan)
        self._reuse = threading.local() if reuse else None  # .kept: peer -> (plan, flat, views)

    def decode(self, peer, metas, frames: list, packed_count: int = 0, what: str = "tensor"
               ) -> tuple[list[tuple[str, torch.Tensor]], torch.Tensor | None]:
        """`decode(metas, frames, packed_count, self.allowed, what)`."""
        _check_counts(len(metas), packed_count, frames)
        last = self._last.get(peer)
        if last is None or last[1] != packed_count or last[0] != metas:
            plan = _plan(metas, packed_count, self.allowed)
            if len(self._last) >= self.max_peers:
                for old in list(self._last)[:self.max_peers // 2]:
                    self._last.pop(old, None)  # another thread may have forgotten it
            self._last[peer] = (metas, packed_count, plan)
        else:
            plan = last[2]
        kept = self._kept(peer, plan) if self._reuse is not None and packed_count else None
        return _apply(plan, frames, packed_count, what, kept)

    def _kept(self, peer, plan: tuple) -> tuple | None:
        """(flat buffer, its [(name, view)]) of this thread for `peer`'s packed tensors under
        `plan`, made on first need; None for a packed frame over KEEP_MAX_BYTES / 16 (then
        the views are of the frame itself)."""
        state = self._reuse
        kept = getattr(state, "kept", None)
        if kept is None:
            kept = state.kept = {}
            state.kept_bytes = 0
        entry = kept.get(peer)
        if entry is None or entry[0] is not plan:
            names, dtype, shapes, numels, _ = plan
            size = sum(numels) * dtype.itemsize
            if size > KEEP_MAX_BYTES // 16:
                return None
            if entry is not None:
                state.kept_bytes -= entry[1].nbytes
                del kept[peer]
            # bounded in count and bytes per thread: the oldest peers' buffers go first
            while kept and (len(kept) >= self.max_peers
                            or state.kept_bytes + size > KEEP_MAX_BYTES):
                state.kept_bytes -= kept.pop(next(iter(kept)))[1].nbytes
            flat = torch.empty(sum(numels), dtype=dtype)
            entry = kept[peer] = (plan, flat, list(zip(
                names, map(_view, flat.split_with_sizes(numels), shapes))))
            state.kept_bytes += size
        return entry[1], entry[2]


_CODE_NUMBERS = dict(ps_pb2.DataResponse.Code.items())


def code_number(code: str) -> int:
    try:
        return _CODE_NUMBERS[code]  # a dict: the enum wrapper's Value is Python code per call
    except KeyError:
        raise ValueError(f"no DataResponse code named {code!r}") from None


def code_name(number: int) -> str:
    return ps_pb2.DataResponse.Code.Name(number)


def error_response(exc: ServiceError, seq: int = 0) -> ps_pb2.DataResponse:
    # a WRONG_OWNER refusal (ps/slots/ownership.py) names the layout version the PS knows
    return ps_pb2.DataResponse(code=code_number(exc.code), reason=exc.reason, message=exc.message,
                               seq=seq, layout_version=getattr(exc, "layout_version", 0))
