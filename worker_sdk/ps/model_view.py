"""What PSClient reads of a model at every pull, prefetch and push, walked once per shape.

`named_parameters` walks every module each time it is called, and a step used to call it three
times (and `modules` once, and `zero_grad` walks once more). A `ModelView` keeps the walk's
answer and re-walks when the model's structure may have changed: each module's own parameters
and children, compared by name and identity, cheaper than the walk. A parameter replaced,
added or deleted, a module added, replaced or removed anywhere in the tree is seen; changing a
parameter's values (`copy_`, `.data =`) changes nothing the view holds.
"""
from __future__ import annotations

from torch import nn

_Module = nn.Module


def _walks_as_module(m: nn.Module) -> bool:
    """Whether `m` lists its parameters and children the way nn.Module does (an override may
    answer anything, so such a model is walked every time)."""
    cls = type(m)
    return (cls.named_parameters is _Module.named_parameters
            and cls.named_modules is _Module.named_modules
            and cls._named_members is _Module._named_members
            and cls.modules is _Module.modules)


def _shape(modules: list[nn.Module]) -> list:
    # ids are safe: the view holds every parameter and module whose id is recorded, so none
    # of them can be freed and its id reused while the view lives. Names and ids of all the
    # modules in one flat list: a list per module costs a third more.
    out: list = []
    for m in modules:
        params, children = m._parameters, m._modules
        out += params
        out += map(id, params.values())
        out.append(None)  # where one module's entries end
        out += children
        out += map(id, children.values())
        out.append(None)
    return out


class ModelView:
    """`model`'s parameters (as `named_parameters()` lists them), their names, and its
    modules of `kind` (the ElasticEmbeddings), kept while the model's structure is unchanged:
    call `current()` before each use."""

    def __init__(self, model: nn.Module, kind: type):
        self.model = model
        self._kind = kind
        self._walk()

    def _walk(self) -> None:
        model = self.model
        self.params = list(model.named_parameters())
        self.names = [n for n, _ in self.params]  # shared with callers: never mutated
        modules = list(model.modules())
        self.embeddings = [m for m in modules if isinstance(m, self._kind)]
        self._modules = modules
        self._cached = all(_walks_as_module(m) for m in modules)
        self._shape = _shape(modules) if self._cached else None

    def current(self) -> "ModelView":
        if not self._cached or _shape(self._modules) != self._shape:
            self._walk()
        return self

    def zero_grad(self) -> None:
        """`model.zero_grad(set_to_none=True)`, without walking the model again."""
        model = self.model
        # a DataParallel replica's flag is an instance attribute (getattr's default would cost
        # nn.Module.__getattr__ building an AttributeError every step)
        if type(model).zero_grad is not _Module.zero_grad or model.__dict__.get("_is_replica"):
            model.zero_grad(set_to_none=True)  # its own, or nn.Module's warning for a replica
            return
        for _, p in self.params:
            if p.grad is not None:
                p.grad = None
