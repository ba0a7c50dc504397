"""What runs on a Ray node for the Ray engine (engines/ray.py): the actor holding one process
of the job, and the node address a command gets once Ray has placed it."""
from __future__ import annotations

import asyncio
import ctypes
import signal
import subprocess
from pathlib import Path

import ray

from . import process

# in a command, the address of the node it runs on as Ray lists it (`ray.nodes()`), filled in
# by its actor once placed (the master builds the command before Ray picks the node); the
# command also gets it as RAY_NODE_IP
NODE_IP = "$(RAY_NODE_IP)"
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child before it execs: SIGKILL when the actor's process dies (a node lost)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the node's end is seen, not enforced
        pass


def node_ip(node_id: str) -> str:
    """The address Ray lists for node `node_id` (its NodeManagerAddress)."""
    for node in ray.nodes():
        if node["NodeID"] == node_id:
            return node["NodeManagerAddress"]
    raise LookupError(f"Ray lists no node {node_id}")


def with_node_ip(command: list[str], env: dict[str, str],
                 ip: str) -> tuple[list[str], dict[str, str]]:
    """`command` with NODE_IP replaced by `ip`, and `env` with RAY_NODE_IP."""
    return [arg.replace(NODE_IP, ip) for arg in command], {**env, "RAY_NODE_IP": ip}


class Runner:
    """The actor holding one process: started in __init__ (the actor's main thread, which
    lives as long as the actor: the parent-death signal is tied to that thread)."""

    def __init__(self, command: list[str], env: dict[str, str], log_path: str,
                 cwd: str | None):
        self.error = ""
        self.popen: subprocess.Popen | None = None
        command, env = with_node_ip(command, env,
                                    node_ip(ray.get_runtime_context().get_node_id()))
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(log_path, "ab") as out:
                self.popen = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, cwd=cwd, env=env,
                                              start_new_session=True,
                                              preexec_fn=_die_with_parent)
        except OSError as exc:
            self.error = str(exc)
            with open(log_path, "a") as out:
                out.write(f"cannot start: {exc}\n")

    def info(self) -> dict:
        return {"pid": self.popen.pid if self.popen else 0,
                "node_id": ray.get_runtime_context().get_node_id(), "error": self.error}

    async def wait(self) -> int:
        """The exit status (negative: killed by that signal; 127: could not start)."""
        if self.popen is None:
            return 127
        return await asyncio.get_running_loop().run_in_executor(None, self.popen.wait)

    def signal(self, sig: int) -> bool:
        # not once it was reaped: its pid (and group) may be another's by now
        return self.popen is not None and self.popen.returncode is None and \
            process.signal_group(self.popen.pid, sig)

    def cpu_seconds(self) -> float | None:
        return process.cpu_seconds(self.popen.pid) if self.popen else None
