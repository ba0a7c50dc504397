from hypothesis import given, settings, strategies as st

from master.datasets.shard_order import ShardOrder


@given(st.integers(min_value=1, max_value=3000), st.integers(min_value=-(2**40), max_value=2**40))
@settings(max_examples=60, deadline=None)
def test_order_is_a_permutation(n, key):
    order = ShardOrder(n, key)
    assert sorted(order.index_at(p) for p in range(n)) == list(range(n))


def test_order_is_deterministic_and_depends_on_key():
    a = [ShardOrder(1000, 7).index_at(p) for p in range(1000)]
    b = [ShardOrder(1000, 7).index_at(p) for p in range(1000)]
    c = [ShardOrder(1000, 8).index_at(p) for p in range(1000)]
    assert a == b
    assert a != c
    assert a != list(range(1000))  # actually shuffled


def test_no_key_is_identity():
    assert [ShardOrder(17, None).index_at(p) for p in range(17)] == list(range(17))


def test_large_order_costs_no_memory_per_shard():
    order = ShardOrder(10**9, 3)
    seen = {order.index_at(p) for p in range(0, 10**9, 10**7)}
    assert len(seen) == 100 and all(0 <= i < 10**9 for i in seen)
