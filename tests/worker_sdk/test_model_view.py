"""PSClient's kept walk of a model: it must list what `named_parameters` lists after any change
of the model's structure (a stale view would pull into, or push from, the wrong tensors)."""
import torch
from torch import nn

from worker_sdk.ps.client import ElasticEmbedding
from worker_sdk.ps.model_view import ModelView


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = ElasticEmbedding(100, 4, table="t")
        self.mlp = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 1))


def _listed(model):
    return [(n, id(p)) for n, p in model.named_parameters()]


def _agrees(view: ModelView) -> bool:
    view = view.current()
    return ([(n, id(p)) for n, p in view.params] == _listed(view.model)
            and view.names == [n for n, _ in view.model.named_parameters()]
            and [id(m) for m in view.embeddings]
            == [id(m) for m in view.model.modules() if isinstance(m, ElasticEmbedding)])


def test_the_view_follows_every_change_of_the_models_structure():
    model = Net()
    view = ModelView(model, ElasticEmbedding)
    kept = view.params
    assert _agrees(view) and view.current().params is kept  # unchanged: not walked again
    with torch.no_grad():
        model.mlp[0].weight.copy_(torch.ones(3, 4))  # values only: nothing to re-walk
    model.mlp[0].weight.data = torch.zeros(3, 4)
    assert view.current().params is kept
    model.mlp[0].weight = nn.Parameter(torch.zeros(3, 4))  # a parameter replaced
    assert _agrees(view)
    model.mlp[2]._parameters["bias"] = nn.Parameter(torch.zeros(1))  # as _apply may do it
    assert _agrees(view)
    model.mlp[2].extra = nn.Parameter(torch.zeros(2))  # added
    assert _agrees(view) and "mlp.2.extra" in view.names
    del model.mlp[2].extra  # deleted
    assert _agrees(view) and "mlp.2.extra" not in view.names
    model.mlp[2].register_parameter("bias", None)  # no bias any more
    assert _agrees(view) and "mlp.2.bias" not in view.names
    model.mlp[1] = nn.Linear(3, 3)  # a child replaced deep in the tree
    assert _agrees(view) and "mlp.1.weight" in view.names
    model.mlp.append(nn.Linear(1, 1))  # a child added
    assert _agrees(view)
    model.head = nn.Sequential(ElasticEmbedding(10, 4, table="u"))  # a second table
    assert _agrees(view) and [e.table for e in view.embeddings] == ["t", "u"]
    del model.embedding  # a child removed
    assert _agrees(view) and [e.table for e in view.embeddings] == ["u"]


def test_a_shared_parameter_is_listed_once_as_named_parameters_does():
    model = Net()
    view = ModelView(model, ElasticEmbedding)
    model.mlp[2].weight = model.mlp[0].weight  # tied, shapes aside
    assert _agrees(view)


def test_a_model_that_lists_its_own_parameters_is_walked_every_time():
    class Custom(Net):
        def __init__(self):
            super().__init__()
            self.hidden = True

        def named_parameters(self, *args, **kwargs):
            for name, p in super().named_parameters(*args, **kwargs):
                if not (self.hidden and name.startswith("mlp.2")):
                    yield name, p

    model = Custom()
    view = ModelView(model, ElasticEmbedding)
    assert "mlp.2.weight" not in view.names
    model.hidden = False  # no structural change: only its own walk can tell
    assert _agrees(view) and "mlp.2.weight" in view.names


def test_zero_grad_clears_the_grads_or_calls_the_models_own():
    model = Net()
    model.mlp(torch.ones(2, 4)).sum().backward()
    view = ModelView(model, ElasticEmbedding)
    view.zero_grad()
    assert all(p.grad is None for p in model.parameters())

    calls = []

    class Own(Net):
        def zero_grad(self, set_to_none=True):
            calls.append(set_to_none)
            super().zero_grad(set_to_none)

    own = Own()
    ModelView(own, ElasticEmbedding).zero_grad()
    assert calls == [True]
