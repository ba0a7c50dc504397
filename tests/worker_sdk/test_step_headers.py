"""A Step's header is built from a kept template while what it describes repeats: each thing the
header says (names, dtypes, shapes, packing, the checked flag, tables, pulls) changes it."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from protos import ps_pb2
from pswire.frames import PACK_BELOW_BYTES, dtype_name, packing
from worker_sdk.ps import steps
from worker_sdk.ps.parts import Part, Rows


def _expected(grads: dict, versions: dict, checked: bool, part: Part, row_tables: list[str]):
    """The header as the fields say it, built field by field."""
    step = ps_pb2.Step()
    names = part.push
    if names:
        ts = [grads[n] for n in names]
        packed, alone = packing(ts)
        step.push.checked = checked
        step.push.packed_count = len(packed)
        for i in packed + alone:
            step.push.tensors.add(name=names[i], dtype=dtype_name(ts[i]), shape=ts[i].shape)
            step.push.versions.append(versions.get(names[i], 0))
    for table in row_tables:
        step.push_rows.add(table=table)
    if part.pull:
        step.pull.names.extend(part.pull)
        step.pull.packed = True
    for r in part.pull_rows:
        step.pull_rows.add(table=r.key)
    return step


CASES = [  # (gradient shapes and dtypes, checked, row tables, pulled names, pulled tables)
    ({"a": ((3,), torch.float32), "b": ((2, 2), torch.float32)}, False, ["t"], ["a"], ["t"]),
    ({"a": ((3,), torch.float32), "b": ((2, 2), torch.float32)}, False, ["t"], ["a"], ["t"]),
    ({"a": ((4,), torch.float32), "b": ((2, 2), torch.float32)}, False, ["t"], ["a"], ["t"]),
    ({"a": ((4,), torch.float64), "b": ((2, 2), torch.float32)}, False, ["t"], ["a"], ["t"]),
    ({"a": ((4,), torch.float64), "b": ((2, 2), torch.float32)}, True, ["t"], ["a"], ["t"]),
    ({"a": ((PACK_BELOW_BYTES,), torch.float32), "b": ((2,), torch.float32),
      "c": ((3,), torch.float32)}, True, ["t", "u"], ["a", "b"], []),
    ({}, False, [], ["a", "b"], ["t", "u"]),
    ({"b": ((2,), torch.float32)}, False, [], [], []),
]


@pytest.mark.parametrize("rounds", [1, 2])
def test_each_step_header_says_what_its_fields_say(rounds):
    g = torch.Generator().manual_seed(0)
    for _ in range(rounds):  # the second round builds every header from a kept template
        for n, (specs, checked, row_tables, pull, pull_tables) in enumerate(CASES):
            grads = {k: torch.randn(*shape, generator=g).to(dtype)
                     for k, (shape, dtype) in specs.items()}
            versions = {k: 10 * n + i for i, k in enumerate(grads)}
            ids = np.arange(3, dtype=np.int64)
            rows = [(t, torch.randn(3, 2, generator=g)) for t in row_tables]
            part = Part(push=list(grads), rows=[Rows(i, ids) for i in range(len(rows))],
                        pull=pull, pull_rows=[Rows(t, ids) for t in pull_tables])
            op = steps._Step(None, grads, versions, rows)
            op.checked = checked
            req, frames = op.build(0, part)
            assert req.step == _expected(grads, versions, checked, part, row_tables), n
            assert req.HasField("step")
            packed, alone = packing(list(grads.values())) if grads else ([], [])
            assert len(frames) == bool(packed) + len(alone) + 2 * len(rows) + len(pull_tables)


def test_a_marked_row_pull_has_its_own_header_and_its_mask_after_every_ids_frame():
    ids = np.arange(4, dtype=np.int64)
    mask = np.array([True, False, True, False])
    part = Part(pull_rows=[Rows("t", ids), Rows("u", ids[1:], positions=np.arange(1, 4))])
    for marks in ({"u": mask}, {}, {"u": mask}):  # a kept template never stands for another
        req, frames = steps._Step(None, {}, {}, [], marks).build(0, part)
        assert [r.marked for r in req.step.pull_rows] == [False, bool(marks)]
        assert len(frames) == 2 + bool(marks)
        if marks:  # u's ids sit at 1..3 of the call's: their flags, as bytes
            assert bytes(frames[2]) == bytes([0, 1, 0])
