"""The committed generated code under protos/ is exactly what the .proto files produce."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_generated_code_has_not_drifted(tmp_path):
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_protos.py"), "--out", str(tmp_path)],
        check=True,
    )
    generated = sorted(p.name for p in (tmp_path / "protos").iterdir())
    assert generated, "nothing was generated"
    for name in generated:
        committed = ROOT / "protos" / name
        assert committed.exists(), f"protos/{name} is not committed; run scripts/gen_protos.py"
        assert committed.read_text() == (tmp_path / "protos" / name).read_text(), (
            f"protos/{name} differs from what the .proto produces; run scripts/gen_protos.py"
        )
    committed_generated = sorted(
        p.name for p in (ROOT / "protos").iterdir() if p.name.endswith(("_pb2.py", "_pb2.pyi",
                                                                         "_pb2_grpc.py"))
    )
    assert committed_generated == generated, "a generated file has no .proto any more"
