"""The PS data plane's contract: what both the parameter servers and the worker SDK speak.

Neither side's code lives here and nothing here imports `ps` or `worker_sdk`; both import it,
the way a gRPC client and server both import the generated code of one .proto:

- `frames`: dtypes, tensor <-> ZeroMQ frame (zero-copy both ways), response codes;
- `partition`: the one placement rule (which PS holds which tensor and which row);
- `tables`: an embedding table's declaration (`TableSpec`) and its checks;
- `optimizers`: optimizer configs, their checks and how they travel;
- `connection`: one DEALER socket to one PS (CURVE, same-host Unix socket), and how an answer
  is read back.
"""
