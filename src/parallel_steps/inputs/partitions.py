"""Partition values in paths: Azure ML's `partition_format` and hive-style `key=value/` folders.

`partition_format` (FileDataset and TabularDataset, as in Azure's `from_files`) describes
the end of a file's path: `/{user}/{season}/{genres}.wav` gives `user`, `season` and
`genres` as strings, `{day:yyyy/MM/dd}` gives a datetime, and `*` matches within a folder.
Tables without one read hive folders (`Store=2/Brand=x/`, what
Spark and pyarrow write) as columns, numbers as ints, like pyarrow.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any
from urllib.parse import unquote

from ..storage.objects import GLOB_CHARS

_PIECES = re.compile(r"(\{[^{}]*\}|\*)")
_DATE_TOKENS = {"yyyy": ("%Y", r"\d{4}"), "MM": ("%m", r"\d{2}"), "dd": ("%d", r"\d{2}")}
_DATE_TOKENS |= {"HH": ("%H", r"\d{2}"), "mm": ("%M", r"\d{2}"), "ss": ("%S", r"\d{2}")}
_DATE_SPLIT = re.compile("(" + "|".join(_DATE_TOKENS) + ")")
_HIVE_SEGMENT = re.compile(r"^([^=/]+)=([^/]*)$")
_INTEGER = re.compile(r"^-?(0|[1-9]\d{0,17})$")
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"


class PartitionFormat:
    """A compiled `partition_format`; `values(path)` gives the keys' values, None when the path does not match.

    Raises:
        ValueError: the format is malformed (the message says how).
    """

    def __init__(self, text: str):
        self.text = text
        self.keys: list[str] = []
        self._dates: dict[str, str] = {}  # key -> strptime format
        pattern = "".join(self._piece(piece) for piece in _PIECES.split(text) if piece)
        if not self.keys:
            raise ValueError(f"{text!r} names no key (write keys in braces, e.g. /{{user}}/{{genre}}/*.wav)")
        anchor = "" if text.startswith("/") else "(?:^|/)"
        self._regex = re.compile(anchor + pattern + "$")

    def _piece(self, piece: str) -> str:
        if piece == "*":
            return "[^/]*"
        if not piece.startswith("{"):
            if "{" in piece or "}" in piece:
                raise ValueError(f"{self.text!r} has an unbalanced brace")
            return re.escape(piece)
        name, _, date = piece[1:-1].partition(":")
        if not name.isidentifier():
            raise ValueError(f"{self.text!r}: {name!r} is not a valid key name (letters, digits and _)")
        if name in self.keys:
            raise ValueError(f"{self.text!r} names {name!r} twice")
        self.keys.append(name)
        if not date:
            return f"(?P<{name}>[^/]+)"
        parts = [p for p in _DATE_SPLIT.split(date) if p]
        self._dates[name] = "".join(_DATE_TOKENS[p][0] if p in _DATE_TOKENS else p.replace("%", "%%") for p in parts)
        return f"(?P<{name}>" + "".join(_DATE_TOKENS[p][1] if p in _DATE_TOKENS else re.escape(p) for p in parts) + ")"

    def values(self, path: str) -> dict[str, Any] | None:
        match = self._regex.search(path.replace("\\", "/"))
        if match is None:
            return None
        found: dict[str, Any] = match.groupdict()
        for key, spec in self._dates.items():
            try:
                found[key] = datetime.strptime(found[key], spec)
            except ValueError:
                return None
        return found

    def __repr__(self) -> str:
        return self.text


def hive_values(path: str, spec: str) -> dict[str, Any]:
    """The `key=value` folders between what the user named (`spec`) and the file, as column values."""
    folders = below(path, spec).split("/")[:-1]
    values: dict[str, Any] = {}
    for folder in folders:
        match = _HIVE_SEGMENT.match(folder)
        if match:
            values[unquote(match.group(1))] = _hive_value(unquote(match.group(2)))
    return values


def _hive_value(text: str) -> Any:
    if text == HIVE_NULL:
        return None
    return int(text) if _INTEGER.match(text) else text


def below(path: str, spec: str) -> str:
    """The part of a listed `path` below the folder the user named in `spec` (a folder, file or glob)."""
    cut = min((spec.find(c) for c in GLOB_CHARS if c in spec), default=-1)
    base = spec[:cut].rsplit("/", 1)[0] if cut >= 0 else spec.rstrip("/")
    if path == base:  # the file itself was named
        return ""
    return path[len(base) :].lstrip("/") if path.startswith(base + "/") else path.rsplit("/", 1)[-1]
