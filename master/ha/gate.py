"""What a master that is not the serving leader answers: UNAVAILABLE, NOT_LEADER, and where
the leader is.

`LeaderGate` is a server interceptor in front of the Master service (health and reflection
pass): while `leading()` is false, every call is refused with reason NOT_LEADER and the
leader's address in the message and in the ErrorInfo metadata (`{"leader": "host:port"}`, ''
while no leader is known), so clients (rpckit.channels) go there at once.
"""
from __future__ import annotations

from typing import Callable

import grpc

from rpckit.channels import LEADER_KEY
from rpckit.errors import Reason, ServiceError, to_status


class LeaderGate(grpc.ServerInterceptor):
    def __init__(self, service: str, leading: Callable[[], bool], leader: Callable[[], str]):
        self._prefix = f"/{service}/"
        self.leading = leading
        self.leader = leader

    def refusal(self) -> ServiceError:
        leader = self.leader()
        where = (f"the leader is {leader}" if leader
                 else "no leader is known yet (a standby takes over within the lease)")
        return ServiceError("UNAVAILABLE", Reason.NOT_LEADER,
                            f"this master is a standby; {where}", {LEADER_KEY: leader})

    def intercept_service(self, continuation, handler_call_details):
        if not handler_call_details.method.startswith(self._prefix) or self.leading():
            return continuation(handler_call_details)
        status = to_status(self.refusal())

        def refuse(request, context):
            context.abort_with_status(status)

        handler = continuation(handler_call_details)
        if handler is not None and handler.response_streaming:
            return grpc.unary_stream_rpc_method_handler(refuse)
        return grpc.unary_unary_rpc_method_handler(refuse)
