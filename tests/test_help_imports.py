"""`elastic-ps --help`, `elastic-master --help` and `elastic-ctl --help` answer without
importing torch or numba (issue 37: `elastic-ps --help` took 2.4-3.5 s, all of it imports):
each runs in a fresh interpreter where importing either fails."""
from __future__ import annotations

import subprocess
import sys

import pytest

BLOCK = (
    "import sys\n"
    "class Block:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.split('.')[0] in ('torch', 'numba'):\n"
    "            raise ImportError(name + ' is not importable here')\n"
    "sys.meta_path.insert(0, Block())\n"
)


def _help(module: str) -> subprocess.CompletedProcess:
    code = BLOCK + (f"import runpy\nsys.argv = ['{module}', '--help']\n"
                    f"runpy.run_module('{module}', run_name='__main__')\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)


def test_the_block_is_real():
    code = BLOCK + "import numba\n"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode != 0


@pytest.mark.parametrize("module", ["ps", "master", "master.ctl"])
def test_help_without_torch_or_numba(module):
    done = _help(module)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "usage:" in done.stdout
