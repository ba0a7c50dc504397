"""What a client's connection to one PS's data plane is, whatever carries it.

Two transports implement it: ZeroMQ (`pswire.connection.ZmqTransport`, a DEALER socket over
TCP, encrypted with CURVE when the PS registered a key) and the same-host socket
(`pswire.samehost.SameHostTransport`, a Unix stream socket to a PS on this machine, without
ZeroMQ's I/O threads). Both carry the same messages, [DataRequest, buffer, ...] out and
[DataResponse, buffer, ...] back, one answer per request, so the code above them (the worker's
exchange, `pswire.connection.Connection`) never asks which one it holds.
"""
from __future__ import annotations

import abc


class Transport(abc.ABC):
    """One connection to one PS. `send` and `recv` raise OSError (or ValueError for bytes that
    are not a message) when the connection is no longer usable: the caller drops it."""

    endpoint: str  # where it goes: tcp://HOST:PORT, unix://PATH
    # whether small buffers are worth joining into one frame before sending (a ZeroMQ frame
    # costs a few us on each side; the same-host socket writes all parts in one call)
    joins_buffers: bool = False

    @abc.abstractmethod
    def connect(self) -> None:
        """Open the connection (OSError when the peer cannot be reached now)."""

    @abc.abstractmethod
    def send(self, parts: list) -> None:
        """Send one message: bytes, buffers, numpy arrays or zmq.Frame, each from its own
        memory where the transport can."""

    @abc.abstractmethod
    def recv(self) -> list:
        """The next message's frames (zmq.Frame or memoryview, without a copy); call it when
        `pollable` is readable."""

    @abc.abstractmethod
    def close(self) -> None:
        """Close at once, dropping what was not sent (a dead PS must never hold a close)."""

    @property
    @abc.abstractmethod
    def pollable(self):
        """What a `zmq.Poller` waits on for an answer: a zmq.Socket or a file descriptor."""
