"""Hostile requests built from protobuf descriptors: for a base request that a server accepts,
one variant per field (nested messages, repeated fields and maps included) per hostile value
of that field's type: large, negative and max-value numbers, NaN and infinities, unknown enum
values, empty, unknown, long and control-character strings, huge repeated counts.

A test sends each variant and checks the server's answer (tests/master/test_hostile_walk.py,
tests/ps/test_control_bounds.py). A new field or RPC is walked without a change here.
"""
from __future__ import annotations

import math
from typing import Iterator

from google.protobuf.descriptor import FieldDescriptor as F
from google.protobuf.message import Message

LONG = 100_000  # characters: far past every name bound, well under the 4 MiB message limit
MANY = 5_000    # repeated entries: past every count bound

INTS = {
    F.TYPE_INT32: [-1, -(1 << 31), (1 << 31) - 1],
    F.TYPE_SINT32: [-1, -(1 << 31), (1 << 31) - 1],
    F.TYPE_SFIXED32: [-1, -(1 << 31), (1 << 31) - 1],
    F.TYPE_INT64: [-1, -(1 << 63), (1 << 63) - 1, (1 << 53) + 1],
    F.TYPE_SINT64: [-1, -(1 << 63), (1 << 63) - 1],
    F.TYPE_SFIXED64: [-1, -(1 << 63), (1 << 63) - 1],
    F.TYPE_UINT32: [(1 << 31), (1 << 32) - 1],
    F.TYPE_FIXED32: [(1 << 31), (1 << 32) - 1],
    F.TYPE_UINT64: [(1 << 63) - 1, 1 << 63, (1 << 64) - 1],
    F.TYPE_FIXED64: [(1 << 63) - 1, 1 << 63, (1 << 64) - 1],
}
FLOATS = [math.nan, math.inf, -math.inf, -1.0, 1e300]
STRINGS = ["", "zz-unknown", "x" * LONG, "a\x00b\nc", "\u2028", "\ud7ff\U0001f600" * 40]


def values(field) -> list:
    """The hostile values of one scalar field's type."""
    if field.type in INTS:
        return INTS[field.type]
    if field.type in (F.TYPE_DOUBLE, F.TYPE_FLOAT):
        return FLOATS if field.type == F.TYPE_DOUBLE else FLOATS[:4]
    if field.type == F.TYPE_ENUM:
        return [-1, 999, (1 << 31) - 1]
    if field.type == F.TYPE_STRING:
        return STRINGS
    if field.type == F.TYPE_BYTES:
        return [b"", b"\xff" * LONG]
    if field.type == F.TYPE_BOOL:
        return [True, False]
    raise AssertionError(f"no hostile values for field type {field.type}")


def _is_map(field) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def variants(base: Message, depth: int = 0) -> Iterator[tuple[str, Message]]:
    """(field path, request): `base` with one field made hostile, for every field of its
    message type, recursively (a nested message is made from `base`'s own, so the rest of it
    stays what the server accepts)."""
    for field in base.DESCRIPTOR.fields:
        for path, value in _field_variants(base, field, depth):
            msg = type(base)()
            msg.CopyFrom(base)
            msg.ClearField(field.name)
            _assign(msg, field, value)
            yield path, msg


def _field_variants(base: Message, field, depth: int) -> Iterator[tuple[str, object]]:
    name = field.name
    if _is_map(field):
        key, val = (field.message_type.fields_by_name[k] for k in ("key", "value"))
        current = dict(getattr(base, name))
        k0 = next(iter(current), values(key)[0] if key.type != F.TYPE_STRING else "k")
        for k in values(key):
            yield f"{name}[key={_short(k)}]", {**current, k: _plain(val, current.get(k0))}
        if val.message_type is None:
            for v in values(val):
                yield f"{name}[{_short(k0)}]={_short(v)}", {**current, k0: v}
        many = {_key(key, i): _plain(val, current.get(k0)) for i in range(MANY)}
        yield f"{name}[{MANY} entries]", many
        return
    if field.message_type is not None:
        current = getattr(base, name)
        subs = list(current) if field.is_repeated else [current]
        sub = subs[0] if subs else type(current)() if not field.is_repeated else \
            _empty(field)
        if depth < 3:
            for path, changed in variants(sub, depth + 1):
                yield f"{name}.{path}", [changed] + subs[1:] if field.is_repeated else changed
        if field.is_repeated:
            yield f"{name}[{MANY} items]", [sub] * MANY
        return
    if field.is_repeated:
        current = list(getattr(base, name))
        for v in values(field):
            yield f"{name}[]={_short(v)}", current + [v]
        filler = current[0] if current else values(field)[0]
        yield f"{name}[{MANY} items]", [filler] * MANY
        return
    for v in values(field):
        yield f"{name}={_short(v)}", v


def _assign(msg: Message, field, value) -> None:
    target = getattr(msg, field.name)
    if _is_map(field):
        if field.message_type.fields_by_name["value"].message_type is None:
            target.update(value)
        else:
            for k, v in value.items():
                target[k].CopyFrom(v)
    elif field.is_repeated:
        target.extend(value)
    elif field.message_type is not None:
        target.CopyFrom(value)
    else:
        setattr(msg, field.name, value)


def _empty(field) -> Message:
    from google.protobuf import message_factory

    return message_factory.GetMessageClass(field.message_type)()


def _plain(field, current):
    """An ordinary value for a map's value field (the one it holds, else a harmless one)."""
    if current is not None:
        return current
    if field.message_type is not None:
        return _empty(field)
    return {F.TYPE_STRING: "v", F.TYPE_BOOL: False, F.TYPE_BYTES: b""}.get(
        field.type, 0.0 if field.type in (F.TYPE_DOUBLE, F.TYPE_FLOAT) else 1)


def _key(field, i: int):
    return f"k{i}" if field.type == F.TYPE_STRING else i


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 24 else f"{text[:16]}...({len(text)} chars)"
