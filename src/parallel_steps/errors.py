"""The error family. User errors are one line: `<field or file>: <what is wrong> (<what works>)`.

What happens to a single mini-batch (script error, crash, timeout) is recorded in
the ledger, never raised between layers; only the step's outcome is raised.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from .masking import mask_urls

if TYPE_CHECKING:
    from .summary import RunSummary


class ParallelStepsError(Exception):
    """Base of every error parallel-steps raises on purpose."""


class ConfigError(ParallelStepsError, ValueError):
    """An invalid configuration value; raised before any worker starts."""

    def __init__(self, field: str, problem: str, hint: str | None = None):
        self.field, self.problem, self.hint = field, problem, hint
        super().__init__(f"{field}: {problem}" + (f" ({hint})" if hint else ""))


class InputError(ParallelStepsError):
    """A missing, unreadable or malformed input, side input or entry script file (a URL's password or
    query string is masked: the message reaches logs and summaries)."""

    def __init__(self, path: str, problem: str):
        self.path, self.problem = mask_urls(path), mask_urls(problem)
        super().__init__(f"{self.path}: {self.problem}")


class UnsupportedPlatform(ConfigError):
    """The operating system is not Linux; raised before anything starts (workers need Linux)."""


class StepFailed(ParallelStepsError):
    """The step ran and ended Failed or Canceled; `summary` is the run summary."""

    def __init__(self, summary: RunSummary | Mapping[str, Any]):
        # run_step's summary, or the same read back from run.json by whoever follows a run elsewhere
        self.summary = cast("RunSummary", summary)
        super().__init__(f"{summary.get('status')}: {summary.get('status_reason')}")


def first_line(exc: BaseException) -> str:
    """The one line a user sees for an error: the message, else the exception type."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
