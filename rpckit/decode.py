"""Servicer registration that answers undecodable request bytes with INVALID_ARGUMENT.

grpc's generated `add_XServicer_to_server` deserializes with `Message.FromString`; when that
raises, grpc answers INTERNAL ("Exception deserializing request!"), which reads as a server
bug. `add_servicer` registers the same methods with a deserializer that never raises: bytes
that are not the request message reach the method as `Undecodable`, and the method is answered
INVALID_ARGUMENT with reason UNDECODABLE before the servicer sees anything.
"""
from __future__ import annotations

from typing import Callable

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor

from .errors import Reason, abort, invalid


class Undecodable:
    """Request bytes that did not parse as the method's request message."""

    __slots__ = ("why", "size")

    def __init__(self, why: str, size: int):
        self.why = why
        self.size = size


def _decoder(cls) -> Callable[[bytes], object]:
    def decode(data: bytes):
        try:
            return cls.FromString(data)
        except Exception as exc:  # noqa: BLE001 - DecodeError, or anything upb raises
            return Undecodable(f"{type(exc).__name__}: {str(exc)[:80]}", len(data))

    return decode


def _checked(behavior: Callable, name: str) -> Callable:
    def handle(request, context):
        if isinstance(request, Undecodable):
            abort(context, invalid(
                f"{name}: the request ({request.size} bytes) is not a valid "
                f"{name} request message ({request.why})", Reason.UNDECODABLE))
        return behavior(request, context)

    handle.__name__ = name
    return handle


def add_servicer(server: grpc.Server, servicer: object, service: ServiceDescriptor) -> None:
    """Register `servicer`'s unary-unary methods of `service` on `server`."""
    handlers = {}
    for method in service.methods:
        request_cls = message_factory.GetMessageClass(method.input_type)
        response_cls = message_factory.GetMessageClass(method.output_type)
        handlers[method.name] = grpc.unary_unary_rpc_method_handler(
            _checked(getattr(servicer, method.name), method.name),
            request_deserializer=_decoder(request_cls),
            response_serializer=response_cls.SerializeToString,
        )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),))
    server.add_registered_method_handlers(service.full_name, handlers)
