"""The real master servicer over a real core and store, in this process, on a fake clock.

`LocalMaster().stub()` is what MasterClient(stub=...) calls instead of a channel: the request
goes through `MasterServicer` (conversions, refusals with their reasons) to `MasterCore`, each
change committed to an in-memory SQLite store before the answer, as in the master process. No
socket and no sleep: time moves only with `advance()`. Faults are scripted per method:
`unreachable(method, n)` fails the next n calls before they reach the core, `lose_answer(method)`
applies the next call and then fails it (an uncertain call).
"""
from __future__ import annotations

from collections import defaultdict

import grpc

from master.core import Settings
from master.server import MasterServicer
from tests.master.harness import Harness


class LocalRpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str, trailing=()):
        super().__init__(details)
        self._code, self._details, self._trailing = code, details, tuple(trailing)

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self):
        return self._trailing


class _Context:
    def abort_with_status(self, status):
        raise LocalRpcError(status.code, status.details, status.trailing_metadata)

    def abort(self, code, details):
        raise LocalRpcError(code, details)


class _Committer:
    """Commits every change before the answer, like master.persistence.committer.Committer."""

    def __init__(self, harness: Harness):
        self.harness = harness

    def call(self, fn):
        result = fn()
        self.harness.commit()
        return result

    def read(self, fn):
        return fn()


class LocalMaster:
    def __init__(self, settings: Settings | None = None):
        self.harness = Harness(settings)
        self._servicer()
        self.calls: dict[str, int] = defaultdict(int)
        self._unreachable: dict[str, int] = defaultdict(int)
        self._lose: dict[str, int] = defaultdict(int)

    def _servicer(self) -> None:
        h = self.harness
        self.servicer = MasterServicer(h.core, _Committer(h), h.store)

    # ---- the stub ------------------------------------------------------------------------------

    def stub(self) -> "LocalMaster":
        return self

    def close(self) -> None:
        """MasterClient.close() closes its stub: nothing to close here."""

    def retry_cap(self) -> float:
        """As rpckit.channels.LeaderStub's: no standby here, so no cap on the backoff."""
        return float("inf")

    def __getattr__(self, method: str):
        if not method[:1].isupper():
            raise AttributeError(method)

        def call(request, timeout=None):
            self.calls[method] += 1
            if self._unreachable[method]:
                self._unreachable[method] -= 1
                raise LocalRpcError(grpc.StatusCode.UNAVAILABLE, "connection refused")
            response = getattr(self.servicer, method)(request, _Context())
            if self._lose[method]:
                self._lose[method] -= 1
                raise LocalRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, "answer lost")
            return response

        return call

    # ---- faults and time -----------------------------------------------------------------------

    def unreachable(self, method: str, times: int = 1) -> None:
        self._unreachable[method] += times

    def lose_answer(self, method: str, times: int = 1) -> None:
        self._lose[method] += times

    def advance(self, seconds: float) -> None:
        """Time passes: silent workers are declared lost, expired leases come back."""
        self.harness.clock.advance(seconds)
        self.harness.core.tick()
        self.harness.commit()

    def restart(self) -> None:
        """The master restarts on its database."""
        self.harness.restart()
        self._servicer()

    def replace_database(self) -> None:
        """The master comes back on an empty database (it forgot every dataset and worker)."""
        self.harness = Harness(self.harness.settings)
        self._servicer()

    # ---- what the master knows -----------------------------------------------------------------

    def epochs(self, dataset: str) -> dict[int, object]:
        from protos import master_pb2 as pb

        status = self.servicer.GetStatus(pb.GetStatusRequest(), _Context())
        (ds,) = [d for d in status.datasets if d.spec.name == dataset]
        return {e.epoch: e for e in ds.epochs}

    def events(self, kind: str) -> list:
        from protos import master_pb2 as pb

        events = self.servicer.GetEvents(pb.GetEventsRequest(), _Context()).events
        return [e for e in events if e.kind == kind]
