"""PSClient and ElasticEmbedding: a torch model whose parameters live on the PS set.

    client = PSClient(master="localhost:50051")          # finds the PS set with ListPS
    client.init_parameters(model, optimizer="adagrad", lr=0.05)   # the first worker wins
    for x, y in ds.batches(64):
        client.pull(model)                               # dense tensors, one request per PS
        loss_fn(model(x), y).backward()                  # embeddings pull only the batch's rows
        client.push(model)                               # dense grads + embedding row grads

Dense tensors are placed on the PS by the slot layout (`pswire.slots`, by name) and moved
over the ZeroMQ data plane, one request per PS in parallel. An `ElasticEmbedding` holds no
parameter locally: its forward pulls the rows of the ids in the batch, and `push` sends their
gradients as rows, with the dense gradients, in one `Step` message per PS (worker_sdk/ps/steps.py). `push` is also the acknowledgement point of the SDK: once it has returned,
every record delivered to the loop before it started counts as trained (the ack ledger the
client was given, worker_sdk.data.ack).

The pipelined step (worker_sdk/ps/pipeline.py): `prefetch(next_ids)` sends the request for the
next batch's dense parameters and embedding rows, answered while the current batch computes,
and `push(model, wait=False)` returns at once with at most `max_inflight` pushes unanswered; a
push and the prefetch given after it leave together, one Step per PS, from the caller's thread
(no background thread). Records are acknowledged when their push is answered, in the order the
pushes were given; a push that failed is raised at the next call and its records are never
acknowledged.
"""
from __future__ import annotations

import logging
import numbers
import time
from typing import Callable, Iterator

import torch
from torch import nn

from .data_client import RETRY_BUDGET_S, DataClient, PushOutcome, StaleGradient
from pswire import jit
from pswire.tables import SpecError, TableSpec

from ..data import ack
from . import correct
from .gather import gather
from .ids import mark, unique_inverse
from .model_view import ModelView
from .pipeline import Pipeline, PushJob
from .restarts import Declaration

log = logging.getLogger(__name__)


class ElasticEmbedding(nn.Module):
    """An embedding table on the PS: rows are created there lazily, the first time an id is
    pulled, deterministically from (seed, id); `num_embeddings=None` means unbounded ids.

    Bounding the rows held (docs/ps.md): `max_rows` (a cap over all PS, 0: none),
    `admit_after` (a row at the K-th pull of its id; before, the initial value and no row),
    `ttl_s` / `ttl_steps` (rows untouched that long are evicted), `evict` ("lru" or "lfu":
    which rows make room at the cap). An evicted id comes back at its initial value.
    `max_rows`, `ttl_s`, `ttl_steps` and `evict` may change on a running job (a worker that
    declares new values makes the PS adopt them); the other arguments may not.

    A bad argument raises ValueError naming it (`pswire.tables.SpecError`), by the same check
    the PS makes."""

    def __init__(self, num_embeddings: int | None = None, dim: int = 16, *, table: str,
                 initializer: str = "normal", init_a: float = 0.0, init_b: float = 0.01,
                 seed: int = 0, optimizer: dict | None = None, max_rows: int = 0,
                 admit_after: int = 1, ttl_s: float = 0.0, ttl_steps: int = 0,
                 evict: str = "lru"):
        super().__init__()
        if num_embeddings is not None and (isinstance(num_embeddings, bool)
                                           or not isinstance(num_embeddings, numbers.Integral)
                                           or num_embeddings <= 0):
            raise SpecError("num_embeddings", f"num_embeddings must be a positive integer (or "
                                              f"None for unbounded ids), got {num_embeddings!r}")
        self.num_embeddings = num_embeddings
        self.dim = dim
        self.spec = TableSpec(name=table, dim=dim, initializer=initializer, init_a=init_a,
                              init_b=init_b, seed=seed, num_embeddings=num_embeddings or 0,
                              max_rows=max_rows, admit_after=admit_after, ttl_s=ttl_s,
                              ttl_steps=ttl_steps, evict=evict)
        problem = self.spec.problem()
        if problem is not None:  # this argument is `table` where the spec says `name`
            raise (SpecError("table", f"table: {problem}") if problem.field == "name"
                   else problem)
        self.optimizer = optimizer  # row-wise sgd/adagrad config; None: the dense optimizer's
        self.client: PSClient | None = None
        self._pulled: list[tuple[torch.Tensor, torch.Tensor]] = []  # (ids, rows) this step

    @property
    def table(self) -> str:
        return self.spec.name

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.client is None:
            raise RuntimeError(f"ElasticEmbedding {self.table!r} has no PS client: call "
                               "PSClient.init_parameters(model) first")
        ids = torch.as_tensor(ids, dtype=torch.int64)
        unique, inverse, rows = self.client._rows(self.table, ids, self._check_bounds)
        if rows.numel() == 0:
            rows = torch.zeros(unique.numel(), self.dim)
        if self.training and torch.is_grad_enabled():
            rows.requires_grad_(True)
            self._pulled.append((unique, rows))
        # compiled loops (worker_sdk/ps/gather.py): torch's index_select's values, and its
        # backward's gradient rows (added in the order of `inverse`)
        return gather(rows, inverse).view(*ids.shape, self.dim)

    def _check_bounds(self, unique: torch.Tensor) -> None:
        """ValueError for distinct ids (sorted, checked by `ids.mark`) outside the table."""
        if self.num_embeddings is not None and unique.numel():
            high = int(unique[-1])
            if high >= self.num_embeddings:
                raise ValueError(f"id {high} is outside table {self.table!r} "
                                 f"(num_embeddings={self.num_embeddings})")

    def _take_grads(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        pulled, self._pulled = self._pulled, []
        for ids, rows in pulled:
            if rows.grad is not None:
                yield ids, rows.grad

    def extra_repr(self) -> str:
        return f"table={self.table!r}, num_embeddings={self.num_embeddings}, dim={self.dim}"


def _embeddings(model: nn.Module) -> list[ElasticEmbedding]:
    return [m for m in model.modules() if isinstance(m, ElasticEmbedding)]


class PSClient:
    """The worker's handle on the PS set (found through the master's ListPS)."""

    def __init__(self, master: str, *, timeout_s: float = 10.0, max_attempts: int = 8,
                 discovery_timeout_s: float = 60.0, max_inflight: int = 1,
                 tls_ca: str | None = None, auth_token: str | None = None,
                 retry_budget_s: float = RETRY_BUDGET_S, ledger: ack.AckLedger | None = None,
                 read_own_writes: bool = False, correct_own_writes: bool | None = None):
        """max_inflight: pushes `push(wait=False)` may leave unanswered (a further push first
        collects the oldest answer); each message in flight has its own connection.
        retry_budget_s: how long one call keeps retrying a PS that does not answer before it
        raises PSUnavailable (worker_sdk.ps.data_client).
        tls_ca, auth_token: as MasterClient's (None: ELASTIC_PS_TLS_CA,
        ELASTIC_PS_AUTH_TOKEN / ELASTIC_PS_AUTH_TOKEN_FILE).
        ledger: where answered pushes acknowledge their records (and failed ones abandon
        them): the ack ledger the training loop's ElasticDatasets use; default the process's
        (`worker_sdk.data.ack.LEDGER`).
        read_own_writes: each step computes on every push of this worker (a prefetched batch's
        rows that the batch before it holds, and the dense tensors, are read after the next
        push: worker_sdk/ps/fresh.py), at the cost of a second message per PS a step and a
        wait for the first; off, a step misses the push just before it.
        correct_own_writes: instead, the worker adds its last push's update (SGD, Adagrad)
        to the prefetched rows and dense tensors it misses, before the forward pass
        (worker_sdk/ps/correct.py; an Adagrad row with the PS's state of it, asked in the
        same Step): no message more, no wait. With max_inflight 2 a read answered after the
        next push left is corrected when the versions show it was served before that push
        (worker_sdk/ps/served.py). None (the default): on with max_inflight 1 or 2 and no
        read_own_writes (with more in flight fewer reads can be shown served in time)."""
        if max_inflight < 1:
            raise ValueError(f"max_inflight must be >= 1, got {max_inflight}")
        if correct_own_writes is None:
            correct_own_writes = max_inflight <= 2 and not read_own_writes
        if correct_own_writes and read_own_writes:
            raise ValueError("correct_own_writes and read_own_writes are two ways to one end: "
                             "give one")
        self._correct_own_writes = correct_own_writes
        options = dict(master=master, timeout_s=timeout_s, max_attempts=max_attempts,
                       discovery_timeout_s=discovery_timeout_s, tls_ca=tls_ca,
                       auth_token=auth_token, retry_budget_s=retry_budget_s)
        self.ledger = ledger or ack.LEDGER
        # the model as declared, shared by every client of this worker: a PS that restarted
        # empty is declared again from the model's current values (worker_sdk/ps/restarts.py)
        self.declaration = Declaration()
        self.data = self._client(options)
        # one client per message in flight: a client has one call outstanding at most
        self.pipeline = Pipeline(lambda: self._client(options), self.ledger, max_inflight,
                                 read_own_writes)
        self.pushes = 0
        self.stale_refusals = 0
        self.max_staleness_seen = 0
        self._names: list[str] = []  # the dense tensors the last pull loaded
        self._tables: list[str] = []  # the model's ElasticEmbedding tables
        self._view: ModelView | None = None  # the model of the last pull, push or prefetch
        self.ledger.register_flusher(self)

    def _client(self, options: dict) -> DataClient:
        client = DataClient(**options)
        client.declaration = self.declaration
        return client

    def init_parameters(self, model: nn.Module, optimizer: str = "adagrad",
                        **hyperparameters) -> bool:
        """Declare the model on the PS set: dense parameters, embedding tables and the
        optimizer (`sgd`, `adagrad` or `adam`, with torch.optim's hyperparameters). The first
        call wins; later ones change nothing. Returns True if this call initialised the PS.
        Either way the local model is then loaded with the PS's parameters.

        From here on this process trains through the PS, so its ElasticDatasets (ack "auto")
        count records as trained only once `push` has sent their gradients."""
        self.ledger.use_push_acks(True)
        tables = []
        self._tables = [emb.table for emb in _embeddings(model)]
        if self._tables:  # their ids are hashed to slots by compiled loops: load them now
            jit.warm_up()
        for emb in _embeddings(model):
            emb.client = self
            tables.append({**emb.spec.__dict__, **({"optimizer": emb.optimizer}
                                                   if emb.optimizer else {})})
        dense = {name: p.detach() for name, p in model.named_parameters()}
        # what a PS that restarted empty gets: the values this worker pulled last
        self.declaration.values = lambda: {name: p.detach()
                                           for name, p in model.named_parameters()}
        first = self.data.init_parameters(dense, optimizer=optimizer, tables=tables,
                                          **hyperparameters)
        self.pipeline.set_layout(self.data.owner)
        if self._correct_own_writes:
            correct.warm_up()
            self.pipeline.own_writes = correct.OwnWrites(
                {"name": optimizer, **hyperparameters},
                {emb.table: emb.optimizer for emb in _embeddings(model) if emb.optimizer})
        self.pull(model)
        return first

    def attach(self, model: nn.Module) -> None:
        """Bind `model` to the PS set without declaring anything: for a process that only
        reads the model (an evaluator) and must never be the one to initialise it."""
        self._tables = [emb.table for emb in _embeddings(model)]
        for emb in _embeddings(model):
            emb.client = self
        self.data.set_layout({n: p.numel() * p.element_size()
                              for n, p in model.named_parameters()})
        self.pipeline.set_layout(self.data.owner)

    def prefetch(self, next_ids=None, model: nn.Module | None = None) -> None:
        """Send the request for the next step's dense parameters (all of them, or `model`'s)
        and the embedding rows of `next_ids` (a tensor of ids for a model with one
        ElasticEmbedding, or {table: ids}), and return. The next `pull` and the embeddings'
        next forward
        use what was fetched (rows only when the forward's ids are the ones given here)."""
        self.pipeline.raise_failure()
        names = self._model(model).names if model is not None else None
        if next_ids is None:
            ids = {}
        elif isinstance(next_ids, dict):
            ids = dict(next_ids)
        elif len(self._tables) == 1:
            ids = {self._tables[0]: next_ids}
        else:
            raise ValueError(f"the model has {len(self._tables)} ElasticEmbedding tables: give "
                             "prefetch() a dict {table: ids}")
        self.pipeline.prefetch(names or self._names or None, ids)

    def pull(self, model: nn.Module) -> None:
        """Load the newest dense parameters from the PS into `model` (in place): the prefetched
        ones when `prefetch` fetched them, else pulled now."""
        self.pipeline.raise_failure()
        view = self._model(model)
        if not view.params:
            return
        self._names = view.names
        got = self.pipeline.take_dense(self._names)
        if got is not None:
            tensors, versions, updates = got
            self.data.versions.update(versions)  # the next push names what it was computed from
        else:
            started = time.perf_counter()
            tensors, updates = self.data.pull(self._names), {}
            self.pipeline.wait_pull_s += time.perf_counter() - started
        with torch.no_grad():
            for name, p in view.params:
                update = updates.get(name) if updates else None
                if update is None:
                    p.copy_(tensors[name])
                else:  # the read and what it misses of this worker's own push, in one pass
                    torch.add(tensors[name], update, out=p)

    def _model(self, model: nn.Module) -> ModelView:
        view = self._view
        if view is None or view.model is not model:
            view = self._view = ModelView(model, ElasticEmbedding)
            return view
        return view.current()

    def _rows(self, table: str, ids: torch.Tensor, check: Callable[[torch.Tensor], None]):
        """(unique ids, inverse, their rows) for a forward of `ids`: prefetched when
        `prefetch` was given these ids, else pulled now. `check(unique ids)` raises for ids the
        caller refuses (ValueError), after `ids.mark` checked their bounds: before they are
        pulled here (a prefetch's were checked by the PS as well)."""
        got = self.pipeline.take_rows(table, ids)
        if got is not None:
            check(got[0])
            return got
        unique, inverse = unique_inverse(ids)
        mark(unique)  # the push of their gradients reuses the check and the cut
        check(unique)
        started = time.perf_counter()
        rows = self.data.pull_rows(table, unique).clone()
        self.pipeline.wait_pull_s += time.perf_counter() - started
        return unique, inverse, rows

    def push(self, model: nn.Module, wait: bool = True) -> PushOutcome | None:
        """Send the gradients of the last backward (dense and embedding rows) and clear them.

        wait=True: the push is answered before this returns, and every record delivered to the
        loop before this call counts as trained. wait=False: it is sent without waiting for the
        answer (with the next prefetch, when the loop prefetches; this waits only while
        `max_inflight` pushes are unanswered) and those records count as
        trained once it is answered; a failure is raised at the next call (pull, push,
        prefetch, flush), and the records in flight are then never acknowledged (their leases
        go back with what was trained before: RELEASED when no PS took the push, FAILED when
        a PS refused what it carried).

        A PS that refuses a gradient as too stale (`--max-staleness`) has dropped it, and
        then no PS applied any of the step (worker_sdk.ps.data_client): its row gradients are not
        pushed either, its records are never acknowledged (their leases go back RELEASED with
        what was trained before: no failure of the data), and the client re-pulls
        (synchronously, or at the next `pull`) and counts it.
        """
        self.pipeline.raise_failure()
        view = self._model(model)
        job = PushJob(mark=self.ledger.mark(), versions=dict(self.data.versions),
                      grads={name: p.grad for name, p in view.params if p.grad is not None},
                      rows=[(emb.table, ids, grad) for emb in view.embeddings
                            for ids, grad in emb._take_grads()])
        # the captured grads stay alive in the job; the next backward allocates new ones
        view.zero_grad()
        self.pushes += 1
        if not wait:
            self.pipeline.submit(job)
            return None
        self.pipeline.flush()  # in order: earlier pushes in flight first
        started = time.perf_counter()
        try:
            outcome = self.data.step(job.grads or None, job.versions, job.rows).push
        except StaleGradient as exc:
            self.stale_refusals += 1
            log.info("stale gradient refused (%s); pulling fresh parameters", exc)
            self.ledger.abandon(f"the step's gradient was refused as stale: {exc.message}",
                                released=True)
            self.pull(model)
            return None
        if outcome is not None:
            self.max_staleness_seen = max(self.max_staleness_seen, outcome.max_staleness)
        self.pipeline.wait_push_s += time.perf_counter() - started
        self.ledger.trained(job.mark)
        return outcome

    def flush(self, timeout_s: float | None = None) -> None:
        """Send a push still held and wait until every push is answered; raise the first
        failure."""
        self.pipeline.flush(timeout_s)
        self.stale_refusals += self.pipeline.take_stale()
        self.max_staleness_seen = max(self.max_staleness_seen, self.pipeline.max_staleness)

    def timeline(self) -> dict[str, float]:
        """Seconds the caller spent waiting on pulls and on pushes (see docs/worker_sdk.md)."""
        return self.pipeline.timeline()

    def close(self) -> None:
        try:
            self.pipeline.flush(10.0)
        finally:
            self.pipeline.close()
            self.data.close()

    def __enter__(self) -> "PSClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
