"""The embedding's compiled gather and gradient rows (worker_sdk/ps/gather.py) against torch's
index_select and its autograd: the same values, bit for bit."""
import numpy as np
import pytest
import torch

from worker_sdk.ps.gather import gather


def _case(n: int, m: int, dim: int, seed: int):
    rng = np.random.default_rng(seed)
    inverse = torch.from_numpy(rng.integers(0, m, size=n))
    inverse[:m] = torch.arange(m)  # every distinct row is used, as unique_inverse's are
    rows = torch.from_numpy(rng.normal(size=(m, dim)).astype(np.float32))
    grad = torch.from_numpy(rng.normal(size=(n, dim)).astype(np.float32))
    return rows, inverse, grad


@pytest.mark.parametrize("n,m,dim", [(6656, 2000, 16), (40, 7, 3), (1, 1, 8)])
def test_gather_and_its_gradient_rows_are_torchs(n, m, dim):
    rows, inverse, grad = _case(n, m, dim, seed=n)
    ours = rows.clone().requires_grad_(True)
    theirs = rows.clone().requires_grad_(True)
    out = gather(ours, inverse)
    ref = theirs.index_select(0, inverse)
    assert torch.equal(out, ref)
    out.backward(grad)
    ref.backward(grad)
    # summed in the same order: equal floats, not merely close ones
    assert torch.equal(ours.grad, theirs.grad)


def test_a_viewed_gradient_and_no_grad_forward():
    rows, inverse, grad = _case(60, 9, 4, seed=1)
    ours = rows.clone().requires_grad_(True)
    out = gather(ours, inverse).view(6, 10, 4)
    out.backward(grad.view(6, 10, 4).transpose(0, 1).contiguous().transpose(0, 1))
    expect = torch.zeros(9, 4).index_add_(0, inverse, grad)
    assert torch.equal(ours.grad, expect)
    with torch.no_grad():
        assert torch.equal(gather(ours, inverse), rows[inverse])


def test_other_dtypes_go_through_torch():
    rows, inverse, grad = _case(30, 5, 2, seed=2)
    ours = rows.double().requires_grad_(True)
    out = gather(ours, inverse)
    assert out.dtype == torch.float64
    out.backward(grad.double())
    assert torch.equal(ours.grad, torch.zeros(5, 2, dtype=torch.float64).index_add_(
        0, inverse, grad.double()))


def test_empty_batches():
    rows = torch.zeros(0, 4, requires_grad=True)
    out = gather(rows, torch.zeros(0, dtype=torch.int64))
    assert out.shape == (0, 4)
    out.sum().backward()
    assert rows.grad.shape == (0, 4)
