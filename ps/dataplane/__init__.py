"""The PS data plane: one request flows one way, through links each handed the next.

    DataPlane (transport.py)    ZeroMQ sockets and threads, frames, decoding, errors -> answers
      + SameHostServer          the same-host socket (samehost.py), handing requests to the
        (samehost.py)           same DataPlane.handle
      -> TokenCheck (auth.py)   the token; a request with a body
      -> ReplicaNode            the role filter: what this PS serves as primary, backup, fenced;
         (ps/replication/)      a primary's mutations go through the replication order first
      -> Handlers (handlers.py) frames -> tensors -> ParamStore calls -> answers
      -> ParamStore (ps/store/params.py)

No link calls back into the one before it. A standalone PS (no master) has no ReplicaNode.
`build_chain` puts the links together.
"""
from __future__ import annotations

from .auth import TokenCheck
from .handlers import Handlers
from .samehost import auto_path as auto_same_host_path
from .transport import AUTO, AUTO_THREADS, BindError, DataPlane

__all__ = ["AUTO", "AUTO_THREADS", "TokenCheck", "BindError", "DataPlane", "Handlers",
           "auto_same_host_path", "build_chain", "data_plane"]


def build_chain(store, token: str = "", node=None) -> TokenCheck:
    """The links after the transport: auth, then `node` when given (a
    ps.replication.ReplicaNode, itself handed `Handlers(store)`), else the handlers."""
    if node is None:
        return TokenCheck(token, Handlers(store))
    return TokenCheck(token, node)


def data_plane(store, *, token: str = "", node=None, **options) -> DataPlane:
    """A DataPlane serving `store` through the whole chain: `options` as DataPlane's; the frame
    bound is the store's (`limits.max_frames`), and with `node` the handler threads follow its
    role (`ReplicaNode.more_handlers`)."""
    options.setdefault("max_frames", store.limits.max_frames)
    if node is not None:
        options.setdefault("more_handlers", node.more_handlers)
    return DataPlane(build_chain(store, token, node), **options)
