"""The local pool's watchdog: ends workers that overrun, and recognises the kernel's OOM killer.

A run() past its deadline gets its stacks written to the error log, then a SIGKILL
after a short grace (`slots.DUMP_GRACE_S`); a worker above `worker_memory_limit` is
killed at once. The watchdog only gives the worker up in its books (`slots.Slot`) and
kills it: the pool learns of the death from the worker's sentinel, as of any other, and
reports it then. Apart from the pool's loop so that what is enforced, and when to look
again, has one owner; the rules themselves are the slots'.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Collection

import psutil

from ...store.logs import note_hang
from ..base import tree_rss
from ..slots import MEMORY_CHECK_S, Due, next_wakeup
from .process import WorkerProcess

_LIKELY_OOM_RSS = 1 << 30
_MARKER_CHECK_S = 0.05  # how soon to look again for the start of a queued mini-batch


class Watchdog:
    """Deadlines and `memory_limit` (bytes; None: none) over a pool's workers; `rss(pid)` measures one."""

    def __init__(self, memory_limit: int | None, rss: Callable[[int], int] | None = None):
        self.memory_limit = memory_limit
        self._rss = rss or tree_rss
        self._next_memory_check = 0.0

    def next_wakeup(self, handles: Collection[WorkerProcess], now: float) -> float:
        """When to look again: a kill after a grace, the deadline of a running mini-batch, the next memory sample."""
        times: list[float | None] = []
        for handle in handles:
            slot = handle.slot
            deadline, kill_at = slot.wakeups()
            times.append(kill_at)
            if slot.busy:
                # a queued mini-batch may start any moment: look again soon to learn its deadline
                times += [deadline if slot.running is not None else now + _MARKER_CHECK_S, self._next_memory_check]
        return next_wakeup(now, times)

    def enforce(self, handles: Collection[WorkerProcess], now: float) -> None:
        """Kill what is due: workers past their grace, past their deadline, above the memory limit."""
        for handle in handles:
            handle.observe()
            due = handle.slot.due(now)
            if due is Due.KILL:
                handle.kill()
            elif due is Due.TIME_OUT:
                # Its stacks go to the error log under this header; the kill follows after a grace.
                note_hang(handle.logs, handle.slot.time_out(now))
                handle.dump_stacks()
        if now >= self._next_memory_check:
            self._next_memory_check = now + MEMORY_CHECK_S
            self._sample_memory(handles)

    def _sample_memory(self, handles: Collection[WorkerProcess]) -> None:
        """Sample busy workers' memory: enforce worker_memory_limit, and remember the last RSS so a
        SIGKILL from the kernel's OOM killer can be recognised."""
        limit = self.memory_limit
        for handle in handles:
            if not handle.slot.busy:
                continue
            rss = handle.last_rss = self._rss(handle.process.pid)
            if limit and rss > limit:
                handle.slot.over_memory(rss, limit)
                handle.kill()


def oom_hint(handle: WorkerProcess, exit_code: int | None) -> str:
    """A SIGKILL we did not send, from a worker that was using a lot of memory, is likely the OOM killer."""
    if exit_code != -signal.SIGKILL or not handle.last_rss:
        return ""
    share = psutil.virtual_memory().total / max(1, len(psutil.Process().children()))
    if handle.last_rss < min(share / 2, _LIKELY_OOM_RSS):
        return f", not sent by parallel-steps (last RSS {handle.last_rss >> 20} MB)"
    return (
        f": likely out of memory (killed by the kernel's OOM killer?); last RSS {handle.last_rss >> 20} MB "
        f"(see logs/perf/{handle.info.node_id}/)"
    )
