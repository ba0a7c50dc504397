"""The Ray engine on a real local multi-node Ray (`ray.cluster_utils.Cluster`): a head with no
CPUs, an on-demand node and a spot node, every Ray process on 127.0.0.1. Processes land on
their market's node; a market with no room refuses; a spot node drained for preemption gives
its processes SIGTERM and `preempted` events; a node removed without a drain gives `lost`;
nothing is left running afterwards. Few tests on one cluster: a 2-core machine holds a head
and two nodes."""
from __future__ import annotations

import contextlib
import os
import sys
import time

import pytest

# before ray is imported: every Ray process binds the loopback address
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")
psutil = pytest.importorskip("psutil")

from engines import process  # noqa: E402
from engines.port import EventKind, LaunchFailed, Refusal  # noqa: E402

pytestmark = pytest.mark.slow

# exits 0 on SIGTERM, as a worker handing its leases back does
POLITE = [sys.executable, "-c",
          "import os, signal, sys, time\n"
          "signal.signal(signal.SIGTERM, lambda *a: (print('sigterm', flush=True), sys.exit(0)))\n"
          "print('ready', os.getpid(), flush=True)\n"
          "time.sleep(120)"]
CPUS = 2  # logical CPUs per node: two processes each
# the GCS sees a node that died without a word within seconds, not the default minute
HEALTH_CHECK = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 1000,
                "health_check_failure_threshold": 3}


@contextlib.contextmanager
def ray_cluster(cpus: dict[str, int]):
    """Head (0 CPUs) and a node per market with `cpus[market]` logical CPUs, every Ray process
    on 127.0.0.1; shut down at the end, and then not one process it started (Ray's, or a
    command the engine launched on it) may still run."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    c = cluster_utils.Cluster(initialize_head=True,
                              head_node_args={"num_cpus": 0, "include_dashboard": False,
                                              "_system_config": HEALTH_CHECK})
    c.nodes_by_market = {m: c.add_node(num_cpus=n, labels={"market": m})
                         for m, n in cpus.items()}
    c.wait_for_nodes()
    c.connect(namespace="elastic-ps-test")
    c.commands = []  # pids of the commands the tests started
    try:
        assert {n["NodeManagerAddress"] for n in ray.nodes()} == {"127.0.0.1"}
        assert c.address.startswith("127.0.0.1:")
        yield c
    finally:
        ray.shutdown()
        c.shutdown()
        left = _wait_gone(before, c.commands, c.address)
        assert not left, f"still running after the cluster's shutdown: {left}"


@pytest.fixture(scope="module")
def cluster():
    with ray_cluster({"on-demand": CPUS, "spot": CPUS}) as c:
        yield c


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _launched_on(address: str) -> list[psutil.Process]:
    """Every process the engine launched on the cluster at `address` (it is given
    RAY_ADDRESS), wherever it was reparented to."""
    out = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("RAY_ADDRESS") == address and _alive(p.pid):
                out.append(p)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return out


def _wait_gone(before: set[int], pids: list[int], address: str = "",
               timeout: float = 60.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        left = [f"{p.pid} {' '.join(p.cmdline())[:80]}"
                for p in psutil.Process().children(recursive=True)
                if p.pid not in before and _alive(p.pid)]
        left += [f"command {pid}" for pid in pids if _alive(pid)]
        if address:
            left += [f"launched {p.pid} {' '.join(p.cmdline())[:80]}"
                     for p in _launched_on(address) if p.pid not in before]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


@pytest.fixture
def engine(cluster, tmp_path):
    from engines.ray import RayEngine
    eng = RayEngine(tmp_path / "job", stop_grace_s=10, preempt_grace_s=10)
    try:
        yield eng
    finally:
        eng.stop_all(graceful=False, timeout=30)
        eng.close()


def _ready(engine, handle, cluster, timeout: float = 120.0) -> int:
    """The command's pid once it printed its ready line (bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        engine.poll()
        text = open(handle.log).read() if os.path.exists(handle.log) else ""
        for line in text.splitlines():
            if line.startswith("ready "):
                pid = int(line.split()[1])
                cluster.commands.append(pid)
                return pid
        time.sleep(0.2)
    raise AssertionError(f"{handle.name} printed no ready line: {text!r}")


def _until(cond, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.2)
    return cond()


def _events(engine, kinds, n: int, timeout: float = 90.0) -> list:
    seen = []
    deadline = time.monotonic() + timeout
    while len(seen) < n and time.monotonic() < deadline:
        seen += [e for e in engine.poll() if e.kind in kinds]
        time.sleep(0.2)
    return seen


def test_every_ray_process_is_on_loopback_and_launches_land_on_their_market(cluster, engine):
    assert len(ray.nodes()) == 3
    assert {n["NodeManagerAddress"] for n in ray.nodes()} == {"127.0.0.1"}
    assert engine.address == cluster.address

    handles = [engine.launch("worker", f"w-{m}-{i}", m, POLITE, process.clean_env())
               for m in ("spot", "on-demand") for i in range(CPUS)]
    for h in handles:
        _ready(engine, h, cluster)
        expected = cluster.nodes_by_market[h.market].node_id
        assert _until(lambda: engine.poll() is not None and engine.node_of(h), timeout=30)
        assert engine.node_of(h) == expected, h.name
    # both nodes are full now: neither market admits, a launch is refused with the reason
    assert not engine.admits("spot") and not engine.admits("on-demand")
    with pytest.raises(LaunchFailed) as refused:
        engine.launch("worker", "w-spot-9", "spot", POLITE, process.clean_env())
    assert refused.value.reason == Refusal.NO_CAPACITY
    assert not engine.admits("nowhere")

    # a graceful stop is a SIGTERM: the command exits 0, its actor is gone, its CPU free again
    engine.stop(handles[0])
    ended = _events(engine, (EventKind.EXITED, EventKind.LOST), 1)
    assert [(e.kind, e.handle.name, e.code) for e in ended] == \
        [(EventKind.EXITED, handles[0].name, 0)]
    assert "sigterm" in open(handles[0].log).read()
    assert _until(lambda: engine.admits("spot"))
    # a name is the job's: a second engine on the same folder finds and adopts the rest
    from engines.ray import RayEngine
    other = RayEngine(engine.workdir)
    found = other.find("worker", handles[1].name, "spot")
    assert found is not None and found.id == handles[1].id
    assert other.adopt(handles[1]) and other.find("worker", handles[0].name, "spot") is None


def test_a_ps_gets_its_nodes_address_as_ray_lists_it(cluster, engine):
    from engines.ray_runner import NODE_IP, with_node_ip

    # the master gives a placeholder: the address is filled in where the command runs
    assert engine.ps_host_flags == ["--host", NODE_IP, "--advertise-host", NODE_IP]
    assert with_node_ip(["--host", NODE_IP], {"A": "1"}, "10.1.2.3") == \
        (["--host", "10.1.2.3"], {"A": "1", "RAY_NODE_IP": "10.1.2.3"})
    show = [sys.executable, "-c",
            "import os, sys, time\n"
            "print('host', sys.argv[1:], os.environ['RAY_NODE_IP'], flush=True)\n"
            "print('ready', os.getpid(), flush=True)\n"
            "time.sleep(120)", *engine.ps_host_flags]
    handle = engine.launch("ps", "ps-address", "on-demand", show, process.clean_env())
    _ready(engine, handle, cluster)
    assert _until(lambda: engine.poll() is not None and engine.node_of(handle), timeout=30)
    listed = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
    address = listed[engine.node_of(handle)]
    assert engine.node_of(handle) == cluster.nodes_by_market["on-demand"].node_id
    line = next(x for x in open(handle.log).read().splitlines() if x.startswith("host "))
    assert line == f"host {['--host', address, '--advertise-host', address]!r} {address}"
    engine.stop(handle, graceful=False)
    assert _events(engine, (EventKind.EXITED, EventKind.LOST), 1)


# binds the address it is given (as a master's --host/--port) and says so
LISTEN = [sys.executable, "-c",
          "import os, socket, sys, time\n"
          "s = socket.socket(); s.bind((sys.argv[1], int(sys.argv[2]))); s.listen()\n"
          "print('listening', *s.getsockname(), flush=True)\n"
          "print('ready', os.getpid(), flush=True)\n"
          "time.sleep(120)"]


def test_the_masters_listen_on_the_node_ray_places_them_on(cluster, engine):
    listed = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
    spot = cluster.nodes_by_market["spot"].node_id
    # the spot node holds two: a third is refused, and nothing is reserved by the refusal
    with pytest.raises(LaunchFailed) as full:
        engine.reserve(["m0", "m1", "m2"], "spot")
    assert full.value.reason == Refusal.NO_CAPACITY
    places = engine.reserve(["master", "master-standby1"], "spot")
    assert [host for host, _ in places] == [listed[spot]] * 2
    assert len({port for _, port in places}) == 2
    # the reservation, not the label, decides where it runs: launched as on-demand, the
    # master still runs on the spot node its address is on
    handles = [engine.launch("master", name, "on-demand", [*LISTEN, host, str(port)],
                             process.clean_env())
               for name, (host, port) in zip(["master", "master-standby1"], places)]
    for h, (host, port) in zip(handles, places):
        _ready(engine, h, cluster)
        assert _until(lambda: engine.poll() is not None and engine.node_of(h), timeout=30)
        assert engine.node_of(h) == spot
        assert listed[engine.node_of(h)] == host
        assert f"listening {host} {port}" in open(h.log).read().splitlines()
    # a fixed port is the first's as given; the next one's is picked free on its node
    first = places[0][1]
    fixed = engine.reserve(["other", "other-standby1"], "on-demand", port=first + 1)
    ondemand = listed[cluster.nodes_by_market["on-demand"].node_id]
    assert fixed[0] == (ondemand, first + 1)
    assert fixed[1][0] == ondemand and fixed[1][1] not in (0, first + 1)
    for h in handles:
        engine.stop(h, graceful=False)
    assert len(_events(engine, (EventKind.EXITED, EventKind.LOST), 2)) == 2


def test_drained_spot_node_notices_its_processes_and_a_lost_node_loses_them(cluster, engine):
    from ray.core.generated import autoscaler_pb2

    # what the last test ran is gone once both markets have room again
    assert _until(lambda: ray.available_resources().get("CPU") == 2 * CPUS)
    spot = [engine.launch("worker", f"s{i}", "spot", POLITE, process.clean_env())
            for i in range(2)]
    ondemand = engine.launch("worker", "o0", "on-demand", POLITE, process.clean_env())
    pids = {h.name: _ready(engine, h, cluster) for h in [*spot, ondemand]}

    node = cluster.nodes_by_market["spot"]
    deadline_ms = int(time.time() * 1000) + 60_000
    gcs = ray._raylet.GcsClient(address=cluster.gcs_address)
    accepted, why = gcs.drain_node(
        node.node_id, autoscaler_pb2.DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION"),
        "spot reclaimed", deadline_ms)
    assert accepted, why
    assert not engine.admits("spot")  # a draining node takes no launch

    notices = _events(engine, (EventKind.PREEMPTED,), 2)
    assert sorted(e.handle.name for e in notices) == ["s0", "s1"]
    assert {e.deadline_ms for e in notices} == {deadline_ms}
    # the notice is a SIGTERM: each hands back and exits 0, reported as an exit, not a loss
    ended = _events(engine, (EventKind.EXITED, EventKind.LOST), 2)
    assert sorted((e.kind, e.handle.name, e.code) for e in ended) == \
        [(EventKind.EXITED, "s0", 0), (EventKind.EXITED, "s1", 0)]
    for h in spot:
        assert "sigterm" in open(h.log).read()
        assert _until(lambda: not _alive(pids[h.name]), timeout=30)
    cluster.remove_node(node)

    # the on-demand node dies without a word: its process is lost, and dies with its actor
    cluster.remove_node(cluster.nodes_by_market["on-demand"], allow_graceful=False)
    lost = _events(engine, (EventKind.EXITED, EventKind.LOST, EventKind.PREEMPTED), 1)
    assert [(e.kind, e.handle.name) for e in lost] == [(EventKind.LOST, "o0")]
    assert not engine.running()
    assert _until(lambda: not engine.admits("on-demand"))  # once the GCS saw it go
    assert _until(lambda: not _alive(pids["o0"]), timeout=30)
