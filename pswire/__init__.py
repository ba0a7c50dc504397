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
- `transport`: what a connection to one PS is (connect, send, recv, close), whatever carries it;
- `connection`: ZeroMQ (a DEALER socket, CURVE under TLS) as a transport, and a worker's
  connection to one PS index, which picks ZeroMQ over TCP or the same-host socket;
- `samehost`: the same-host socket's message format and its client transport (a Unix stream
  socket to a PS on this machine, without ZeroMQ's I/O threads).
"""
