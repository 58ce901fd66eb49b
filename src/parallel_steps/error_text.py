"""The text of a failure: the line that says what went wrong, and what makes two errors "the same".

A leaf module: the driver groups errors by signature for `max_same_error`, and the run report
groups the failures it reads back the same way. Signatures mask numbers, addresses, strings
and paths, so "KeyError: 'img_0042.png'" and "KeyError: 'img_0043.png'" are one error.
"""

from __future__ import annotations

import re

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
