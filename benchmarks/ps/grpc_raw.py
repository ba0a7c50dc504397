"""grpc-raw in the PS benchmark: grpcio moving the same bytes as a PS would, raw bytes methods
(no protobuf), 1 MiB chunks streamed both ways; the server keeps the pushed bytes in a buffer
and applies nothing."""
from __future__ import annotations

import signal
import threading
from pathlib import Path

from benchmarks.ps.harness import Run, loop, spawn
from benchmarks.ps.model import CHUNK, model_shapes, numel
from cluster.launch import LISTENING, Launcher


def server_grpc(args) -> None:
    from concurrent import futures

    import grpc
    import numpy as np

    size = sum(numel(s) for _, s in model_shapes(args.params)) * 4
    params = np.zeros(size, dtype=np.uint8)
    inbox = np.zeros(size, dtype=np.uint8)
    lock = threading.Lock()

    def push(request_iterator, context):
        offset = 0
        with lock:
            for chunk in request_iterator:
                n = len(chunk)
                inbox[offset:offset + n] = np.frombuffer(chunk, dtype=np.uint8)
                offset += n
        return b""

    def pull(request, context):
        view = memoryview(params)
        for start in range(0, size, args.chunk):
            yield bytes(view[start:start + args.chunk])

    handler = grpc.method_handlers_generic_handler("bench.Raw", {
        "Push": grpc.stream_unary_rpc_method_handler(push),
        "Pull": grpc.unary_stream_rpc_method_handler(pull),
    })
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8),
                         options=[("grpc.max_receive_message_length", 64 << 20),
                                  ("grpc.max_send_message_length", 64 << 20),
                                  ("grpc.so_reuseport", 0)])
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"grpc listening on 127.0.0.1:{port}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    server.stop(0)


def worker_grpc(args) -> None:
    import grpc
    import numpy as np
    import torch

    shapes = model_shapes(args.params)
    size = sum(numel(s) for _, s in shapes) * 4
    grad = np.ones(size // 4, dtype=np.float32).view(np.uint8)
    channel = grpc.insecure_channel(args.endpoint,
                                    options=[("grpc.max_receive_message_length", 64 << 20),
                                             ("grpc.max_send_message_length", 64 << 20)])
    push = channel.stream_unary("/bench.Raw/Push")
    pull = channel.unary_stream("/bench.Raw/Pull")

    def chunks():
        view = memoryview(grad)
        for start in range(0, size, args.chunk):
            yield bytes(view[start:start + args.chunk])

    def step():
        buf = bytearray(size)
        offset = 0
        for chunk in pull(b""):
            buf[offset:offset + len(chunk)] = chunk
            offset += len(chunk)
        flat = torch.frombuffer(buf, dtype=torch.float32)
        tensors, at = {}, 0
        for name, shape in shapes:  # the same tensors a PS client would hand back
            n = numel(shape)
            tensors[name] = flat[at:at + n].view(shape)
            at += n
        push(chunks())

    loop(Path(args.run_dir), args.rank, step)
    channel.close()



def run_grpc(work: Path, params: int, workers: int, seconds: float, chunk: int = CHUNK) -> float:
    with Launcher(work) as launcher:
        server = spawn(launcher, "grpc-server", "--params", str(params), "--chunk", str(chunk),
                       ready=LISTENING)
        run = Run(launcher, seconds)
        return run.measure(run.workers("grpc", workers, "--endpoint", server.address,
                                       "--params", str(params), "--chunk", str(chunk)))
