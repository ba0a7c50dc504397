"""How good the model is: the area under the ROC curve, on the held-out split.

`auc` is plain numpy (the data generator uses it for the planted model's own AUC);
`evaluate` pulls the PS's current model and scores the test split with it; `HeldOutAUC` does
that for a job's driver (the demo, the end-to-end tests), again and again.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # torch is imported only by those that evaluate a model
    from examples.ctr.dataset import ClickLog
    from examples.ctr.model import CTRModel
    from worker_sdk.ps.client import PSClient


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve (Mann-Whitney U, ties counted half)."""
    order = np.argsort(scores, kind="mergesort")
    s = scores[order]
    ranks = np.empty(len(s), dtype=np.float64)
    i = 0
    while i < len(s):  # average ranks over ties
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[i:j + 1] = (i + j) / 2 + 1
        i = j + 1
    pos = labels[order] > 0.5
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if n_pos == 0 or n_neg == 0:
        return 0.5
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def evaluate(client: PSClient, model: CTRModel, test: ClickLog, batch: int = 8192) -> float:
    """The held-out AUC of the model as the PS hold it now (pulled first; never pushed)."""
    import torch

    client.pull(model)
    model.eval()
    cat, dense, y = test.tensors()
    scores = []
    with torch.no_grad():
        for i in range(0, len(y), batch):
            scores.append(model(cat[i:i + batch], dense[i:i + batch]))
    model.train()
    return auc(torch.cat(scores).numpy(), y.numpy())


class HeldOutAUC:
    """`auc()`: the held-out AUC of the model as the PS of the job at `master` hold it now,
    scored on the test split of the click log in `data`. The PS client attaches on the first
    call, so call it once training started: it only reads the model, never initialises it.
    `close()` (or the `with` block) ends the client."""

    def __init__(self, master: str, data: str | Path):
        self.master = master
        self.data = Path(data)
        self._attached: tuple[PSClient, CTRModel, ClickLog] | None = None

    def __call__(self) -> float:
        if self._attached is None:
            from examples.ctr.dataset import ClickLog
            from examples.ctr.model import build_model
            from worker_sdk.ps.client import PSClient

            test = ClickLog(self.data, "test")
            model = build_model(test.meta)
            client = PSClient(master=self.master)
            client.attach(model)
            self._attached = (client, model, test)
        return evaluate(*self._attached)

    def close(self) -> None:
        if self._attached is not None:
            self._attached[0].close()
            self._attached = None

    def __enter__(self) -> "HeldOutAUC":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
