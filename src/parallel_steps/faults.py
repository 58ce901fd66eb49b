"""Fault policies: which failed attempts are retried, and how errors are grouped.

Error signatures mask numbers, addresses and paths, so "KeyError: 'img_0042.png'"
and "KeyError: 'img_0043.png'" count as the same error for `max_same_error`.
"""

from __future__ import annotations

import re

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
    r"run\(\) exceeded \d",  # the worker hung past run_invocation_timeout
)

_MASKS = (
    (re.compile(r"0x[0-9a-fA-F]+"), "0x?"),
    (re.compile(r"(?:[A-Za-z]:)?(?:[\\/][\w.\-]+)+[\\/]?"), "<path>"),
    (re.compile(r"'[^']*'|\"[^\"]*\""), "'?'"),
    (re.compile(r"\d+(\.\d+)?"), "N"),
)


def error_line(error: str) -> str:
    """The line that says what went wrong: a traceback's last line, else the first line."""
    lines = [line for line in error.strip().splitlines() if line.strip()]
    if not lines:
        return "unknown error"
    return lines[-1].strip() if lines[0].startswith("Traceback") else lines[0].strip()


def signature(error: str) -> str:
    """What makes two errors "the same": the error line with numbers, strings and paths masked."""
    text = error_line(error)
    for pattern, mask in _MASKS:
        text = pattern.sub(mask, text)
    return text


class RetryPolicy:
    """`fault_tolerant_policy` and `run_max_try` as one decision."""

    def __init__(self, policy: str, run_max_try: int, retryable_errors: list[str], retryable_exit_codes: list[int]):
        self.policy = policy
        self.run_max_try = run_max_try
        patterns = list(retryable_errors) + list(BUILTIN_RETRYABLE)
        self._retryable = re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE)
        self._exit_codes = set(retryable_exit_codes)

    def should_retry(self, attempt: int, error: str, exit_code: int | None) -> bool:
        if attempt >= self.run_max_try or self.policy == "Never":
            return False
        if self.policy == "OnFailure":
            return True
        return bool(self._retryable.search(error)) or (exit_code is not None and exit_code in self._exit_codes)
