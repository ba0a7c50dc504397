"""The PS's model state, and the only code that changes it.

`params` (`ParamStore`: dense tensors, embedding tables, versions, staleness, and the methods
that declare, install, replace and free them), with its parts: `dense` and `flat_dense` (dense
tensors and their packed Adagrad buffers), `optim` (optimizers), `tables` (bounded embedding
tables: `tables.table.Table`, made only by `ParamStore.make_table`), `embedding` (rows'
initial values), `applied` (at-most-once mutations), `gate` (the store's request gate: shared
for a request, exclusive for a snapshot or a slot move), `limits` (per-request bounds),
`requests` (a data-plane request's scope: the gate held, the slots' ownership checked),
`declare` and `model_match` (InitParameters), `snapshots`, `steps` and `reads`.
"""
