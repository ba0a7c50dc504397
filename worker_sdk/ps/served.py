"""Whether a prefetched read was served before the worker's next push, told by the versions the
PS answered (`correct_own_writes` with more than one push in flight).

A read that comes with push m-1 (one Step) misses push m for certain when its answer was taken
before push m was sent (worker_sdk/ps/correct.py). With two pushes in flight many reads are
answered after the next push left, and then the PS may have served them before or after
applying it; left uncorrected, such a step computes on the same parameters as the step before
it and the next one sees two pushes at once, which trains worse than missing one push every step
(docs/benchmarks.md). The versions tell most of them apart. On one PS, for a dense tensor n
that pushes m-2, m-1 and m all carry:

- push m-1's answer says n's version after it, and the read's answer n's version when read;
  equal: no push of n was applied between them (a PS reads a tensor's version with it, under
  its lock, and answers a push with the versions right after it, under the same locks);
- that version is push m-2's plus one: no push of n was applied between m-2 and m-1;
- push m was sent once push m-2 was answered, so the PS applied it after m-2; not before the
  read (the two checks), so after it.

A PS applies a Step's mutations, and serves its reads, each whole to every other Step's (one
lock: ps/store/steps.py), so push m's rows on that PS come after the read's rows too, with any
number of workers and of handler threads. The read then misses push m on that PS when push m
took n there: the PS that served the read's tensor n (the answer says which) is the one push
m was routed to for n. Every PS that served the read (rows or tensors) must be shown so by
one of its tensors; a PS that holds no dense tensor, a push refused or retried, a tensor moved:
not shown, and the read is left as the answered-before-sent rule decides. The first push has no
push m-2: a read answered before any push left stands for it (the versions before any push).
"""
from __future__ import annotations

KEEP = 8  # pushes remembered (a read is decided within two pushes of its own)


class PushOrder:
    """What the pipeline keeps of its last pushes to decide `missed_next`."""

    def __init__(self) -> None:
        self.collected = 0  # the last push whose Steps were all answered (they settle in order)
        self.shown = 0  # reads answered after the next push left, shown served before it
        # push index -> [tensor names it carries, `collected` when it was sent, the PS index
        # each name was routed to, the versions after it (None until answered, or unusable)]
        self._facts: dict[int, list] = {}

    def given(self, index: int, names) -> None:
        self._facts[index] = [frozenset(names), None, None, None]
        self._facts.pop(index - KEEP, None)

    def sent(self, index: int, routed: dict[str, int]) -> None:
        facts = self._facts.get(index)
        if facts is not None:
            facts[1], facts[2] = self.collected, routed

    def answered(self, index: int, outcome) -> None:
        """Push `index`'s last Step was answered (`outcome`: its StepOutcome, or None)."""
        self.collected = max(self.collected, index)
        facts = self._facts.get(index)
        push = getattr(outcome, "push", None)
        if facts is not None and push is not None and not push.duplicate \
                and not outcome.duplicate:
            facts[3] = push.versions

    def missed_next(self, after: int, sent: int, carried_by, outcome) -> bool:
        """Whether a read answered in `outcome` once `sent` pushes had left, which came in one
        Step with `carried_by` (a PushJob, or None) after `after` pushes were given, certainly
        misses push after + 1 on every PS that served it. (A read answered before the first
        push left stands for push 0: the versions before any push.)"""
        if after == 0 and sent == 0 and outcome.versions:
            self._facts[0] = [frozenset(), 0, {}, dict(outcome.versions)]
        if carried_by is None or carried_by.index != after or sent != after + 1:
            return False
        before, carried, nxt = (self._facts.get(after - 1), self._facts.get(after),
                                self._facts.get(after + 1))
        push = outcome.push
        if before is None or carried is None or nxt is None or push is None \
                or push.duplicate or outcome.duplicate or before[3] is None \
                or nxt[1] is None or nxt[1] < after - 1:
            return False
        after_before, after_carried, read = before[3], push.versions, outcome.versions
        shown = set()
        for name, version in read.items():
            ps = outcome.pulled_from.get(name)
            if name in nxt[0] and ps is not None and nxt[2].get(name) == ps \
                    and after_carried.get(name) == version \
                    and after_before.get(name) == version - 1:
                shown.add(ps)
            elif name in nxt[0]:
                return False  # a tensor the next push carries shows it (maybe) read after
        if not shown or not outcome.served <= shown:
            return False
        self.shown += 1
        return True
