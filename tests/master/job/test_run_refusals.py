"""`elastic-job run` refuses what it cannot run before it starts anything."""
from __future__ import annotations

import pytest
import yaml

from master.job import cli

SPEC = {"name": "t", "workers": {"command": "python -m x", "markets": [{"name": "spot",
                                                                          "price": 0.1}]}}


def test_an_engine_this_build_lacks_exits_2_and_starts_nothing(tmp_path, capsys):
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({**SPEC, "engine": "kubernetes"}))
    with pytest.raises(SystemExit) as done:
        cli.main(["run", str(spec)])
    assert done.value.code == 2
    assert "engine 'kubernetes' is not available" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.yaml"]  # no run folder, no db
