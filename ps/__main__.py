"""`elastic-ps` / `python -m ps`: one parameter server, until SIGTERM or SIGINT.

Start-up: without --num-ps, ask the master's PS layout for the count (ps/slots/set_size.py; exit 1
with the message when this index has no place in it); restore the newest good checkpoint, bind
the data plane and the gRPC port (exit 1 with a message when either is taken), print one line
with both addresses, register with the master (a refusal no retry mends: exit 1) while the
compiled loops load in the background (`_warm_up`). SIGTERM:
refuse new mutations (clients retry elsewhere in time), write a checkpoint with everything
applied so far, stop, exit 0 (exit 1 when that checkpoint could not be written, so a
supervisor sees the loss).

`--help` imports neither torch nor numba: the modules that need them load in `run`.
"""
from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading
import uuid
from dataclasses import dataclass

from rpckit import auth
from rpckit.metrics import Metrics, MetricsPortInUse, RpcLatency
from rpckit.server import announce, run_main

from .settings import PSSettings, parse

log = logging.getLogger("elastic-ps")


def _tune_malloc() -> None:
    """Keep freed large buffers in glibc's heap instead of returning them to the kernel.

    Every received tensor frame is a fresh allocation; glibc serves big ones with mmap and
    unmaps them on free, so each message pays page faults on fresh zeroed pages. Raising the
    mmap threshold to its maximum (32 MiB) makes buffers up to that size reuse heap memory.
    Best effort: glibc only.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 32 * 1024 * 1024)   # M_MMAP_THRESHOLD
        libc.mallopt(-1, 512 * 1024 * 1024)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        pass


TRIM_INTERVAL_S = 10.0


def _trim_periodically(stop: threading.Event, interval_s: float = TRIM_INTERVAL_S) -> None:
    """Give the kernel back what the heap holds free, every `interval_s`.

    `_tune_malloc` keeps freed request buffers for reuse, which is what a busy PS wants, but a
    PS whose bounded tables evict rows all day would otherwise keep the high-water mark of its
    buffers forever (2.5x a capped table's bytes measured, 1.1x after a trim: docs/
    benchmarks.md "Bounded embedding tables"). A trim every few seconds costs a few page
    faults on the next buffers. Best effort: glibc only."""
    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return
    while not stop.wait(interval_s):
        trim(0)


MAX_MARKS = 256  # applied marks told to the master (the full table is in the checkpoint)


def restored_message(info, started_ms: int, store=None):
    """What the master needs to count the updates lost by this start: the checkpoint `info`
    restored, or (None, or a file from before InitParameters) that the PS starts empty. The
    master records a loss only where its layout says the index held state
    (master/ps/restores.py)."""
    from protos import master_pb2

    if info is None or (store is not None and not store.initialized):
        return master_pb2.RestoredCheckpoint(taken_ms=0, started_ms=started_ms, empty=True)
    marks = dict(list(info.applied.items())[-MAX_MARKS:])  # the most recently used clients
    held = {} if store is None else dict(tensors=sorted(store.dense)[:MAX_MARKS],
                                         tables=sorted(store.tables)[:MAX_MARKS])
    return master_pb2.RestoredCheckpoint(taken_ms=info.time_ms, started_ms=started_ms,
                                         number=info.number, applied=marks, **held)


def run(settings: PSSettings) -> int:
    try:
        token = auth.read_token(settings.auth_token, settings.auth_token_file)
        credentials = auth.server_credentials(settings.tls_cert, settings.tls_key)
    except auth.SecurityConfigError as exc:
        print(f"elastic-ps: {exc}", file=sys.stderr)
        return 1
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    fatal: list[str] = []  # a refusal no retry mends (a wrong token, TLS): say it, exit 1

    def stop_for(why: str) -> None:
        fatal.append(why)
        stop.set()

    _tune_malloc()
    ps = _start(settings, token, credentials, stop, stop_for)
    if isinstance(ps, int):
        return ps
    stop.wait()
    code = _shut_down(ps, fatal)
    if fatal:
        print(f"elastic-ps: {fatal[0]}", file=sys.stderr, flush=True)
        return 1
    return code


@dataclass
class _Running:
    """What a started PS holds, for its shutdown."""
    me: object  # ps.server.Identity
    store: object
    checkpointer: object
    server: object
    health: object
    data: object
    node: object = None
    channel: object = None
    metrics: object = None
    registrar: object = None


def _close_early(*things) -> None:
    """Close what a start that fails made so far (None: not made)."""
    for thing in things:
        if thing is None:
            continue
        (getattr(thing, "stop", None) or thing.close)()


def _start(settings: PSSettings, token: str, credentials, stop: threading.Event,
           stop_for) -> _Running | int:
    """Restore, bind, serve, say so, then register in the background: the running PS, or
    the exit code of a start that failed (its message printed).

    Only what serving needs comes before the ready line: the compiled loops (seconds on a
    busy machine) load in a thread after it (`_warm_up`), while the registration goes out.
    torch._dynamo, which torch.optim imports on its first call, is never imported
    (ps.store.optim)."""
    import torch

    from .registrar import connect

    if settings.torch_threads:
        torch.set_num_threads(settings.torch_threads)
    token_source = auth.settings_token_source(settings)
    stub = channel = None
    if not settings.standalone:
        stub, channel = connect(settings.master, settings.tls_ca, token, token_source)
    num_ps = settings.num_ps or 1
    if not settings.num_ps and stub is not None:
        from .slots.set_size import NoPlace, ask_master

        try:
            num_ps = ask_master(stub, settings.index, stop, token_source=token_source)
        except NoPlace as exc:
            print(f"elastic-ps: {exc}", file=sys.stderr, flush=True)
            channel.close()
            return 1
        if not num_ps:  # stopped while the master did not answer
            channel.close()
            return 0
    restored = _restore(settings, num_ps)
    if isinstance(restored, int):
        _close_early(channel)
        return restored
    store, checkpointer, info = restored
    warm = threading.Event()  # set by _warm_up (slot imports wait for it)
    ps = _serve(settings, token, credentials, store, checkpointer, num_ps, channel, warm)
    if isinstance(ps, int):
        return ps
    if stub is not None:
        ps.registrar = _registrar(settings, stub, ps, info, token_source, stop, stop_for)
    for t in _background(settings, ps, warm, stop):
        t.start()
    return ps


def _background(settings: PSSettings, ps: _Running, warm: threading.Event,
                stop: threading.Event) -> list[threading.Thread]:
    """The threads a running PS keeps: registration, warm-up, checkpoints, heap trims."""
    def thread(target, *args, name: str) -> threading.Thread:
        return threading.Thread(target=target, args=args, name=name, daemon=True)

    background = [] if ps.registrar is None else [thread(ps.registrar.run, stop,
                                                         name="registrar")]
    background += [thread(_warm_up, warm, name="warm-up"),
                   thread(_trim_periodically, stop, name="malloc-trim")]
    if settings.checkpoint_interval > 0:
        background.append(thread(ps.checkpointer.run_periodic, settings.checkpoint_interval,
                                 stop, name="checkpointer"))
    if settings.delta_interval > 0:
        background.append(thread(ps.checkpointer.run_periodic, settings.delta_interval, stop,
                                 True, name="delta-checkpointer"))
    return background


def _restore(settings: PSSettings, num_ps: int):
    """(store, checkpointer, what was restored or None), or 1 when the directory cannot be
    read (said on stderr)."""
    from .checkpoint import CheckpointDir, Checkpointer
    from .store.params import ParamStore

    store = ParamStore(settings.index, num_ps, settings.max_staleness,
                       settings.applied_capacity, settings.limits)
    checkpointer = Checkpointer(store, CheckpointDir(settings.checkpoint_dir, settings.index,
                                                     num_ps, settings.keep_checkpoints))
    try:
        restored = checkpointer.restore()
    except Exception as exc:  # noqa: BLE001 - e.g. an unreadable directory
        print(f"elastic-ps: cannot restore from {settings.checkpoint_dir}: {exc}", file=sys.stderr)
        return 1
    if restored:
        log.info("restored %s: %d tensors, %d tables, initialized=%s", restored.path.name,
                 len(store.dense), len(store.tables), store.initialized)
    else:
        log.info("no checkpoint in %s: starting empty", settings.checkpoint_dir)
    return store, checkpointer, restored


def _serve(settings: PSSettings, token: str, credentials, store, checkpointer, num_ps: int,
           channel, warm: threading.Event) -> _Running | int:
    """Bind the data plane and the gRPC port, start both and print the ready line; 1 when a
    port is taken (said on stderr)."""
    import zmq

    from . import metrics as ps_metrics
    from .dataplane import BindError
    from .server import Identity, PortInUse, PSServicer, build_server, not_serving_on_failure, now_ms
    from .slots.calls import SlotCalls

    # Under TLS the data plane is encrypted too (CURVE): a fresh key pair per start, whose
    # public half clients learn from the master's ListPS (or GetPSStatus).
    curve = zmq.curve_keypair() if credentials is not None else None
    node = _replica_node(settings, store, token, curve)
    data = _data_plane(settings, store, token, node, curve)
    try:
        data_port = data.bind()
    except BindError as exc:
        print(f"elastic-ps: {exc}", file=sys.stderr)
        _close_early(data, channel)
        return 1
    public = settings.public_host
    host_part = f"[{public}]" if ":" in public else public
    me = Identity(settings.index, num_ps, data_address=f"tcp://{host_part}:{data_port}",
                  started_ms=now_ms(), data_public_key=curve[0].decode() if curve else "")
    if node is not None:
        node.data_address = me.data_address  # where the primary sends this backup mutations
    # the master moves hash slots between PS through these (ps/slots/calls.py, ps/slots/moves.py)
    slot_calls = None if node is None else SlotCalls(
        store, node, zmq.Context.instance(), token, warm=warm,
        durable=lambda: checkpointer.write(delta=True), chained=lambda: bool(checkpointer.last))
    metrics = Metrics() if settings.metrics_port >= 0 else None
    try:
        metrics_port = metrics.serve(settings.host, settings.metrics_port) if metrics else 0
        server, port, health = build_server(
            PSServicer(store, checkpointer, me, node, slot_calls), settings.host, settings.port,
            settings.grpc_threads, credentials,
            [*([RpcLatency(metrics)] if metrics else []), *auth.server_interceptors(token)])
    except (PortInUse, MetricsPortInUse) as exc:
        print(f"elastic-ps: {exc}", file=sys.stderr)
        _close_early(data, metrics, channel)
        return 1
    if metrics:
        ps_metrics.install(metrics, store, checkpointer, data, node)
    me.address = f"{host_part}:{port}"
    data.on_failure = not_serving_on_failure(health)
    data.start()
    server.start()
    log.info("settings: %s", settings.describe())
    local = f" same-host {data.local_endpoint}" if data.local_endpoint else ""
    shown = f" metrics http://{settings.host}:{metrics_port}/metrics" if metrics else ""
    announce(f"elastic-ps {settings.index}/{num_ps} listening on grpc {me.address} "
             f"data {me.data_address}{local}{shown} (pid {os.getpid()})")
    return _Running(me, store, checkpointer, server, health, data, node, channel, metrics)


def _data_plane(settings: PSSettings, store, token: str, node, curve):
    """The data plane (not bound yet), with the same-host socket `--data-ipc` asks for."""
    from .dataplane import auto_same_host_path, data_plane

    auto = settings.data_ipc == "auto"  # --data-ipc: the same-host socket
    same_host_path = auto_same_host_path(settings.index) if auto else (
        "" if settings.data_ipc in ("", "off") else settings.data_ipc)
    return data_plane(store, token=token, node=node, host=settings.host,
                      port=settings.data_port, threads=settings.threads,
                      max_frame_bytes=settings.max_frame_mb * 1024 * 1024,
                      same_host_path=same_host_path, same_host_optional=auto,
                      curve_keypair=curve)


def _replica_node(settings: PSSettings, store, token: str, curve):
    """With a master, this PS serves only in the role the master gives it (ps.replication):
    primary, or a backup of its index's primary (--ps-replicas on the master). None when
    standalone."""
    if settings.standalone:
        return None
    import zmq

    from .dataplane import Handlers
    from .replication import ReplicaNode

    return ReplicaNode(store, Handlers(store), zmq.Context.instance(), token, uuid.uuid4().hex,
                       data_public_key=curve[0].decode() if curve else "", data_address="",
                       ack_timeout=settings.replica_ack_timeout,
                       token_source=auth.settings_token_source(settings))


def _registrar(settings: PSSettings, stub, ps: _Running, restored, token_source: str,
               stop: threading.Event, stop_for):
    from .slots.moves import apply_layout
    from .slots.ownership import ranges_mask
    from .registrar import Registrar

    me, store = ps.me, ps.store
    return Registrar(stub, me.address, me.data_address, settings.index,
                     me.num_ps, settings.register_interval,
                     # --num-ps left out: registered as "the layout's", so a resize
                     # while this PS restored does not refuse it
                     asked_num_ps=settings.num_ps,
                     data_public_key=me.data_public_key, node=ps.node,
                     restored=restored_message(restored, me.started_ms, store),
                     token_source=token_source, on_fatal=stop_for,
                     on_removed=lambda why: _leave(why, stop),
                     on_layout=lambda version, slots, ranges: apply_layout(
                         store, ranges_mask(ranges, slots), version))


def _shut_down(ps: _Running, fatal: list[str]) -> int:
    """SIGTERM's work: refuse mutations, the final checkpoint, stop everything; the exit code
    (1: the final checkpoint failed)."""
    log.info("stopping: refusing new pushes and writing a final checkpoint")
    ps.health.enter_graceful_shutdown()
    code = 0
    ps.store.stop_mutations()
    registrar = ps.registrar
    if fatal and registrar is not None and not registrar.registrations:
        # refused before it ever served (a PS only serves the role the master gives it): its
        # state is what it restored, and a file of it would pass for this index's checkpoint
        log.info("never registered: no final checkpoint")
    else:
        try:
            info = ps.checkpointer.write()
            log.info("final checkpoint %s written", info.path.name)
        except Exception as exc:  # noqa: BLE001 - say so and exit non-zero
            log.exception("the final checkpoint failed")
            print(f"elastic-ps: the final checkpoint failed: {exc}", file=sys.stderr)
            code = 1
    ps.server.stop(grace=1).wait()
    if ps.node is not None:
        ps.node.close()
    ps.data.stop()
    if ps.channel is not None:
        ps.channel.close()
    if ps.metrics:
        ps.metrics.close()
    return code


def _warm_up(done: threading.Event) -> None:
    """Step one throwaway optimizer of each kind and run each compiled loop once: a loop's
    first call loads it from numba's cache (or compiles it, once after a change), which would
    otherwise fall inside the first requests, or the first slot move this PS takes
    (docs/benchmarks.md, "Live PS resize"). Run in a thread once the PS listens: the
    registration need not wait for it, a request that needs a loop meanwhile waits for its
    load (numba's lock) instead of repeating it, and a slot import waits for `done`."""
    from .store import flat_dense
    from .replication.backup import warm_up as warm_optimizers
    from .store.tables import kernels

    try:
        warm_optimizers()
        kernels.warm_up()  # the compiled loops of the request path, from numba's cache
        flat_dense.warm_up()
    except Exception:  # noqa: BLE001 - only a head start: the first request does the same
        log.exception("warming up failed (the first requests will load what it would have)")
    finally:
        done.set()


# A PS a shrink removed answers WRONG_OWNER this long before it exits: a client whose request
# to it went unanswered (a lost reply) gets a refusal to re-route by, not silence.
LEAVE_AFTER_S = 3.0


def _leave(why: str, stop: threading.Event) -> None:
    announce(f"elastic-ps: {why} (in {LEAVE_AFTER_S:.0f} s)")
    timer = threading.Timer(LEAVE_AFTER_S, stop.set)
    timer.daemon = True
    timer.start()


def main(argv: list[str] | None = None) -> None:
    run_main(parse, run, argv)


if __name__ == "__main__":
    main()
