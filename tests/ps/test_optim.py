"""The PS's optimizer arithmetic equals torch.optim applied locally to the same gradients."""
from __future__ import annotations

import pytest
import torch

from rpckit.errors import ServiceError as PSError
from pswire.optimizers import make_config
from ps.store.params import ParamStore

CASES = [
    ("sgd", dict(lr=0.1)),
    ("sgd", dict(lr=0.05, momentum=0.9)),
    ("sgd", dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    ("sgd", dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.001)),
    ("adagrad", dict(lr=0.1)),
    ("adagrad", dict(lr=0.1, lr_decay=0.01, weight_decay=0.01, initial_accumulator_value=0.1,
                     eps=1e-8)),
    ("adam", dict(lr=0.01)),
    ("adam", dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.01, amsgrad=True)),
    ("adam", dict(lr=0.01, maximize=True)),
]


def _gradients(steps: int, shapes: dict, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [{n: torch.randn(s, generator=g) for n, s in shapes.items()} for _ in range(steps)]


@pytest.mark.parametrize("name,hyper", CASES)
def test_store_matches_torch_optim(name, hyper):
    shapes = {"w": (5, 3), "b": (3,)}
    init = {n: torch.randn(s, generator=torch.Generator().manual_seed(7)) for n, s in shapes.items()}
    store = ParamStore()
    store.init_parameters(list(init.items()), make_config(name, **hyper))

    local = {n: t.clone().requires_grad_(True) for n, t in init.items()}
    reference = {"sgd": torch.optim.SGD, "adagrad": torch.optim.Adagrad,
                 "adam": torch.optim.Adam}[name](list(local.values()), **hyper)
    for seq, grads in enumerate(_gradients(6, shapes), start=1):
        store.push("c", seq, list(grads.items()), [seq - 1] * len(grads))
        for n, p in local.items():
            p.grad = grads[n].clone()
        reference.step()
    for n, p in local.items():
        assert store.dense[n].version == 6
        torch.testing.assert_close(store.dense[n].value, p.detach(), rtol=1e-6, atol=1e-7)


def test_float64_and_bfloat16_tensors_train():
    store = ParamStore()
    store.init_parameters([("d", torch.ones(3, dtype=torch.float64)),
                           ("h", torch.ones(3, dtype=torch.bfloat16))], make_config("sgd", lr=0.5))
    store.push("c", 1, [("d", torch.ones(3, dtype=torch.float64)),
                        ("h", torch.ones(3, dtype=torch.bfloat16))], [0, 0])
    assert store.dense["d"].value.tolist() == [0.5] * 3
    assert store.dense["h"].value.tolist() == [0.5] * 3


@pytest.mark.parametrize("name,hyper,fragment", [
    ("rmsprop", {}, "not supported"),
    ("adam", {"momentum": 0.9}, "does not take momentum"),
    ("sgd", {"lr": -1.0}, "learning rate"),
    ("sgd", {"nesterov": True}, "Nesterov"),
    ("adam", {"betas": (0.9,)}, "two numbers"),
])
def test_bad_optimizer_configs_refused(name, hyper, fragment):
    with pytest.raises(PSError) as err:
        make_config(name, **hyper)
    assert err.value.code == "INVALID_ARGUMENT"
    assert fragment.lower() in err.value.message.lower()


@pytest.mark.parametrize("hyper", [dict(lr=0.1), dict(lr=0.1, lr_decay=0.01, weight_decay=0.01,
                                                      initial_accumulator_value=0.1, eps=1e-8),
                                   dict(lr=0.05, maximize=True)])
def test_adagrad_over_several_tensors_at_once_is_torch_optim_to_the_bit(hyper):
    from ps.store.optim import step_dense_all

    g = torch.Generator().manual_seed(3)
    init = [torch.randn(5, 3, generator=g), torch.randn(3, generator=g),
            torch.randn(4, generator=g).double()]
    ours = [t.clone() for t in init]
    optimizers = [torch.optim.Adagrad([p], foreach=False, **hyper) for p in ours]
    theirs = [t.clone().requires_grad_(True) for t in init]
    reference = torch.optim.Adagrad(theirs, foreach=False, **hyper)
    for _ in range(5):
        grads = [torch.randn(t.shape, generator=g, dtype=t.dtype) for t in init]
        step_dense_all(optimizers, ours, grads)
        for p, grad in zip(theirs, grads):
            p.grad = grad.clone()
        reference.step()
    for p, q, o in zip(ours, theirs, optimizers):
        assert torch.equal(p, q.detach())
        assert torch.equal(o.state[p]["sum"], reference.state[q]["sum"])
        assert float(o.state[p]["step"]) == float(reference.state[q]["step"]) == 5
