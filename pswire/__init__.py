"""The PS data plane's contract: what both the parameter servers and the worker SDK speak.

Neither side's code lives here and nothing here imports `ps` or `worker_sdk`; both import it,
the way a gRPC client and server both import the generated code of one .proto:

- `frames`: dtypes, tensor <-> ZeroMQ frame (zero-copy both ways), response codes;
- `partition`: the placement the data plane uses today (which PS holds which tensor and
  which row: by size and `id % num_ps`);
- `slots`: placement as data: hash slots, the layout (slot -> PS index, versioned) the master
  keeps, and the resize plan; the data plane switches from `partition` to it when slots move
  live (issue 25's next part);
- `tables`: an embedding table's declaration (`TableSpec`) and its checks;
- `optimizers`: optimizer configs, their checks and how they travel;
- `connection`: one DEALER socket to one PS (CURVE, same-host Unix socket), and how an answer
  is read back.
"""
