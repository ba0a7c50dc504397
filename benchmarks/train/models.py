"""The models bench_train trains, and their data.

`ctr`: examples/ctr's click log and model (4 categorical fields, 4 dense features, dim 8).
`criteo`: the shape most recommendation users have (issue 42): 26 categorical fields in one
embedding table, vocabularies log-spaced from 1,000 to 100,000 ids per field, 13 dense
features, dim 16, so the MLP sees 26 * 16 + 13 = 429 inputs. Its click log is planted the way
examples/ctr/data.py plants its own (Zipf-like ids, a logit contribution per id, a linear term
of the dense features, one pairwise interaction) and written in the same files, so
`examples.ctr.dataset.ClickLog` reads both and the elastic worker trains either.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from torch import nn

from examples.ctr.evaluate import auc
from examples.ctr.model import CTRModel

MODELS = ("ctr", "criteo")
DIM = {"ctr": 8, "criteo": 16}
CRITEO_VOCAB = [int(v) for v in np.round(np.logspace(3, 5, 26))]  # 1,000 .. 100,000
CRITEO_DENSE = 13


def make_data(model: str, out: Path, records: int, test_records: int, seed: int = 2026) -> None:
    if model == "ctr":
        from examples.ctr.data import main as make

        make(["--out", str(out), "--records", str(records), "--test-records",
              str(test_records), "--seed", str(seed)])
        return
    _write_criteo(out, records, test_records, seed)


def _write_criteo(out: Path, records: int, test_records: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    fields = len(CRITEO_VOCAB)
    # each field's weights scaled so that the 26 sums reach a learnable, not trivial, AUC
    scale = 0.8 * np.sqrt(4 / fields)
    total = records + test_records
    cat = np.empty((total, fields), dtype=np.int64)
    logit = np.full(total, -1.2)
    for f, v in enumerate(CRITEO_VOCAB):
        cat[:, f] = rng.permutation(v)[np.minimum(rng.zipf(1.3, size=total) - 1, v - 1)]
        logit += rng.normal(0.0, scale, size=v).astype(np.float32)[cat[:, f]]
    dense = rng.normal(0.0, 1.0, size=(total, CRITEO_DENSE)).astype(np.float32)
    logit += dense @ rng.normal(0.0, 0.3, size=CRITEO_DENSE).astype(np.float32)
    inter = rng.normal(0.0, 0.4, size=(CRITEO_VOCAB[0], CRITEO_DENSE)).astype(np.float32)
    logit += np.einsum("nd,nd->n", inter[cat[:, 0]], dense)
    prob = 1.0 / (1.0 + np.exp(-logit))
    y = (rng.random(total) < prob).astype(np.float32)
    out.mkdir(parents=True, exist_ok=True)
    for split, sl in (("train", slice(0, records)), ("test", slice(records, None))):
        np.save(out / f"{split}_cat.npy", cat[sl])
        np.save(out / f"{split}_dense.npy", dense[sl])
        np.save(out / f"{split}_y.npy", y[sl])
    meta = dict(vocab=CRITEO_VOCAB, dense=CRITEO_DENSE, records=records,
                test_records=test_records, seed=seed, click_rate=float(y.mean()),
                optimal_test_auc=auc(prob[records:], y[records:]))
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")


def dim_of(meta: dict) -> int:
    """The embedding dim of the model for a click log: 16 for the Criteo shape, else 8."""
    return DIM["criteo"] if len(meta["vocab"]) == len(CRITEO_VOCAB) else DIM["ctr"]


def elastic_model(meta: dict) -> CTRModel:
    """The model with its table on the PS (examples.ctr.model's, at the log's dim)."""
    torch.manual_seed(0)
    return CTRModel(sum(meta["vocab"]), len(meta["vocab"]), meta["dense"], dim=dim_of(meta))


def local_model(meta: dict, sparse: bool) -> CTRModel:
    """The same model with nn.Embedding in place of ElasticEmbedding: `sparse` gradients (the
    optimizer then updates only the batch's rows, as a user training embeddings locally
    writes it) or dense ones (every row, every step). Its MLP starts from the elastic model's
    weights (the table is made after it: drawing a million rows first would change them, and
    on the Criteo shape two MLP starts differ by 0.03 in AUC after two epochs)."""
    torch.manual_seed(0)
    dim = dim_of(meta)
    model = CTRModel(sum(meta["vocab"]), len(meta["vocab"]), meta["dense"], dim=dim,
                     embedding=nn.Identity())
    model.embedding = nn.Embedding(sum(meta["vocab"]), dim, sparse=sparse)
    nn.init.normal_(model.embedding.weight, 0.0, 0.01)  # as the PS's rows (normal, 0.01)
    return model
