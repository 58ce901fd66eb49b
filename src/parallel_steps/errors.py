"""The error family, and the text of a failure. User errors are one line: `<field or file>: <what is
wrong> (<what works>)`. A failure's text is the line that says what went wrong (`error_line`) and what
makes two errors "the same" (`signature`).

What happens to a single mini-batch (script error, crash, timeout) is recorded in
the ledger, never raised between layers; only the step's outcome is raised.
"""

from __future__ import annotations

import re
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


class WriteRefused(ParallelStepsError):
    """The disk refused a write before the run had a summary to end with (the run index, a lock, the run's first
    files): the message is the one line naming the path, the cause and what to do (store/space.py); once that is
    done, running the step again resumes it."""


def first_line(exc: BaseException) -> str:
    """The one line a user sees for an error: the message, else the exception type."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


# Signatures mask numbers, addresses, strings and paths, so "KeyError: 'img_0042.png'" and
# "KeyError: 'img_0043.png'" are one error: the driver groups errors so for `max_same_error`, and the
# run report groups the failures it reads back the same way.
_MASKS = (
    (re.compile(r"0x[0-9a-fA-F]+"), "0x?"),
    (re.compile(r"(?:[A-Za-z]:)?(?:[\\/][\w.\-]+)+[\\/]?"), "<path>"),
    (re.compile(r"'[^']*'|\"[^\"]*\""), "'?'"),
    (re.compile(r"\d+(\.\d+)?"), "N"),
)


_TRACEBACK = "Traceback (most recent call last):"
_EXCEPTION_HEAD = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s?(?P<message>.*))?$")
_PUNCTUATION_ONLY = re.compile(r"^[\s{}\[\](),:;\"'`]*$")  # the JSON block the SDK's exceptions end in


def error_line(error: str) -> str:
    """What went wrong, in one line: for a traceback, the exception's type and the first meaningful
    line of its message (not its last line: messages can run on, as Azure ML's end in a JSON block);
    for any other text, its first meaningful line."""
    text = error.strip()
    if _TRACEBACK not in text:
        return _first_meaningful(text.splitlines(), "") or "unknown error"
    lines = text[text.rindex(_TRACEBACK) :].splitlines()[1:]  # chained: the last traceback is the one raised
    start = next((i for i, line in enumerate(lines) if line.strip() and not line[0].isspace()), None)
    if start is None:
        return "unknown error"
    head = _EXCEPTION_HEAD.match(lines[start].strip())
    if head is None:  # not `Type: message`: a line some code printed as it is
        return lines[start].strip()
    kind = head.group("type").rsplit(".", 1)[-1]  # azureml.exceptions._azureml_exception.X: the class name
    message = _first_meaningful([head.group("message") or "", *lines[start + 1 :]], kind)
    return f"{kind}: {message}" if message else kind


def _first_meaningful(lines: list[str], kind: str) -> str:
    """The first line that says something: not blank, not only punctuation, not the type's name again."""
    for line in lines:
        line = line.strip().removeprefix("Message:").strip()
        if not _PUNCTUATION_ONLY.match(line) and line.rstrip(":") != kind:
            return line
    return ""


def signature(error: str) -> str:
    """What makes two errors "the same": the error line with numbers, strings and paths masked."""
    text = error_line(error)
    for pattern, mask in _MASKS:
        text = pattern.sub(mask, text)
    return text
