#!/usr/bin/env bash
# Create .venv (if missing) and install elastic-ps with its test tools. Idempotent.
# Needs Python 3.10+ with pip and venv; nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
. .venv/bin/activate
stamp=.venv/.elastic-ps-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  python -m pip install -q --upgrade pip
  # torch first and pinned: this CPU build is what the project is tested with
  python -m pip install -q "torch==2.13.0"
  python -m pip install -q -e ".[dev,train,postgres,ray]"  # ray: the Ray engine's tests
  touch "$stamp"
fi
# Compile the PS's and the SDK's loops (numba) once now, into the checkout's __pycache__:
# otherwise the first processes started (the first tests) each compile them, a few seconds.
python -c "from ps.store.tables import kernels; from ps.store import flat_dense; kernels.warm_up(); flat_dense.warm_up()"
