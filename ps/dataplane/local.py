"""The same-host endpoint of the data plane: a Unix socket a PS offers its local workers."""
from __future__ import annotations

import os
import tempfile
import uuid

LOCAL_DIR = "elastic-ps"
MAX_UNIX_PATH = 100  # sun_path is 108 bytes on Linux


def auto_ipc_path(index: int) -> str:
    """A fresh Unix socket path for the same-host endpoint, under the temp directory; sockets
    left by PS that are gone (killed) are removed. Empty when no usable path exists."""
    directory = os.path.join(tempfile.gettempdir(), LOCAL_DIR)
    try:
        os.makedirs(directory, exist_ok=True)
        if not os.access(directory, os.W_OK):
            return ""
        for name in os.listdir(directory):
            parts = name.split("-")
            if name.endswith(".sock") and len(parts) == 4 and parts[2].isdigit():
                if not _alive(int(parts[2])):
                    try:
                        os.unlink(os.path.join(directory, name))
                    except OSError:
                        pass
    except OSError:
        return ""
    path = os.path.join(directory, f"ps-{index}-{os.getpid()}-{uuid.uuid4().hex[:8]}.sock")
    return path if len(path) <= MAX_UNIX_PATH else ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True
