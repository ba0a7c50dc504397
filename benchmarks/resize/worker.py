"""The training process of bench_resize: one worker pushing continuously, every push counted.

    python -m benchmarks.resize.worker --master HOST:PORT --control DIR --rows 1000000

It declares the model (a 2-layer MLP over `--fields` embeddings of the `--rows`-row table
"emb", dim 16, Adagrad; dense counters "count.K"; a table "verify" with SGD lr 1), creates
every row of "emb" (a pull and a push of each, so the PS hold rows and Adagrad state for all of
them), writes DIR/ready and trains once DIR/go exists, one `DataClient.step` per batch (the
previous batch's gradients pushed, this batch's rows and the dense parameters pulled, every PS
in one message). Each step also pushes -1 to `--verify-per-step` distinct rows of "verify"
and to every counter; a step counts as answered when `step` returned.

The driver steers it with files in DIR: `pause` (flush the pending gradients, write `paused`,
wait until `pause` is gone, then make a new client: the PS it knew were restarted), `stop`
(flush, check, write `result.json` and exit). `progress` holds the steps answered so far.

The check at the end: every "verify" row equals the number of answered steps that pushed to
it (SGD lr 1, gradients -1, zeros initially), and every counter equals a local replay of
torch.optim.Adagrad over as many -1 gradients (the PS applies torch's arithmetic to the bit).
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from pswire.optimizers import make_config
from pswire.tables import TableSpec
from worker_sdk.ps.data_client import DataClient

DIM = 16
COUNTERS = 8
LR = 0.05
PRELOAD_CHUNK = 65536


def model_tensors(fields: int, hidden: int) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(fields * DIM, hidden), nn.ReLU(), nn.Linear(hidden, 1))
    tensors = {f"mlp.{n}": p.detach().clone() for n, p in mlp.named_parameters()}
    tensors.update({f"count.{k}": torch.zeros(1) for k in range(COUNTERS)})
    return mlp, tensors


def tables(rows: int) -> list:
    return [TableSpec("emb", DIM, initializer="normal", init_b=0.01, seed=3),
            (TableSpec("verify", 1, initializer="zeros"), make_config("sgd", lr=1.0))]


def declare(master: str, tensors: dict, rows: int) -> DataClient:
    client = DataClient(master=master)
    client.init_parameters(tensors, "adagrad", tables=tables(rows), lr=LR)
    return client


def preload(client: DataClient, rows: int, verify: int) -> None:
    """Every row of "emb" created and pushed once (rows and Adagrad state on the PS), and
    every row of "verify" created at zero."""
    for start in range(0, rows, PRELOAD_CHUNK):
        ids = torch.arange(start, min(rows, start + PRELOAD_CHUNK))
        client.pull_rows("emb", ids)
        client.push_rows("emb", ids, torch.full((ids.numel(), DIM), 1e-3))
    client.pull_rows("verify", torch.arange(verify))


def replay_counter(steps: int) -> float:
    """What a counter holds after `steps` Adagrad steps of gradient -1 (torch.optim's own)."""
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.Adagrad([p], lr=LR, foreach=False)
    for _ in range(steps):
        p.grad = -torch.ones(1)
        opt.step()
    return float(p.detach()[0])


class Trainer:
    """The loop's state: the pending gradients, the counts, the step log."""

    def __init__(self, args, control: Path):
        self.a = args
        self.control = control
        self.rng = np.random.default_rng(args.seed)
        self.mlp, self.tensors = model_tensors(args.fields, args.hidden)
        self.names = sorted(self.tensors)
        self.client = declare(args.master, self.tensors, args.rows)
        self.loss = nn.BCEWithLogitsLoss()
        self.pending: tuple | None = None  # (dense grads, rows) of the last batch computed
        self.verify_counts = np.zeros(args.verify, dtype=np.int64)
        self.answered = 0       # steps whose push was answered
        self.failed: list[str] = []
        self.log_end: list[float] = []   # unix time each step was answered
        self.log_wait: list[float] = []  # seconds its `step` call took
        self.log_push: list[bool] = []   # whether it carried a push
        self.resumes: list[dict] = []
        self.verify_log: list[tuple[float, np.ndarray]] = []  # (answered at, rows pushed)

    def _mutations(self):
        if self.pending is None:
            return None, ()
        return self.pending

    def step(self, pull: bool = True) -> None:
        """One Step: the pending gradients pushed; with `pull`, the next batch read and computed."""
        grads, rows = self._mutations()
        ids = uniq = inv = None
        if pull:
            ids = torch.from_numpy(self.rng.integers(0, self.a.rows, (self.a.batch,
                                                                       self.a.fields)))
            uniq, inv = torch.unique(ids, return_inverse=True)
        vids = None
        if grads is not None:
            vids = self.rng.choice(self.a.verify, self.a.verify_per_step, replace=False)
            rows = [*rows, ("verify", torch.from_numpy(vids),
                            -torch.ones(len(vids), 1))]
        started = time.perf_counter()
        try:
            out = self.client.step(grads, rows=rows, pull=self.names if pull else None,
                                   pull_rows={"emb": uniq} if pull else None)
        except Exception as exc:  # counted as not answered (it may or may not be applied)
            self.failed.append(f"{type(exc).__name__}: {exc}")
            raise
        waited = time.perf_counter() - started
        self.log_end.append(time.time())
        self.log_wait.append(waited)
        self.log_push.append(grads is not None)
        self.pending = None
        if grads is not None:
            self.answered += 1
            self.verify_counts[vids] += 1
            self.verify_log.append((self.log_end[-1] - waited, vids))
        if pull:
            self.pending = self._compute(out, uniq, inv)

    def _compute(self, out, uniq, inv):
        with torch.no_grad():
            for name, p in self.mlp.named_parameters():
                p.copy_(out.dense[f"mlp.{name}"])
        self.mlp.zero_grad()
        table = out.rows["emb"].clone().requires_grad_()
        x = table[inv].flatten(1)
        y = torch.from_numpy(self.rng.integers(0, 2, self.a.batch)).float()
        self.loss(self.mlp(x).squeeze(1), y).backward()
        grads = {f"mlp.{n}": p.grad.clone() for n, p in self.mlp.named_parameters()}
        grads.update({f"count.{k}": -torch.ones(1) for k in range(COUNTERS)})
        return grads, [("emb", uniq, table.grad)]

    def diagnose(self, got, counters) -> dict:
        return _diagnose(self, got, counters)

    def flush(self) -> None:
        if self.pending is not None:
            self.step(pull=False)

    def progress(self) -> None:
        tmp = self.control / "progress.tmp"
        tmp.write_text(str(self.answered))
        os.replace(tmp, self.control / "progress")

    def pause(self) -> None:
        self.flush()
        self.progress()
        paused = time.time()
        (self.control / "paused").write_text(str(paused))
        while (self.control / "pause").exists():
            time.sleep(0.01)
        resumed = time.time()
        self.client.close()
        self.client = declare(self.a.master, self.tensors, self.a.rows)
        self.step()  # reads only: the gradients were flushed before the pause
        self.resumes.append({"paused": paused, "resumed": resumed,
                             "client_ready": self.log_end[-1] - self.log_wait[-1],
                             "first_step": self.log_end[-1]})
        (self.control / "paused").unlink()

    def run(self) -> None:
        self.step()
        n = 0
        while not (self.control / "stop").exists():
            if (self.control / "pause").exists():
                self.pause()
                continue
            self.step()
            n += 1
            if n % 10 == 0:
                self.progress()
        self.flush()
        self.progress()

    def check(self) -> dict:
        got = self.client.pull_rows("verify", torch.arange(self.a.verify)).reshape(-1)
        wrong_rows = int((got.numpy() != self.verify_counts.astype(np.float32)).sum())
        counters = self.client.pull([f"count.{k}" for k in range(COUNTERS)])
        expected = replay_counter(self.answered)
        wrong_counters = sum(float(t[0]) != expected for t in counters.values())
        diagnosis = self.diagnose(got.numpy(), counters)
        return {"diagnosis": diagnosis, "answered": self.answered, "verify_rows": self.a.verify,
                "verify_pushes": int(self.verify_counts.sum()), "verify_rows_wrong": wrong_rows,
                "counters_wrong": wrong_counters, "counter_expected": expected,
                "counter_sample": float(counters["count.0"][0]),
                "exact": wrong_rows == 0 and wrong_counters == 0}


def counter_steps(value: float, near: int, span: int = 50) -> int | None:
    """How many Adagrad steps of gradient -1 give `value` (searched around `near`)."""
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.Adagrad([p], lr=LR, foreach=False)
    for n in range(near + span + 1):
        if n >= near - span and float(p.detach()[0]) == value:
            return n
        p.grad = -torch.ones(1)
        opt.step()
    return None


def _diagnose(trainer: "Trainer", got: np.ndarray, counters: dict) -> dict:
    """The wrong rows and counters, each with its error in pushes (negative: pushes lost,
    positive: applied twice), its slot, and when the steps that pushed to it were sent."""
    from pswire.jit import row_slots
    num_slots = trainer.a.slots
    want = trainer.verify_counts
    bad = np.flatnonzero(got != want.astype(np.float32))
    slots = row_slots(bad.astype(np.int64), num_slots) if bad.size else np.zeros(0, np.int64)
    rows = []
    for rid, slot in zip(bad.tolist(), slots.tolist()):
        sent = [round(t, 3) for t, v in trainer.verify_log if rid in v]
        rows.append({"row": rid, "slot": slot, "got": float(got[rid]), "want": int(want[rid]),
                     "error": float(got[rid]) - int(want[rid]), "sent": sent[-40:]})
    ctr = {name: {"got": float(t[0]), "steps": counter_steps(float(t[0]), trainer.answered)}
           for name, t in counters.items()}
    return {"answered": trainer.answered, "rows": rows, "counters": ctr}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--master", required=True)
    p.add_argument("--control", required=True, help="the directory of the steering files")
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--fields", type=int, default=8)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--verify", type=int, default=4096, help='rows of the "verify" table')
    p.add_argument("--verify-per-step", type=int, default=64)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--slots", type=int, default=1024, help="the master's --ps-slots (diagnosis)")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    control = Path(a.control)
    trainer = Trainer(a, control)
    started = time.time()
    preload(trainer.client, a.rows, a.verify)
    (control / "ready").write_text(f"{time.time() - started:.2f}")
    while not (control / "go").exists():
        time.sleep(0.01)
    error = ""
    try:
        trainer.run()
        check = trainer.check()
    except Exception as exc:  # the driver reports it; the log has the traceback
        error = f"{type(exc).__name__}: {exc}"
        check = {"exact": False}
        raise
    finally:
        result = dict(check, error=error, failed=trainer.failed, end=trainer.log_end,
                      wait=trainer.log_wait, push=trainer.log_push, resumes=trainer.resumes,
                      batch=a.batch)
        (control / "result.json").write_text(json.dumps(result))
        trainer.client.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
