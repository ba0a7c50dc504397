"""The CTR job: a click log from a planted model, a model with one PS embedding table, the
elastic training loop, and held-out evaluation.

- `examples.ctr.data`: the click-log generator (the planted model) and `ClickLog`, one split
  memory-mapped as a torch dataset.
- `examples.ctr.model`: `CTRModel` and `build_model`.
- `examples.ctr.train`: the worker's training loop and its command line.
- `examples.ctr.evaluate`: `auc` and the held-out evaluation of the PS's current model.

`scripts/make_ctr_data.py` and `scripts/train_ctr.py` only call `data.main()` and
`train.main()`.
"""
