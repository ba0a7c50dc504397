"""The kit and the worker's lease protocol import without torch (a master-only host)."""
from __future__ import annotations

import subprocess
import sys

BLOCK_TORCH = (
    "import sys\n"
    "class Block:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name == 'torch' or name.startswith('torch.'):\n"
    "            raise ImportError('torch is not importable here')\n"
    "sys.meta_path.insert(0, Block())\n"
)


def _imports(module: str) -> subprocess.CompletedProcess:
    code = BLOCK_TORCH + f"import {module}\nassert 'torch' not in sys.modules\n"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_torch_is_really_blocked():
    assert _imports("torch").returncode != 0


def test_rpckit_and_master_import_without_torch():
    for module in ("rpckit.errors", "rpckit.retry", "rpckit.server", "rpckit.settings",
                   "master.server", "worker_sdk.data.master_client", "worker_sdk.data.lease_stream",
                   "worker_sdk.data.simworker"):
        result = _imports(module)
        assert result.returncode == 0, f"{module}: {result.stderr[-2000:]}"
