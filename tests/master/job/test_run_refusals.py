"""`elastic-job run` refuses what it cannot run before it starts anything."""
from __future__ import annotations

import pytest
import yaml

from master.job import cli

SPEC = {"name": "t", "workers": {"command": "python -m x", "markets": [{"name": "spot",
                                                                          "price": 0.1}]}}


def test_engine_kubernetes_points_to_manifests_exits_2_and_starts_nothing(tmp_path, capsys):
    """A kubernetes job's masters run in the cluster: `run` says how to start it there."""
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({**SPEC, "engine": "kubernetes"}))
    with pytest.raises(SystemExit) as done:
        cli.main(["run", str(spec)])
    assert done.value.code == 2
    assert "elastic-job manifests" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.yaml"]  # no run folder, no db
