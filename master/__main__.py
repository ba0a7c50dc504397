"""`elastic-master` / `python -m master`: start the master and serve until SIGTERM or SIGINT."""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading

from rpckit import auth
from rpckit.server import run_main

from .committer import Committer
from .core import MasterCore, Settings
from .ps_monitor import PSMonitor
from .server import PortInUse, build_server
from .settings import MasterSettings, parse
from .store import Store, StoreError

log = logging.getLogger("elastic-master")
TICK_S = 0.05  # loss detection lag on top of --worker-timeout


def _core_settings(s: MasterSettings) -> Settings:
    return Settings(
        heartbeat_interval=s.heartbeat_interval, worker_timeout=s.worker_timeout,
        max_shard_failures=s.max_shard_failures, min_workers=s.min_workers, max_wait=s.max_wait,
    )


def run(settings: MasterSettings) -> int:
    try:
        store = Store(settings.db)
        store.upgrade()
        snapshot = store.load()
    except StoreError as exc:
        print(f"elastic-master: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - a broken schema or a database that went away
        print(f"elastic-master: cannot prepare the database: {exc}", file=sys.stderr)
        return 1
    core = MasterCore(_core_settings(settings), snapshot=snapshot, lookup_lease=store.lookup_lease)
    stop = threading.Event()
    exit_code = [0]

    def on_fatal(exc: BaseException) -> None:
        exit_code[0] = 3
        stop.set()

    committer = Committer(core, store, on_fatal)
    try:
        server, port, health = build_server(
            core, committer, store, settings.host, settings.port, settings.threads,
            credentials=auth.server_credentials(settings.tls_cert, settings.tls_key),
            interceptors=auth.server_interceptors(
                auth.read_token(settings.auth_token, settings.auth_token_file)),
        )
    except (PortInUse, auth.SecurityConfigError) as exc:
        print(f"elastic-master: {exc}", file=sys.stderr)
        return 1
    committer.start()
    committer.flush()  # the master_started event and any restore-time requeues
    server.start()
    log.info("settings: %s", settings.describe())
    print(f"elastic-master listening on {settings.host}:{port} (pid {os.getpid()})", flush=True)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    def ticker() -> None:
        while not stop.wait(TICK_S):
            try:
                committer.call(core.tick)
            except Exception:  # noqa: BLE001 - the committer reports fatal errors itself
                if committer.fatal is None:
                    log.exception("tick failed")

    threading.Thread(target=ticker, name="ticker", daemon=True).start()
    monitor = PSMonitor(core, committer, timeout=settings.worker_timeout,
                        tls_ca=settings.tls_ca)
    monitor.start()
    stop.wait()
    log.info("stopping")
    monitor.stop.set()
    health.enter_graceful_shutdown()
    server.stop(grace=2).wait()
    committer.stop()
    store.close()
    return exit_code[0]


def main(argv: list[str] | None = None) -> None:
    run_main(parse, run, argv)


if __name__ == "__main__":
    main()
