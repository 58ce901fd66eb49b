"""Fault policies: which failed attempts are retried, and how errors are grouped (by their
signature, errors.py) for `max_same_error`."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..control import JobFailed
from ..errors import error_line, signature
from ..protocol import LossReason, WorkerInfo
from ..store.logs import RunLogs

#: Transient errors that `ExitCodeAndErrorMsg` retries without being told.
BUILTIN_RETRYABLE = (
    r"connection (reset|refused|aborted)",
    r"broken pipe",
    r"timed? ?out",
    r"temporar(il)?y unavailable",
    r"too many requests",
    r"service unavailable",
    r"\b(502|503|504)\b",
    r"cuda out of memory",
    r"cuda error: (an illegal memory access|unspecified launch failure)",
    r"nccl",
    r"outofmemory",
    r"resource temporarily unavailable",
    r"remote end closed connection",
)
#: Losses `ExitCodeAndErrorMsg` retries: a hang past run_invocation_timeout, memory above the limit.
TRANSIENT_LOSSES = (LossReason.TIMED_OUT, LossReason.OUT_OF_MEMORY)


class RetryPolicy:
    """`fault_tolerant_policy` and `run_max_try` as one decision."""

    def __init__(
        self, policy: str, run_max_try: int, retryable_errors: Iterable[str], retryable_exit_codes: Iterable[int]
    ):
        self.policy = policy
        self.run_max_try = run_max_try
        patterns = list(retryable_errors) + list(BUILTIN_RETRYABLE)
        self._retryable = re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE)
        self._exit_codes = set(retryable_exit_codes)

    def should_retry(self, attempt: int, error: str, exit_code: int | None, loss: LossReason | None = None) -> bool:
        """Whether a failed attempt runs again: `loss` is set when the worker was lost with it."""
        if attempt >= self.run_max_try or self.policy == "Never":
            return False
        if self.policy == "OnFailure" or loss in TRANSIENT_LOSSES:
            return True
        return bool(self._retryable.search(error)) or (exit_code is not None and exit_code in self._exit_codes)


@dataclass
class _Group:
    count: int = 0  # failed attempts
    first: str = ""
    examples: list[str] = field(default_factory=list)
    mini_batches: set[int] = field(default_factory=set)  # distinct mini-batches it failed


class ErrorGroups:
    """Distinct errors by signature, with counts and where to look; enforces `max_same_error`."""

    def __init__(self, max_same_error: int, logs: RunLogs):
        self.max_same_error = max_same_error
        self.logs = logs
        self._groups: dict[str, _Group] = {}

    def add(self, error: str, mini_batch: int | None, worker: WorkerInfo) -> None:
        """Count one failed attempt (`mini_batch` None: init()); raises JobFailed at `max_same_error`."""
        group = self._groups.setdefault(signature(error), _Group(first=error_line(error)))
        group.count += 1
        if len(group.examples) < 3:
            where = f"mini-batch {mini_batch}" if mini_batch is not None else "init()"
            log = self.logs.relative(self.logs.worker(worker.node_id, worker.process_name, create=False).error)
            group.examples.append(f"{where} on {worker.id} ({log})")
        if mini_batch is None:
            return
        group.mini_batches.add(mini_batch)
        if 0 < self.max_same_error <= len(group.mini_batches):
            raise JobFailed(
                f"max_same_error {self.max_same_error} reached: the same error failed "
                f"{len(group.mini_batches)} mini-batches: {group.first} (first in {group.examples[0]})"
            )

    def first(self, limit: int = 3) -> str:
        """The most frequent errors, for a status reason."""
        groups = sorted(self._groups.values(), key=lambda g: -g.count)[:limit]
        if not groups:
            return ""
        return "First errors: " + "; ".join(f"{g.first} (x{g.count}, {g.examples[0]})" for g in groups)

    def summary(self) -> str:
        """The text of logs/user/error.txt."""
        if not self._groups:
            return "No errors.\n"
        lines = [f"{len(self._groups)} distinct error(s):", ""]
        for group in sorted(self._groups.values(), key=lambda g: -g.count):
            lines.append(f"[{group.count}x] {group.first}")
            lines += [f"    {example}" for example in group.examples]
        return "\n".join(lines) + "\n"
