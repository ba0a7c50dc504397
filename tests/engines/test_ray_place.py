"""Where the Ray engine places the masters, as pure functions of the nodes Ray lists (no Ray
running): the live, undrained nodes of the market (`market_nodes`), spread so a standby is
apart from its master where the market has room on several nodes (`spread`), refused when it
has none. The address a master listens on is its node's NodeManagerAddress; the engine on a
real Ray cluster is tested in test_ray.py."""
from __future__ import annotations

import pytest

pytest.importorskip("ray")

from engines.ray import market_nodes, spread  # noqa: E402


def node(node_id: str, ip: str, market: str, cpus: float, alive: bool = True) -> dict:
    """A node as `ray.nodes()` lists it (the fields the engine reads)."""
    return {"NodeID": node_id, "NodeManagerAddress": ip, "Alive": alive,
            "Labels": {"market": market}, "Resources": {"CPU": cpus}}


NODES = [node("head", "10.0.0.1", "", 0), node("od1", "10.0.0.2", "on-demand", 2),
         node("od2", "10.0.0.3", "on-demand", 4), node("od3", "10.0.0.4", "on-demand", 8,
                                                       alive=False),
         node("od4", "10.0.0.5", "on-demand", 8), node("spot1", "10.0.0.6", "spot", 2)]


def test_a_market_is_its_live_undrained_labelled_nodes():
    assert [n["NodeID"] for n in market_nodes(NODES, "on-demand", "market", {"od4"})] == \
        ["od1", "od2"]
    assert [n["NodeID"] for n in market_nodes(NODES, "spot", "market", set())] == ["spot1"]
    assert market_nodes(NODES, "nowhere", "market", set()) == []
    # a local Ray the engine started: its one node is every market
    assert len(market_nodes(NODES, "nowhere", None, set())) == 5


def test_masters_spread_over_the_nodes_with_room_and_take_their_addresses():
    ondemand = market_nodes(NODES, "on-demand", "market", {"od4"})
    chosen = spread(ondemand, 3, 1.0, {})
    # od2 has the most room: it takes the first, od1 the second (apart), od2 the third
    assert [n["NodeManagerAddress"] for n in chosen] == ["10.0.0.3", "10.0.0.2", "10.0.0.3"]
    # what runs there already counts: od2 has one CPU left, od1 two
    assert [n["NodeID"] for n in spread(ondemand, 3, 1.0, {"od2": 3.0})] == \
        ["od1", "od2", "od1"]
    # apart only where there is room: od1 full, every one on od2
    assert [n["NodeID"] for n in spread(ondemand, 2, 1.0, {"od1": 2.0})] == ["od2", "od2"]


def test_no_room_is_refused_with_nothing_placed():
    ondemand = market_nodes(NODES, "on-demand", "market", {"od4"})
    with pytest.raises(LookupError, match="no live node has 1 CPU free"):
        spread(ondemand, 7, 1.0, {})
    with pytest.raises(LookupError):
        spread(market_nodes(NODES, "nowhere", "market", set()), 1, 1.0, {})
    assert spread(ondemand, 0, 1.0, {}) == []
