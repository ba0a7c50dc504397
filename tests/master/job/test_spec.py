"""The job spec: every field checked before anything starts, each refusal naming its field."""
from __future__ import annotations

import copy

import pytest
import yaml

from master.job.spec import JobSpec, SpecError, load_spec, parse_spec

GOOD = {
    "name": "ctr",
    "engine": "local",
    "workers": {
        "command": ["python", "-m", "examples.ctr.train"],
        "env": {"OMP_NUM_THREADS": 1},
        "min": 1, "max": 4,
        "markets": [{"name": "spot", "price": 0.3}, {"name": "on-demand", "price": 1.0}],
    },
    "ps": {"count": 2, "max": 3},
    "scaling": {"interval_s": 5},
}


def with_(path: str, value):
    """GOOD with the field at a dotted path (list items as [i]) set to value (or removed)."""
    spec = copy.deepcopy(GOOD)
    node, keys = spec, path.replace("[", ".").replace("]", "").split(".")
    for key in keys[:-1]:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    last = keys[-1]
    if value is _REMOVE:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return spec


_REMOVE = object()


def test_a_good_spec_reads_with_the_design_defaults():
    spec = parse_spec(GOOD)
    assert isinstance(spec, JobSpec)
    assert spec.workers.command == ("python", "-m", "examples.ctr.train")
    assert dict(spec.workers.env) == {"OMP_NUM_THREADS": "1"}
    assert spec.workers.market_names == ("spot", "on-demand")
    assert spec.ps.market == "on-demand"  # the last, most reliable market
    assert (spec.ps.count, spec.ps.min, spec.ps.max, spec.ps.replicas) == (2, 1, 3, 0)
    assert (spec.master.port, spec.master.standbys) == (50051, 0)
    s = spec.scaling
    assert (s.interval_s, s.min_gain, s.ps_hot_cpu, s.ps_cold_cpu, s.ps_hot_intervals,
            s.ps_cooldown_s, s.budget_per_hour, s.spot_wait_s) == (5.0, 0.2, 0.9, 0.3, 3,
                                                                   300.0, 0.0, 60.0)
    assert s.deadline_h == 0.0  # no deadline: the policy as the contract pins it
    assert parse_spec(with_("scaling.deadline_h", 26)).scaling.deadline_h == 26.0
    assert spec.engine_options["preempt_grace_s"] == 30.0


def test_a_command_string_is_split_as_a_shell_would():
    spec = parse_spec(with_("workers.command", "python -m x --name 'a b'"))
    assert spec.workers.command == ("python", "-m", "x", "--name", "a b")


@pytest.mark.parametrize("path, value, field", [
    ("workers.min", 5, "workers.min"),                         # min > max
    ("workers.max", 0, "workers.max"),
    ("workers.min", "one", "workers.min"),                     # a wrong type
    ("workers.min", True, "workers.min"),
    ("workers.markets[1].price", -1, "workers.markets[1].price"),  # a negative price
    ("workers.markets[1].price", _REMOVE, "workers.markets[1].price"),
    ("workers.markets[1].name", "spot", "workers.markets[1].name"),  # twice
    ("workers.markets[0].name", "Spot Market", "workers.markets[0].name"),
    ("workers.markets[0].zone", "a", "workers.markets[0].zone"),    # unknown field
    ("workers.markets", [], "workers.markets"),
    ("workers.command", [], "workers.command"),                # empty command
    ("workers.command", "", "workers.command"),
    ("workers.command", [""], "workers.command[0]"),
    ("workers.command", _REMOVE, "workers.command"),
    ("workers.env", {"ELASTIC_PS_MASTER": "x"}, "workers.env.ELASTIC_PS_MASTER"),
    ("workers.env", {"1X": "x"}, "workers.env.1X"),
    ("workers.env", {"X": [1]}, "workers.env.X"),
    ("workers.replicas", 1, "workers.replicas"),
    ("engine", "slurm", "engine"),                             # unknown engine
    ("name", "", "name"),
    ("name", "Has Spaces", "name"),
    ("colour", "red", "colour"),
    ("ps.market", "reserved", "ps.market"),                    # unknown market
    ("ps.count", 5, "ps.count"),
    ("ps.min", 4, "ps.min"),
    ("ps.replicas", 2, "ps.replicas"),
    ("ps.args", "--threads 'unclosed", "ps.args"),
    ("master.port", 70000, "master.port"),
    ("master.standbys", -1, "master.standbys"),
    ("master.db", 5, "master.db"),
    ("scaling.interval_s", 0, "scaling.interval_s"),           # interval 0
    ("scaling.interval_s", float("nan"), "scaling.interval_s"),
    ("scaling.min_gain", 2, "scaling.min_gain"),
    ("scaling.ps_cold_cpu", 0.95, "scaling.ps_cold_cpu"),
    ("scaling.ps_hot_cpu", 0, "scaling.ps_hot_cpu"),
    ("scaling.ps_hot_intervals", 0, "scaling.ps_hot_intervals"),
    ("scaling.budget_per_hour", -5, "scaling.budget_per_hour"),
    ("scaling.budget_per_hour", 2.0, "scaling.budget_per_hour"),  # below the floors
    ("scaling.spot_wait_s", "soon", "scaling.spot_wait_s"),
    ("scaling.deadline_h", -1, "scaling.deadline_h"),
    ("scaling.deadline_h", "friday", "scaling.deadline_h"),
    ("scaling.deadline_h", float("inf"), "scaling.deadline_h"),
    ("scaling.warmup", 1, "scaling.warmup"),
    ("engine_options.preempt_grace_s", -1, "engine_options.preempt_grace_s"),
    ("engine_options.address", "auto", "engine_options.address"),  # a ray option on local
    ("engine_options.market_trace", "does-not-exist.csv", "engine_options.market_trace"),
])
def test_each_bad_field_is_refused_by_name(path, value, field):
    with pytest.raises(SpecError) as e:
        parse_spec(with_(path, value))
    assert e.value.field == field, str(e.value)
    assert str(e.value).startswith(field + ": ")


def test_a_budget_that_holds_the_floors_is_accepted():
    # ps.max 3 + the master on on-demand (4.0) + workers.min 1 on the dearest market (1.0)
    assert parse_spec(with_("scaling.budget_per_hour", 5.0)).scaling.budget_per_hour == 5.0
    with pytest.raises(SpecError, match="budget_per_hour"):
        parse_spec(with_("scaling.budget_per_hour", 4.99))


def test_engine_options_per_engine():
    ray = parse_spec({**with_("engine", "ray"), "engine_options": {"address": "local"}})
    assert dict(ray.engine_options) == {"address": "local", "market_label": "market"}
    k8s = parse_spec({**with_("engine", "kubernetes"), "engine_options": {
        "market_selectors": {"spot": {"node.kubernetes.io/capacity-type": "spot"}}}})
    assert dict(k8s.engine_options["market_selectors"]["spot"]) == {
        "node.kubernetes.io/capacity-type": "spot"}
    with pytest.raises(SpecError) as e:
        parse_spec({**with_("engine", "kubernetes"), "engine_options": {
            "market_selectors": {"cheap": {"a": "b"}}}})
    assert e.value.field == "engine_options.market_selectors.cheap"


def test_a_market_trace_is_read_relative_to_the_spec_and_checked_row_by_row(tmp_path):
    (tmp_path / "traces").mkdir()
    trace = tmp_path / "traces" / "t.csv"
    trace.write_text("# synthetic\nt_s,market,capacity\n0,spot,4\n60,spot,0\n")
    doc = with_("engine_options", {"market_trace": "traces/t.csv"})
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(doc))
    assert load_spec(job).engine_options["market_trace"] == str(trace)
    trace.write_text("t_s,market,capacity\n0,spot,4\n60,spot,-1\n")
    with pytest.raises(SpecError) as e:
        load_spec(job)
    assert e.value.field == "engine_options.market_trace"
    assert "row 3, column capacity" in str(e.value)
    trace.write_text("t_s,market,capacity\n0,preemptible,4\n")
    with pytest.raises(SpecError, match="'preemptible'"):
        load_spec(job)


def test_an_unreadable_or_non_yaml_file_is_refused(tmp_path):
    with pytest.raises(SpecError) as e:
        load_spec(tmp_path / "missing.yaml")
    assert e.value.field == "(file)"
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(SpecError, match="not YAML"):
        load_spec(bad)
    bad.write_text("- a list\n")
    with pytest.raises(SpecError, match="mapping"):
        load_spec(bad)


def test_the_spec_is_frozen():
    spec = parse_spec(GOOD)
    with pytest.raises(AttributeError):
        spec.workers.min = 3
    with pytest.raises(TypeError):
        spec.workers.env["X"] = "1"


def test_a_spec_file_over_a_mebibyte_is_refused_unread(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * (1 << 20) + "\nname: a\n")
    with pytest.raises(SpecError, match="over 1048576 bytes"):
        load_spec(big)


def test_a_key_given_twice_is_refused_with_its_line(tmp_path):
    twice = tmp_path / "twice.yaml"
    twice.write_text(yaml.safe_dump(GOOD) + "scaling: {interval_s: 30}\n")
    with pytest.raises(SpecError) as e:
        load_spec(twice)
    assert "'scaling' is given twice" in str(e.value) and "line " in str(e.value)
    once = tmp_path / "once.yaml"
    once.write_text(yaml.safe_dump(GOOD))
    assert load_spec(once).scaling.interval_s == 5.0
    merged = tmp_path / "merged.yaml"  # a merge key's fields may be overridden beside it
    merged.write_text("name: m\nworkers:\n  command: train\n  markets:\n"
                      "    - &spot {name: spot, price: 0.3}\n"
                      "    - {<<: *spot, name: on-demand, price: 1}\n")
    assert load_spec(merged).workers.market_names == ("spot", "on-demand")
