"""Generate a click log from a planted ground-truth model, so the best reachable AUC is known.

Each record has categorical fields (ids drawn from a Zipf-like distribution, as real ids are)
and a few dense features. The planted model gives each id a logit contribution, adds a linear
term of the dense features and one pairwise interaction, and draws the click from the
resulting probability. The AUC of the planted probabilities on the held-out split is the best
any model can reach; it is printed and saved in meta.json.

    python scripts/make_ctr_data.py --out data/ctr --records 200000

Files (numpy, memory-mappable): {train,test}_cat.npy int64 [N, F], {train,test}_dense.npy
float32 [N, D], {train,test}_y.npy float32 [N], meta.json; `examples.ctr.dataset.ClickLog` reads them.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from examples.ctr.evaluate import auc

VOCAB = [1000, 5000, 20000, 300]  # ids per categorical field
DENSE = 4


def generate(records: int, test_records: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    weights = [rng.normal(0.0, 0.8, size=v).astype(np.float32) for v in VOCAB]
    dense_w = rng.normal(0.0, 0.5, size=DENSE).astype(np.float32)
    inter = rng.normal(0.0, 0.6, size=(VOCAB[3], DENSE)).astype(np.float32)
    bias = -1.2
    total = records + test_records
    cat = np.empty((total, len(VOCAB)), dtype=np.int64)
    for f, v in enumerate(VOCAB):
        cat[:, f] = np.minimum(rng.zipf(1.3, size=total) - 1, v - 1)
        cat[:, f] = rng.permutation(v)[cat[:, f]]  # popular ids are not the small ones
    dense = rng.normal(0.0, 1.0, size=(total, DENSE)).astype(np.float32)
    logit = bias + dense @ dense_w
    for f in range(len(VOCAB)):
        logit += weights[f][cat[:, f]]
    logit += np.einsum("nd,nd->n", inter[cat[:, 3]], dense)
    prob = 1.0 / (1.0 + np.exp(-logit))
    y = (rng.random(total) < prob).astype(np.float32)
    return dict(cat=cat, dense=dense, y=y, prob=prob)


def write_parquet(path: Path, cat: np.ndarray, dense: np.ndarray, y: np.ndarray,
                  row_group: int = 16384) -> None:
    """The split as one Parquet file: `ids` (each field's ids offset into one id space, as
    ClickLog gives them), `dense` (fixed-size lists) and `y`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    offsets = np.cumsum([0] + VOCAB[:-1]).astype(np.int64)
    ids = (cat + offsets).astype(np.int64)
    table = pa.table({
        "ids": pa.FixedSizeListArray.from_arrays(pa.array(ids.reshape(-1)), ids.shape[1]),
        "dense": pa.FixedSizeListArray.from_arrays(pa.array(dense.reshape(-1)),
                                                   dense.shape[1]),
        "y": pa.array(y),
    })
    pq.write_table(table, path, row_group_size=row_group)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", default="data/ctr")
    p.add_argument("--records", type=int, default=200_000, help="training records")
    p.add_argument("--test-records", type=int, default=50_000)
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--parquet", action="store_true",
                   help="also write train.parquet (ids offset into one id space, dense, y; "
                        "row groups of 16384): `train_ctr.py --parquet` reads it")
    args = p.parse_args(argv)
    if args.records <= 0 or args.test_records <= 0:
        p.error("--records and --test-records must be > 0")
    data = generate(args.records, args.test_records, args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    n = args.records
    for split, sl in (("train", slice(0, n)), ("test", slice(n, None))):
        np.save(out / f"{split}_cat.npy", data["cat"][sl])
        np.save(out / f"{split}_dense.npy", data["dense"][sl])
        np.save(out / f"{split}_y.npy", data["y"][sl])
    if args.parquet:
        write_parquet(out / "train.parquet", data["cat"][:n], data["dense"][:n], data["y"][:n])
    best = auc(data["prob"][n:], data["y"][n:])
    meta = dict(vocab=VOCAB, dense=DENSE, records=n, test_records=args.test_records,
                seed=args.seed, click_rate=float(data["y"].mean()), optimal_test_auc=best)
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"wrote {n} training and {args.test_records} test records to {out}; "
          f"click rate {meta['click_rate']:.3f}; best reachable test AUC {best:.4f}")


if __name__ == "__main__":
    main()
