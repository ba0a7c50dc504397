"""What hostile requests cost a real PS (issue 16), before and after the per-request bounds.

    python -m benchmarks.ps.hostile [--frames 2000000] [--repeats 20000] [--ids 1000000]

Starts `python -m ps --standalone` (this tree's), initializes it with a 30 KB tensor and an
embedding table (dim 16), then sends, one at a time, on a raw ZeroMQ socket:

- a Pull naming the 30 KB tensor `--repeats` times;
- a message of `--frames` empty frames;
- a PullRows of `--ids` new ids;

and reports for each the answer (code, reason), the seconds from its last frame sent until the
answer came, and how much the PS process's RSS grew (psutil), then whether the PS still
answers a plain Pull.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
import psutil
import zmq

from protos import ps_pb2

CODE = ps_pb2.DataResponse.Code


def _ask(sock, parts, timeout_s: float = 120.0):
    """(answer or None, seconds from the last frame sent to the answer)."""
    sock.send_multipart(parts)
    sent = time.perf_counter()
    if not sock.poll(int(timeout_s * 1000)):
        return None, time.perf_counter() - sent
    reply = sock.recv_multipart()
    return ps_pb2.DataResponse.FromString(reply[0]), time.perf_counter() - sent


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frames", type=int, default=2_000_000)
    p.add_argument("--repeats", type=int, default=20_000)
    p.add_argument("--ids", type=int, default=1_000_000)
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as ckpt:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ps", "--standalone", "--host", "127.0.0.1", "--port", "0",
             "--data-port", "0", "--data-ipc", "off", "--checkpoint-dir", ckpt,
             "--checkpoint-interval", "0"], stdout=subprocess.PIPE, text=True)
        try:
            line = proc.stdout.readline()
            endpoint = re.search(r"data (\S+)", line).group(1)
            from worker_sdk.ps.data_client import DataClient
            import torch

            with DataClient([endpoint], timeout_s=60) as c:
                c.init_parameters({"w": torch.zeros(7680)}, "sgd", lr=0.1,
                                  tables=[{"name": "emb", "dim": 16}])
            sock = zmq.Context.instance().socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(endpoint)
            ps = psutil.Process(proc.pid)
            req = lambda **kw: ps_pb2.DataRequest(client_id="h", seq=1, **kw).SerializeToString()
            cases = {
                f"pull naming a 30 KB tensor {a.repeats} times":
                    [req(pull=ps_pb2.Pull(names=["w"] * a.repeats))],
                f"{a.frames} empty frames": [req(pull=ps_pb2.Pull()), *([b""] * a.frames)],
                f"PullRows of {a.ids} new ids":
                    [req(pull_rows=ps_pb2.PullRows(table="emb")),
                     np.arange(a.ids, dtype=np.int64).tobytes()],
            }
            for name, parts in cases.items():
                rss = ps.memory_info().rss
                resp, seconds = _ask(sock, parts)
                grown = (ps.memory_info().rss - rss) / 2**20
                print(json.dumps({
                    "request": name, "answer_s": round(seconds, 2),
                    "answer": None if resp is None else
                    f"{CODE.Name(resp.code)} {resp.reason}".strip(),
                    "ps_rss_growth_mb": round(grown)}), flush=True)
            resp, _ = _ask(sock, [req(pull=ps_pb2.Pull(names=["w"]))], 30)
            print(json.dumps({"still_serving": resp is not None and resp.code == CODE.OK}))
            sock.close(0)
        finally:
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    main()
