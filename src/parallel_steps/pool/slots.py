"""What a pool knows of each of its workers, and the rules both pools apply to it.

A `Slot` is one worker as its pool's books have it: where it is in its life, the
mini-batches it holds in run order, which one it runs and that one's deadline, and, once
the pool gives it up, why and when it is to be killed. The rules live here once: a
deadline counts from the real start; a negative hang timeout means the run() timeout
again; a hung worker gets `DUMP_GRACE_S` to write its stacks; a loss is blamed on the
mini-batch it ran, never on those queued behind it (the driver gives those to others);
and the texts of losses. On Ray one call carries several mini-batches (they share its ref):
which of them runs is known when the call carries one, or when the worker says so
(`told_running`); until then the call as a whole has a deadline, and a loss is blamed on
none of them (`unattributed`). Pure: no processes, no Ray, time is passed in. The pools
(local/pool.py, ray/pool.py) start, kill and listen; this module only decides, in the manner of
Ray Data's `_ActorPool`, whose bookkeeping is apart from the operator that runs actors.
"""

from __future__ import annotations

import enum
import math
import signal
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..protocol import LossReason
from ..store.logs import mini_batch_tag, timed_out_detail

#: The time a hung worker gets to write its stacks once its dump is due, before the SIGKILL. A stack
#: dump (faulthandler) takes milliseconds; a second leaves room for a loaded machine.
DUMP_GRACE_S = 1.0
#: How long past the earliest deadline of its mini-batches in flight a worker that keeps their run() timeouts
#: itself (`async def run`) is let be: it cancels them there; still there after this, its event loop is blocked.
BACKSTOP_S = 5.0
#: How often a busy worker's memory is sampled against worker_memory_limit (and for the OOM hint).
MEMORY_CHECK_S = 1.0
_IDLE_WAKEUP_S = 3600.0


class WorkerState(enum.Enum):
    """Where a worker is in its life, as its pool sees it."""

    STARTING = "starting"  # started, init() not done
    READY = "ready"  # takes mini-batches
    STOPPING = "stopping"  # init() failed, asked to stop, or given up on: its results are no longer taken
    GONE = "gone"


class Due(enum.Enum):
    """What a pool must do to a worker now."""

    TIME_OUT = "time_out"  # the mini-batch it runs passed its deadline: dump its stacks (`Slot.time_out`)
    KILL = "kill"  # the grace for its stacks is over


@dataclass(frozen=True, slots=True)
class Held:
    """A mini-batch a worker was given: its attempt, its run() timeout, and the ref of the call that carries it
    (Ray: one call carries several)."""

    index: int
    attempt: int
    timeout: float | None
    ref: Any = None


@dataclass
class Slot:
    """One worker's books. Only its pool's loop touches them."""

    state: WorkerState = WorkerState.STARTING
    held: dict[int, Held] = field(default_factory=dict)  # by mini-batch index, in run order
    running: int | None = None  # the one it runs, as far as the pool knows
    deadline: float | None = None  # of the one it runs, or of its call (None: no limit)
    kill_at: float | None = None
    loss: LossReason | None = None  # set when the pool gives the worker up
    loss_detail: str = ""
    call: Any = None  # Ray: the ref of the call it runs, as far as the pool knows
    _since: float | None = None  # when `running` started, or the call (`start_call`)
    _keeps: tuple[int | None, float, float] | None = None  # what `in_flight` saw last, when the worker keeps limits

    def hold(self, index: int, attempt: int, timeout: float | None, ref: Any = None) -> None:
        """The worker is given a mini-batch; it runs after those it holds."""
        self.held[index] = Held(index, attempt, timeout, ref)

    def holds(self, index: int, attempt: int) -> bool:
        """Whether that attempt is still held (False once it ended or the worker was given up)."""
        held = self.held.get(index)
        return held is not None and held.attempt == attempt

    def head(self) -> Held | None:
        """The first mini-batch it holds: the one it runs, or the next to run."""
        return next(iter(self.held.values()), None)

    @property
    def busy(self) -> bool:
        """Ready and holding work: what deadlines and memory limits apply to."""
        return self.state is WorkerState.READY and bool(self.held)

    @property
    def taking_results(self) -> bool:
        return self.state is WorkerState.READY

    def start(self, index: int | None, since: float) -> None:
        """The worker started `index` at `since` (None, or one it does not hold: it runs none of
        them). Its deadline counts from that start; the same start seen again changes nothing, so a
        hang timeout given meanwhile stands."""
        if index is not None and index not in self.held:
            index = None
        if (index, since) == (self.running, self._since):
            return
        self.running, self._since = index, since
        timeout = self.held[index].timeout if index is not None else None
        self.deadline = since + timeout if timeout else None

    def in_flight(self, index: int | None, since: float, deadline: float) -> None:
        """A worker that keeps the run() timeouts of its mini-batches in flight itself (`async def run`) runs
        `index` since `since` (None, or one it does not hold: several, or none), and the earliest of their
        deadlines is `deadline` (`math.inf`: none). The pool's deadline is `BACKSTOP_S` later: only a blocked
        event loop lets a mini-batch reach it. A loss is blamed on `index`, when it runs only that one."""
        if index is not None and index not in self.held:
            index = None
        if (index, since, deadline) == self._keeps:
            return
        self._keeps = (index, since, deadline)
        self.running, self._since = index, since
        self.deadline = deadline + BACKSTOP_S if math.isfinite(deadline) else None

    def start_call(self, ref: Any, since: float) -> None:
        """The worker runs the call `ref`, or what is left of it, from `since` as the pool sees it (None: it runs
        none). One mini-batch left in it: that one runs. Several: which one is not known until the worker says
        (`told_running`), unless it said so already; meanwhile the deadline is the sum of their timeouts (none if
        one has none), which no healthy call reaches, each of its runs ending within its own: it is there for a
        run() that keeps the worker from saying (a C extension holding the GIL)."""
        if self.running in self.held:
            return  # the worker said which one runs (`finish` forgets it when it ends)
        left = self.call_held(ref)
        self.call = ref if left else None
        if len(left) == 1:
            self.start(left[0].index, since)
            return
        limit = budget([held.timeout for held in left])
        self.running, self._since = None, since
        self.deadline = since + limit if limit is not None else None

    def told_running(self, index: int, attempt: int, since: float) -> bool:
        """The worker says it runs that attempt, started at `since`: the ones before it in its call ended, its
        deadline counts from `since`, a loss is blamed on it. Said again, nothing changes (a hang timeout given
        meanwhile stands). False when it does not hold that attempt (it ended: the message is stale)."""
        if not self.holds(index, attempt):
            return False
        if index != self.running:
            self.start(index, since)
            self.call = self.held[index].ref
        return True

    def died_in(self, ref: Any) -> None:
        """The worker died running the call `ref` (None: between calls), as it says: the calls before it ended,
        whatever came of their results. A loss is blamed on the one it said runs in that call, or on the call's
        only mini-batch left, else on none."""
        said = self.running is not None and self.running in self.held and self.held[self.running].ref == ref
        if not said:
            left = self.call_held(ref)
            self.running = left[0].index if len(left) == 1 else None
        self.call = ref

    def call_held(self, ref: Any) -> list[Held]:
        """What it holds of the call `ref`, in run order (none for None)."""
        return [] if ref is None else [held for held in self.held.values() if held.ref == ref]

    def calls_up_to(self, ref: Any) -> list[Any]:
        """The calls it holds mini-batches of, in run order, up to `ref`'s (none when it holds none of `ref`)."""
        calls = list(dict.fromkeys(held.ref for held in self.held.values()))
        return calls[: calls.index(ref) + 1] if ref in calls else []

    def finish_call(self, ref: Any, results: Iterable[tuple[int, Any]]) -> list[tuple[Held, Any]]:
        """The (index, outcome) results of the call `ref`: those it still holds of that call end and are
        returned; the others were told before (or belong to a later attempt, in a later call)."""
        mine = [(held, outcome) for index, outcome in results if (held := self.held.get(index)) and held.ref == ref]
        for held, _ in mine:
            self.finish(held.index)
        return mine

    def finish(self, index: int) -> Held | None:
        """Its result came: the mini-batch is no longer held. None when it was not (its result is stale)."""
        held = self.held.pop(index, None)
        if held is not None and index == self.running:
            self.running, self.deadline = None, None
        return held

    def set_hang_timeout(self, seconds: float | None, now: float) -> float | None:
        """The entry script gave the mini-batch it runs `seconds` from now (None: no limit; negative:
        its run() timeout again, from now). Returns the limit in force."""
        if self.running is None:
            raise RuntimeError("a hang timeout for a worker that runs nothing")
        if seconds is not None and seconds < 0:
            seconds = self.held[self.running].timeout
        self.deadline = now + seconds if seconds else None
        return seconds

    def due(self, now: float) -> Due | None:
        """What the pool must do now; `Due.KILL` is said once."""
        if self.kill_at is not None and now >= self.kill_at:
            self.kill_at = None
            return Due.KILL
        if self.state is WorkerState.READY and self.deadline is not None and now >= self.deadline:
            return Due.TIME_OUT
        return None

    def time_out(self, now: float, dump_delay: float = 0.0) -> str:
        """The mini-batch it runs passed its deadline, or the call it runs the sum of their timeouts: the worker
        is given up as timed out and is to be killed `DUMP_GRACE_S` after its stack dump is due (`dump_delay`
        from now). Returns the loss text."""
        if self._keeps is not None:
            detail = loop_blocked_detail(self.running)
        elif self.running is not None:
            held = self.held[self.running]
            detail = timed_out_detail(held.timeout or 0.0, held.index)
        elif self.deadline is not None and self._since is not None:
            detail = call_timed_out_detail(self.deadline - self._since, len(self.call_held(self.call)))
        else:
            raise RuntimeError("a time-out for a worker that runs nothing")
        self.give_up(LossReason.TIMED_OUT, detail)
        self.kill_at = now + dump_delay + DUMP_GRACE_S
        return self.loss_detail

    def over_memory(self, rss: int, limit: int) -> None:
        """It used `rss` bytes, above `limit`: given up as out of memory (the pool kills it at once)."""
        self.give_up(LossReason.OUT_OF_MEMORY, out_of_memory_detail(rss, limit))

    def give_up(self, reason: LossReason, detail: str) -> None:
        """The pool ends the worker for `reason`: its results are no longer taken."""
        self.state, self.deadline = WorkerState.STOPPING, None
        self.loss, self.loss_detail = reason, detail

    def blame(self) -> int | None:
        """The mini-batch a loss of the worker is blamed on: the one it ran (None when it ran none).
        Those it held behind it are not reported; the driver gives them to other workers unstarted."""
        return self.running if self.running in self.held else None

    def unattributed(self) -> list[int]:
        """When a loss is blamed on none (`blame` is None) while the worker ran a call of several: the
        mini-batches of that call it still held, any of which may have caused it."""
        return [] if self.blame() is not None else [held.index for held in self.call_held(self.call)]

    def wakeups(self) -> tuple[float | None, float | None]:
        """When this worker next needs a look: its deadline, its kill."""
        return self.deadline, self.kill_at


def budget(timeouts: list[float | None]) -> float | None:
    """The time mini-batches with these run() timeouts may take one after the other (None: no bound)."""
    return sum(t for t in timeouts if t) if timeouts and all(timeouts) else None


def next_wakeup(now: float, times: Iterable[float | None]) -> float:
    """The earliest of `times` (deadlines, kill times, checks), or a distant one when none is set."""
    return min((t for t in times if t is not None), default=now + _IDLE_WAKEUP_S)


# The texts of losses, the same on every pool -------------------------------------------------


def loop_blocked_detail(mini_batch: int | None) -> str:
    tag = f" {mini_batch_tag(mini_batch)}" if mini_batch is not None else ""
    return (
        f"async run(){tag} passed its run() timeout and was not cancelled within {BACKSTOP_S:g} s: the worker's "
        "event loop is blocked (a call that does not await?)"
    )


def call_timed_out_detail(budget: float, count: int) -> str:
    return f"{count} mini-batches of one call exceeded the sum of their run() timeouts ({budget:g} s)"


def unattributed_detail(count: int) -> str:
    """What a loss says when it is blamed on none of the `count` mini-batches the worker ran (those of a Ray
    call, or those an async worker had in flight)."""
    return f"; which of the {count} mini-batches it ran caused it is not known: each runs again alone"


def out_of_memory_detail(rss: int, limit: int) -> str:
    return f"OutOfMemory: worker used {rss / 2**20:.0f} MB, above worker_memory_limit {limit / 2**20:.0f} MB"


def shutdown_cut_off_detail(timeout: float) -> str:
    return f"shutdown() did not finish within {timeout:g} s; the worker is killed"


def died_in_init_detail(cause: str) -> str:
    """A worker that ended before init() returned: `cause` is its exit code or Ray's reason."""
    return f"worker died during init(): {cause}"


def exit_name(code: int | None) -> str:
    """An exit code as people read it: `exit code 1`, or the signal, e.g. `SIGKILL(-9)`."""
    if code is None:
        return "an unknown exit code"
    if code < 0:
        try:
            return f"{signal.Signals(-code).name}({code})"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"
