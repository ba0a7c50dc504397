"""The demo's high-availability steps: SIGKILL the master leader (a standby takes over) and a PS
primary whose backup is in sync (the backup is promoted), and what each kill cost.

Each kill is a `Kill`: who died, when (Unix ms, taken just before the SIGKILL), who serves
after it, when the master recorded the takeover (`master_started` / `ps_promoted` event) and
when training flowed again:

- master leader: the first shard handed out after the kill, read from the durable lease
  history (`leases.handed_ms`) once the run is over, so it is exact and not a poll's guess;
- PS primary: the first push answered by the promoted backup. A PS keeps no history, so a
  `PushWatch` thread polls GetPSStatus of the index's in-sync backups every `POLL_S` from the
  kill on: the first answer with role `primary` and more pushes answered (applied pushes and
  rows, plus retried pushes answered as duplicates) than it had as a backup. Accurate to a
  poll.

Whether a PS kill is possible is read from the master's listing, never from a message: an
index whose `PSInfo.backups` has one in state `in_sync` (ListPS; the fields of PS replicas,
`--ps-replicas`). Without one the step is skipped and the summary says why.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, fields

import grpc

from protos import master_pb2 as pb

POLL_S = 0.05
IN_SYNC = "in_sync"


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Kill:
    role: str                # "master" (the leader) or "ps" (a primary)
    victim: str              # its address (gRPC)
    at_ms: int               # Unix ms just before the SIGKILL
    index: int = -1          # the PS index (ps)
    generation: int = 0      # the index's generation before the kill (ps)
    successor: str = ""      # who serves after it: the new leader, the promoted backup
    takeover_ms: int = 0     # the master_started / ps_promoted event after the kill (0: none)
    flowing_ms: int = 0      # first shard handed out / first push answered after it (0: none)
    # the killed primary started again (ps): how it reports itself once back; it must be a
    # backup of the next generation, never a second primary
    rejoined_role: str = ""
    rejoined_generation: int = 0
    watch: "PushWatch | None" = field(default=None, repr=False, compare=False)
    rejoined: object = field(default=None, repr=False, compare=False)  # its PSProc

    def after(self, ms: int) -> float | None:
        return round((ms - self.at_ms) / 1000, 3) if ms else None

    @property
    def takeover_s(self) -> float | None:
        return self.after(self.takeover_ms)

    @property
    def flowing_s(self) -> float | None:
        return self.after(self.flowing_ms)

    def to_json(self) -> dict:
        return {**{f.name: getattr(self, f.name) for f in fields(self)
                   if f.name not in ("watch", "rejoined")},
                "takeover_s": self.takeover_s, "flowing_s": self.flowing_s}


# ---- decisions (pure) ---------------------------------------------------------------------

def promotable(listing: pb.ListPSResponse) -> pb.PSInfo | None:
    """The first live PS index with a backup in sync (its primary may be killed: an in-sync
    backup holds every answered push), or None."""
    for info in sorted(listing.ps, key=lambda i: i.index):
        if info.state == "alive" and any(b.state == IN_SYNC for b in info.backups):
            return info
    return None


def generations(listing: pb.ListPSResponse) -> dict[int, int]:
    return {info.index: info.generation for info in listing.ps}


def answered(status) -> int:
    """Mutations a PS answered: pushes applied (dense and rows) and retries answered as
    duplicates. It only grows."""
    return status.pushes + sum(t.pushes for t in status.tables) + status.duplicates


def held(status) -> tuple:
    """What a PS holds, in counts an in-sync backup matches once pushes stop: every dense
    tensor's version (pushes applied to it) and every table's row pushes. Not the tables'
    row counts: a pull creates the rows it asks for (deterministically, from the table's seed
    and the id) and pulls are not replicated, so a primary that served pulls (an evaluation)
    lists rows its backup would create the same way when asked."""
    return (sorted((t.meta.name, t.version) for t in status.tensors),
            sorted((t.spec.name, t.pushes) for t in status.tables))


def first_handout_after(leases: list[dict], at_ms: int) -> int:
    """Unix ms of the first lease handed out at or after `at_ms` (0: none)."""
    return min((row["handed_ms"] for row in leases if row["handed_ms"] >= at_ms), default=0)


def first_event_after(events: list[pb.Event], kind: str, at_ms: int) -> pb.Event | None:
    return next((e for e in events if e.kind == kind and e.time_ms >= at_ms), None)


# ---- doing --------------------------------------------------------------------------------

def kill_leader(cluster) -> Kill | None:
    """SIGKILL the master that leads now, when a standby is alive to take over."""
    leader = cluster.leader()
    if leader is None or not any(m.alive and m is not leader for m in cluster.masters):
        return None
    kill = Kill("master", leader.address, now_ms())
    leader.kill()
    return kill


class PushWatch(threading.Thread):
    """Polls the killed index's in-sync backups until one answers pushes as the primary."""

    def __init__(self, cluster, kill: Kill, backups: list, timeout: float = 120.0):
        super().__init__(name="push-watch", daemon=True)
        self.cluster, self.kill, self.backups, self.timeout = cluster, kill, backups, timeout
        self._halt = threading.Event()

    def run(self) -> None:
        base: dict[str, int] = {}  # answered as a backup, newest poll
        deadline = time.monotonic() + self.timeout
        while not self._halt.is_set() and time.monotonic() < deadline:
            for proc in self.backups:
                try:
                    status = self.cluster.ps_status(proc)
                except grpc.RpcError:
                    continue
                count = answered(status)
                if status.role != "primary":
                    # the stream stopped at the kill: what it applied since was not answered
                    # to a client by the dead primary, so it is not "training flowing again"
                    base[proc.data_address] = count
                elif count > base.get(proc.data_address, count):
                    self.kill.flowing_ms = now_ms()
                    self.kill.successor = proc.grpc_address
                    return
                else:
                    base.setdefault(proc.data_address, count)
            self._halt.wait(POLL_S)

    def stop(self) -> None:
        self._halt.set()


def kill_ps_primary(cluster, info: pb.PSInfo) -> Kill | None:
    """SIGKILL the primary of index `info` (from `promotable`: it has a backup in sync);
    returns the kill, with a running PushWatch in `kill.watch`, or None when the listed
    processes are not this cluster's."""
    primary = cluster.ps_proc(info.data_address)
    backups = [p for b in info.backups if b.state == IN_SYNC
               for p in [cluster.ps_proc(b.data_address)] if p is not None]
    if primary is None or not backups:
        return None
    kill = Kill("ps", primary.grpc_address, now_ms(), index=info.index,
                generation=info.generation)
    primary.kill()
    kill.watch = PushWatch(cluster, kill, backups)  # stopped by `settle`
    kill.watch.start()
    return kill


def rejoin(cluster, kill: Kill) -> bool:
    """Start the killed primary of `kill` again, with its flags and checkpoint directory,
    without waiting for it (`await_rejoin` does): its index has a primary of a newer
    generation, so it must join as a backup (fenced from clients) and copy the new primary."""
    proc = next((p for p in cluster.ps + cluster.backups
                 if p.match and not p.alive and p.grpc_address == kill.victim), None)
    if proc is None:
        return False
    proc.leave_num_ps_out()  # the PS set may have been resized since it first started
    ready, proc.ready = proc.ready, None  # the demo's loop goes on while it starts
    proc.start()
    proc.ready, proc.match = ready, None  # its new data address: read by `await_rejoin`
    kill.rejoined = proc
    return True


def await_rejoin(cluster, kill: Kill, timeout: float = 60.0) -> None:
    """Once training is over: wait until the restarted old primary is listed as an in-sync
    backup of its index (it copies the new primary's state), then record the role and
    generation it reports. Leaves them empty when that does not happen within `timeout`."""
    proc = kill.rejoined
    if proc is None:
        return
    deadline = time.monotonic() + timeout
    proc.match = proc.wait_for(proc.ready, timeout)

    def listed_in_sync() -> bool:
        info = next((i for i in cluster.ps_list().ps if i.index == kill.index), None)
        return info is not None and any(b.data_address == proc.data_address
                                        and b.state == IN_SYNC for b in info.backups)

    while time.monotonic() < deadline:
        try:
            if listed_in_sync():
                status = cluster.ps_status(proc)
                kill.rejoined_role, kill.rejoined_generation = status.role, status.generation
                return
        except grpc.RpcError:
            pass  # starting, or a master taking over: ask again
        time.sleep(0.2)


def backups_agree(cluster, listing: pb.ListPSResponse) -> tuple[int, list[str]]:
    """Once training is over: does every in-sync backup hold what its primary holds? Returns
    how many backups were compared and what differed ([] when nothing did)."""
    compared, problems = 0, []
    for info in listing.ps:
        primary = cluster.ps_proc(info.data_address)
        for backup in info.backups:
            proc = cluster.ps_proc(backup.data_address)
            if backup.state != IN_SYNC or primary is None or proc is None:
                continue
            try:
                want, got = held(cluster.ps_status(primary)), held(cluster.ps_status(proc))
            except grpc.RpcError as exc:
                problems.append(f"PS {info.index}: GetPSStatus failed ({exc.code().name})")
                continue
            compared += 1
            if got != want:
                problems.append(f"PS {info.index}: backup {backup.address} holds {got}, its "
                                f"primary {want}")
    return compared, problems


def settle(kills: list[Kill], events: list[pb.Event], leases: list[dict],
           listing: pb.ListPSResponse | None, leader: str) -> None:
    """Fill in what the run's records say about each kill (after training ended); `leader`
    is the address of the master that leads at the end."""
    for kill in kills:
        if kill.watch is not None:
            kill.watch.stop()
            kill.watch.join(5)
        if kill.role == "master":
            event = first_event_after(events, "master_started", kill.at_ms)
            kill.flowing_ms = first_handout_after(leases, kill.at_ms)
            kill.successor = leader
        else:
            event = first_event_after(events, "ps_promoted", kill.at_ms)
            if not kill.successor and listing is not None:
                kill.successor = next((i.address for i in listing.ps if i.index == kill.index),
                                      "")
        kill.takeover_ms = event.time_ms if event else 0
