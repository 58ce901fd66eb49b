"""Job-level health: the thresholds, ParallelRunStep's init() policy, and the timeouts that end a job
that makes no progress (every worker stuck in init(), no first task, no completion for a while).

`JobHealth` is told what happens (workers starting, ready, failing init(), mini-batches
handed out and completed) and raises `JobFailed` with the reason when the job must stop.
"""

from __future__ import annotations

import collections
import time

from ..config.sections import DriverPolicy, Thresholds
from ..control import JobFailed
from ..errors import error_line
from ..protocol import WorkerInfo
from ..summary import Counters
from .faults import ErrorGroups

_INIT_FAILURE_GRACE_S = 120.0
_MIN_FINISHED_FOR_RATE = 10


def threshold_breach(limits: Thresholds, counters: Counters) -> str | None:
    """Which threshold these counts exceed, if any (`error_threshold`, `mini_batch_error_threshold`,
    `allowed_failed_count`, `allowed_failed_percent`, `max_tolerated_failure_rate`)."""
    if 0 <= limits.error_threshold < counters.items_failed:
        return f"error_threshold {limits.error_threshold} exceeded: {counters.items_failed} items failed"
    v2_and_v1 = (  # the two names of one threshold
        ("mini_batch_error_threshold", limits.mini_batch_error_threshold),
        ("allowed_failed_count", limits.allowed_failed_count),
    )
    for name, limit in v2_and_v1:
        if limit is not None and 0 <= limit < counters.mini_batches_failed:
            return f"{name} {limit} exceeded: {counters.mini_batches_failed} mini-batches failed"
    total = max(1, counters.mini_batches_total)
    if not counters.planning and 100.0 * counters.mini_batches_failed / total > limits.allowed_failed_percent:
        return (
            f"allowed_failed_percent {limits.allowed_failed_percent:g} exceeded: "
            f"{counters.mini_batches_failed} of {counters.mini_batches_total} mini-batches failed"
        )
    finished = counters.run
    if (
        limits.max_tolerated_failure_rate >= 0
        and finished >= _MIN_FINISHED_FOR_RATE
        and counters.mini_batches_failed / finished > limits.max_tolerated_failure_rate
    ):
        return (
            f"max_tolerated_failure_rate {limits.max_tolerated_failure_rate:g} exceeded: "
            f"{counters.mini_batches_failed} of {finished} finished mini-batches failed"
        )
    return None


class JobHealth:
    """Decides when a job must stop for a reason other than a cancel."""

    def __init__(self, policy: DriverPolicy, counters: Counters, errors: ErrorGroups, node_count: int, per_node: int):
        self.policy, self.counters, self.errors = policy, counters, errors
        self.node_count, self.per_node = node_count, per_node
        self._starting: dict[tuple[int, int], float] = {}  # (node, slot) -> when its worker was started
        self._ready: set[str] = set()
        self._init_failures_by_node: collections.Counter[int] = collections.Counter()
        self._stopped_nodes: set[int] = set()
        self._last_init_error = ""
        self._started = time.monotonic()
        self._first_dispatch: float | None = None
        self._last_completion = time.monotonic()
        self._exempt: dict[str, float] = {}  # worker id -> until when its mini-batch may run without progress

    # What happens ---------------------------------------------------------------------------------

    def workers_starting(self) -> None:
        """The pool starts every slot."""
        for node in range(self.node_count):
            for slot in range(self.per_node):
                self._starting[node, slot] = time.monotonic()
        self.counters.workers_started += len(self._starting)

    def worker_replaced(self, worker: WorkerInfo) -> None:
        self._ready.discard(worker.id)
        self._starting[worker.node_index, worker.slot] = time.monotonic()
        self.counters.workers_started += 1

    def worker_ready(self, worker: WorkerInfo) -> float:
        """Returns the seconds since the worker was started (or replaced): its start-up, init() included."""
        since = self._starting.pop((worker.node_index, worker.slot), time.monotonic())
        self._ready.add(worker.id)
        return time.monotonic() - since

    def worker_lost(self, worker: WorkerInfo) -> None:
        self._starting.pop((worker.node_index, worker.slot), None)
        self._ready.discard(worker.id)
        self._exempt.pop(worker.id, None)

    def init_failed(self, worker: WorkerInfo, error: str) -> bool:
        """ParallelRunStep's init() policy: a node stops starting workers after 3 x process_count_per_node
        failures. Returns whether the worker may be replaced; raises when no worker can start anywhere."""
        self._starting.pop((worker.node_index, worker.slot), None)
        self.counters.init_failures += 1
        self._init_failures_by_node[worker.node_index] += 1
        self._last_init_error = error_line(error)
        self.errors.add(error, None, worker)
        if self._init_failures_by_node[worker.node_index] >= 3 * self.per_node:
            self._stopped_nodes.add(worker.node_index)
        self._check_init_policy()
        return worker.node_index not in self._stopped_nodes

    def init_failures_on(self, node_index: int) -> int:
        return self._init_failures_by_node[node_index]

    def node_stopped(self, node_index: int) -> bool:
        return node_index in self._stopped_nodes

    def dispatched(self) -> None:
        if self._first_dispatch is None:
            self._first_dispatch = time.monotonic()

    def attempt_ended(self, worker: WorkerInfo) -> None:
        """The worker's current run() ended: its extra room (`exempt`) ends with it."""
        self._exempt.pop(worker.id, None)

    def completed(self) -> None:
        """A mini-batch reached its outcome: the job progresses."""
        self._last_completion = time.monotonic()

    def exempt(self, worker: WorkerInfo, seconds: float | None) -> None:
        """The entry script gave its current run() `seconds` (None: no limit): the job-level
        no-progress check gives that mini-batch the same room."""
        self._exempt[worker.id] = float("inf") if seconds is None else time.monotonic() + seconds + 30

    # Checks ---------------------------------------------------------------------------------------

    def check_thresholds(self) -> None:
        reason = threshold_breach(self.policy.thresholds, self.counters)
        if reason:
            raise JobFailed(f"{reason}. {self.errors.first()}".strip())

    def check(self) -> None:
        """The time-based checks; called on every turn of the driver's loop."""
        policy, now = self.policy, time.monotonic()
        if self.counters.init_failures:
            self._check_init_policy()
        if self._starting and not self._ready:
            bound = 3 * policy.run_invocation_timeout + 30
            if now - max(self._starting.values()) > bound:
                raise JobFailed(
                    f"every worker has been in init() for more than {bound:g} s "
                    f"(3 x run_invocation_timeout + 30 s); no progress"
                )
        if self._first_dispatch is None and now - self._started > policy.first_task_creation_timeout:
            raise JobFailed(
                f"no mini-batch was handed to a worker within first_task_creation_timeout "
                f"{policy.first_task_creation_timeout:g} s"
            )
        exempt = any(until > now for until in self._exempt.values())
        if policy.hang_detection and not exempt and now - self._last_completion > policy.progress_timeout:
            raise JobFailed(
                f"no mini-batch completed for {policy.progress_timeout:g} s (progress_update_timeout); "
                f"the job looks hung. Stacks of hung workers are in {self.errors.logs.relative(self.errors.logs.error_dir)}/"
            )

    def _check_init_policy(self) -> None:
        failures = self.counters.init_failures
        if len(self._stopped_nodes) == self.node_count and not self._ready and not self._starting:
            raise JobFailed(
                f"init() failed {failures} times on every node; no worker could start. "
                f"Last error: {self._last_init_error}"
            )
        elapsed = time.monotonic() - self._started
        if elapsed >= _INIT_FAILURE_GRACE_S and failures >= 2 * self.node_count * self.per_node:
            raise JobFailed(f"init() failed {failures} times in {elapsed:.0f} s. Last error: {self._last_init_error}")
