"""The local pool's watchdog: ends workers that overrun, and recognises the kernel's OOM killer.

A run() past its deadline gets its stacks written to the error log, then a SIGKILL
after a short grace; a worker above `worker_memory_limit` is killed at once. The
watchdog only marks the worker (`loss`, `loss_detail`) and kills it: the pool learns
of the death from the worker's sentinel, as of any other, and reports it then. Apart
from the pool's loop so that what is enforced, and when to look again, has one owner.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Collection

import psutil

from ..protocol import LossReason
from ..store.logs import note_hang
from .base import next_wakeup, out_of_memory_detail, timed_out_detail, tree_rss
from .local_process import WorkerProcess

DUMP_GRACE_S = 1.0  # time a hung worker gets to write its stacks before SIGKILL
_MEMORY_CHECK_S = 1.0
_LIKELY_OOM_RSS = 1 << 30
_MARKER_CHECK_S = 0.05  # how soon to look again for the start of a queued mini-batch


class Watchdog:
    """Deadlines and `memory_limit` (bytes; None: none) over a pool's workers."""

    def __init__(self, memory_limit: int | None):
        self.memory_limit = memory_limit
        self._next_memory_check = 0.0

    def next_wakeup(self, handles: Collection[WorkerProcess], now: float) -> float:
        """When to look again: a kill after a grace, the deadline of a running mini-batch, the next memory sample."""
        times: list[float | None] = []
        for handle in handles:
            times.append(handle.kill_at)
            if handle.queue:
                running = handle.running()
                # a queued mini-batch may start any moment: look again soon to learn its deadline
                times += [running[1] if running else now + _MARKER_CHECK_S, self._next_memory_check]
        return next_wakeup(now, times)

    def enforce(self, handles: Collection[WorkerProcess], now: float) -> None:
        """Kill what is due: workers past their grace, past their deadline, above the memory limit."""
        for handle in handles:
            if handle.kill_at is not None and now >= handle.kill_at:
                handle.kill_at = None
                handle.kill()
            elif handle.queue and not handle.loss and (running := handle.running()):
                index, deadline = running
                if deadline is not None and now >= deadline:
                    _dump_and_kill(handle, LossReason.TIMED_OUT, timed_out_detail(handle.queue[index] or 0.0, index))
        if now >= self._next_memory_check:
            self._next_memory_check = now + _MEMORY_CHECK_S
            self._sample_memory(handles)

    def _sample_memory(self, handles: Collection[WorkerProcess]) -> None:
        """Sample busy workers' memory: enforce worker_memory_limit, and remember the last RSS so a
        SIGKILL from the kernel's OOM killer can be recognised."""
        limit = self.memory_limit
        for handle in handles:
            if not handle.queue or handle.loss:
                continue
            rss = handle.last_rss = tree_rss(handle.process.pid)
            if limit and rss > limit:
                handle.loss, handle.loss_detail = LossReason.OUT_OF_MEMORY, out_of_memory_detail(rss, limit)
                handle.kill()


def _dump_and_kill(handle: WorkerProcess, reason: LossReason, detail: str) -> None:
    """Write the worker's Python stacks (faulthandler) to its error log, then kill it after a grace."""
    handle.loss, handle.loss_detail = reason, detail
    note_hang(handle.logs, detail)
    if handle.dump_stacks():
        handle.kill_at = time.monotonic() + DUMP_GRACE_S


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
