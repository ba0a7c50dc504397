"""The flat-buffer Adagrad (ps/store/flat_dense.py) is torch.optim's to the bit, and stays so when
something moves its tensors to memory of their own (a snapshot view, a restore)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from ps.store import flat_dense
from ps.store.params import ParamStore
from pswire.frames import pack
from pswire.optimizers import make_config

SHAPES = {"a.weight": (7, 5), "a.bias": (7,), "b.weight": (1, 7), "b.bias": (1,)}


def _bits(t) -> np.ndarray:
    return np.ascontiguousarray(t.numpy() if isinstance(t, torch.Tensor) else t).view(np.int32)


floats = st.lists(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, width=32),
                  min_size=2, max_size=300)


@settings(max_examples=150, deadline=None)
@given(floats, st.data())
def test_torch_gives_an_element_the_same_bits_wherever_it_lies(values, data):
    """What a flat buffer relies on: a tensor's elements come out of torch's CPU kernels the
    same whether the tensor is alone or a slice of a larger one (vector body or scalar tail)."""
    x = torch.tensor(values, dtype=torch.float32)
    s = x.abs()
    start = data.draw(st.integers(0, len(values) - 1))
    stop = data.draw(st.integers(start + 1, len(values)))
    part = slice(start, stop)
    assert np.array_equal(_bits(s.sqrt()[part]), _bits(s[part].clone().sqrt()))
    assert np.array_equal(_bits(s.clone().addcmul_(x, x)[part]),
                          _bits(s[part].clone().addcmul_(x[part], x[part])))
    std = s.sqrt().add_(1e-10)
    assert np.array_equal(_bits(x.clone().addcdiv_(x, std, value=-0.03)[part]),
                          _bits(x[part].clone().addcdiv_(x[part], std[part], value=-0.03)))


@settings(max_examples=150, deadline=None)
@given(floats, st.floats(min_value=1e-5, max_value=1.0), st.sampled_from([1e-10, 1e-8, 0.1]))
def test_the_compiled_passes_round_as_torch(values, lr, eps):
    g = torch.tensor(values, dtype=torch.float32)
    sums = torch.rand(len(values), generator=torch.Generator().manual_seed(len(values))) * 100
    steps = np.zeros(3, dtype=np.float32)
    ours = sums.numpy().copy()
    flat_dense.accumulate(ours, g.numpy(), steps)
    theirs = sums.clone().addcmul_(g, g, value=1)
    assert np.array_equal(_bits(ours), _bits(theirs)) and steps.tolist() == [1.0] * 3
    std = theirs.sqrt()
    values_ours = g.numpy() * np.float32(0.5)
    values_theirs = torch.from_numpy(values_ours.copy())
    flat_dense.descend(values_ours, g.numpy(), std.numpy(), np.float32(-lr), np.float32(eps))
    values_theirs.addcdiv_(g, std.add(torch.tensor(eps, dtype=torch.float32)), value=-lr)
    assert np.array_equal(_bits(values_ours), _bits(values_theirs))


def _store(hyper: dict, shapes: dict = SHAPES, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    init = {n: torch.randn(s, generator=g) for n, s in shapes.items()}
    store = ParamStore()
    store.init_parameters(list(init.items()), make_config("adagrad", **hyper))
    local = {n: t.clone().requires_grad_(True) for n, t in init.items()}
    reference = torch.optim.Adagrad(list(local.values()), foreach=False, **hyper)
    return store, local, reference


def _push(store, local, reference, seq: int, names: list[str], packed: bool, seed: int):
    """Push gradients of `names` to the store (packed into one flat frame, as a worker sends
    them, or one tensor each) and step the local reference with the same."""
    g = torch.Generator().manual_seed(seed)
    grads = {n: torch.randn(local[n].shape, generator=g) for n in names}
    versions = [store.dense[n].version for n in names]
    if packed:
        flat = pack([grads[n] for n in names])
        views = [part.view(grads[n].shape) for n, part in
                 zip(names, flat.split_with_sizes([grads[n].numel() for n in names]))]
        answer = store.push("c", seq, list(zip(names, views)), versions, packed=flat,
                            packed_count=len(names))
    else:
        answer = store.push("c", seq, list(grads.items()), versions)
    assert answer["code"] == "OK", answer
    for n, p in local.items():
        p.grad = grads[n].clone() if n in grads else None
    reference.step()


def _assert_same(store, local, reference) -> None:
    for n, p in local.items():
        d = store.dense[n]
        state = d.optimizer.state[d.value]
        assert torch.equal(d.value, p.detach()), n
        assert torch.equal(state["sum"], reference.state[p]["sum"]), n
        assert float(state["step"]) == float(reference.state[p]["step"]), n


@pytest.mark.parametrize("hyper", [dict(lr=0.1), dict(lr=0.01, eps=1e-8,
                                                      initial_accumulator_value=0.1)])
def test_packed_and_single_pushes_are_torch_optim_to_the_bit(hyper):
    store, local, reference = _store(hyper)
    names = list(SHAPES)
    for seq in range(1, 7):
        _push(store, local, reference, seq, names, packed=True, seed=seq)
    assert store.flat.layouts == 1  # the flat path ran, laid out once
    _push(store, local, reference, 7, ["a.weight"], packed=False, seed=7)  # a tensor alone
    _push(store, local, reference, 8, names[1:3], packed=True, seed=8)  # another set
    _push(store, local, reference, 9, names, packed=True, seed=9)  # back: laid out again
    assert store.flat.layouts == 4
    _assert_same(store, local, reference)
    # the state is still the tensors the store knows: a pull reads the updated values
    pulled = dict((n, t) for n, t, _, _ in store.pull(names))
    assert all(torch.equal(pulled[n], local[n].detach()) for n in names)


@pytest.mark.parametrize("hyper", [dict(lr=0.1, lr_decay=0.01), dict(lr=0.1, weight_decay=0.01),
                                   dict(lr=0.1, maximize=True)])
def test_what_the_flat_path_does_not_take_stays_exact(hyper):
    store, local, reference = _store(hyper)
    for seq in range(1, 4):
        _push(store, local, reference, seq, list(SHAPES), packed=True, seed=seq)
    assert store.flat.layouts == 0
    _assert_same(store, local, reference)


def test_a_snapshot_view_keeps_its_bytes_while_pushes_go_on():
    store, local, reference = _store(dict(lr=0.1))
    names = list(SHAPES)
    _push(store, local, reference, 1, names, packed=True, seed=1)
    with store.snapshot_view() as view:
        before = {row["name"]: (row["value"].clone(), row["optim"]["state"][0]["sum"].clone())
                  for row in view["dense"]}
        for seq in (2, 3):
            _push(store, local, reference, seq, names, packed=True, seed=seq)
        for row in view["dense"]:
            value, total = before[row["name"]]
            assert torch.equal(row["value"], value)
            assert torch.equal(row["optim"]["state"][0]["sum"], total)
    assert store.flat.layouts == 2  # the copy for the view moved them; laid out again
    _assert_same(store, local, reference)


def test_a_restored_store_goes_on_to_the_bit():
    store, local, reference = _store(dict(lr=0.1))
    names = list(SHAPES)
    for seq in (1, 2):
        _push(store, local, reference, seq, names, packed=True, seed=seq)
    fresh = ParamStore()
    fresh.restore(store.snapshot())
    for seq in (3, 4):
        _push(fresh, local, reference, seq, names, packed=True, seed=seq)
    assert fresh.flat.layouts == 1
    _assert_same(fresh, local, reference)


def test_a_packed_pull_reads_the_flat_buffer_only_while_it_holds_the_values():
    store, local, reference = _store(dict(lr=0.1))
    names = list(SHAPES)
    _push(store, local, reference, 1, names, packed=True, seed=1)
    held = [store.dense[n] for n in names]
    assert store.flat.values_of(held) is not None
    entries, flat = store.pull_packed(names)
    assert torch.equal(flat, pack([local[n].detach() for n in names]))
    with held[1].lock:  # a tensor moved to memory of its own (as a snapshot view's copy does)
        store.snapshots.copy_for_snapshot(held[1])
        held[1].value.add_(1.0)
    assert store.flat.values_of(held) is None
    entries, flat = store.pull_packed(names)
    assert torch.equal(flat, pack([store.dense[n].value for n in names]))
    assert torch.equal(flat.split_with_sizes([held[0].value.numel(), held[1].value.numel()] + [
        d.value.numel() for d in held[2:]])[1], local[names[1]].detach().reshape(-1) + 1.0)


def test_a_large_tensor_pushed_alone_keeps_its_own_memory():
    """Above what a pull copies (a send may pin it: ps/store/params.py), a tensor pushed alone is
    updated in place (the compiled passes over its own memory), not moved into a layout."""
    shapes = {"big": (flat_dense.ALONE_BELOW // 4 + 1,)}
    store, local, reference = _store(dict(lr=0.1), shapes)
    before = store.dense["big"].value.data_ptr()
    for seq in (1, 2):
        _push(store, local, reference, seq, ["big"], packed=False, seed=seq)
    assert store.flat.layouts == 0 and store.dense["big"].value.data_ptr() == before
    _assert_same(store, local, reference)


@pytest.mark.parametrize("hyper", [dict(lr=0.1), dict(lr=0.01, eps=1e-8,
                                                      initial_accumulator_value=0.1),
                                   dict(lr=0.1, lr_decay=0.01)])
def test_a_tensor_in_a_frame_of_its_own_beside_packed_ones_is_torch_optim_to_the_bit(
        hyper, monkeypatch):
    """A worker's push of a wide model: the small tensors packed, the first layer's weight in a
    frame of its own. The packed ones are laid out; the large one is updated over its own
    memory (or by torch's foreach with lr_decay), each to torch.optim's bits."""
    by_torch = []
    plain = flat_dense.step_dense_all
    monkeypatch.setattr(flat_dense, "step_dense_all",
                        lambda opts, params, grads: (by_torch.append(len(params)),
                                                     plain(opts, params, grads)))
    shapes = {"wide.weight": (flat_dense.ALONE_BELOW // 4 // 3 + 1, 3), **SHAPES}
    store, local, reference = _store(hyper, shapes)
    big = store.dense["wide.weight"].value.data_ptr()
    small = [n for n in shapes if n != "wide.weight"]
    for seq in range(1, 5):
        g = torch.Generator().manual_seed(seq)
        grads = {n: torch.randn(shapes[n], generator=g) for n in shapes}
        flat = pack([grads[n] for n in small])
        views = [part.view(grads[n].shape) for n, part in
                 zip(small, flat.split_with_sizes([grads[n].numel() for n in small]))]
        names = small + ["wide.weight"]
        answer = store.push("c", seq, list(zip(small, views)) + [("wide.weight", grads["wide.weight"])],
                            [store.dense[n].version for n in names], packed=flat,
                            packed_count=len(small))
        assert answer["code"] == "OK", answer
        for n, p in local.items():
            p.grad = grads[n].clone()
        reference.step()
    assert store.flat.layouts == (0 if hyper.get("lr_decay") else 1)
    assert by_torch == ([5] * 4 if hyper.get("lr_decay") else [])
    assert store.dense["wide.weight"].value.data_ptr() == big
    _assert_same(store, local, reference)
