"""The first link after the transport: the token, and a request that says what it is.

With a token (`--auth-token`) every request must carry it in `DataRequest.token`; one that
does not is answered UNAUTHENTICATED before anything else is looked at, and changes nothing.
"""
from __future__ import annotations

from rpckit import auth
from rpckit.errors import invalid


class TokenCheck:
    def __init__(self, token: str, next):
        self.token = token
        self.next = next

    def handle(self, kind, req, frames: list, header) -> list:
        if self.token and not auth.token_matches(req.token, self.token):
            raise auth.unauthenticated("no auth token" if not req.token else "wrong auth token")
        if kind is None:
            raise invalid("the request has no body: set one of init_parameters, pull, "
                          "push, pull_rows, push_rows, step")
        return self.next.handle(kind, req, frames, header)
