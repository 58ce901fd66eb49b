"""One step over many partitions of its data: `{partition}` in the input paths, the keys that fill it.

A step with `partitions` (a list of keys, globs matched against the folders found, or a date range) runs
over every partition's data at once: one pool, one `init()` per worker. Each key fills the `{partition}`
of every input path, so each partition is its own datasets; the planners never cut a mini-batch across
two datasets, so no mini-batch crosses a partition, and each partition's mini-batches are one run of
indexes in the plan (`spans`). What each partition did, and its output, are taken from those spans
(run/partitioned.py). A key is one folder name: it can never point outside the input's root.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Sequence
from datetime import date, datetime, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator

from ..errors import ConfigError
from ..storage import objects as storage
from ..storage.objects import GLOB_CHARS, is_url
from .datasets import Dataset

PLACEHOLDER = "{partition}"
MAX_KEY_LENGTH = 250  # Airflow's partition keys are at most this long
MAX_PARTITIONS = 100_000
_STEPS = {"day": timedelta(days=1), "hour": timedelta(hours=1)}
_FORMATS = {"day": "%Y-%m-%d", "hour": "%Y-%m-%dT%H"}


class PartitionRange(BaseModel):
    """Every day (or hour) from `start` to `end`, both included; each key is the date written with `format`
    (default `%Y-%m-%d`, or `%Y-%m-%dT%H` for hours; Airflow's CronPartitionTimetable writes
    `%Y-%m-%dT%H:%M:%S` unless its `key_format` says otherwise)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    start: datetime
    end: datetime
    every: Literal["day", "hour"] = "day"
    format: str | None = None

    @field_validator("start", "end", mode="before")
    @classmethod
    def _dates(cls, value: object) -> object:
        return datetime.combine(value, datetime.min.time()) if type(value) is date else value

    def keys(self) -> list[str]:
        step, fmt = _STEPS[self.every], self.format or _FORMATS[self.every]
        if self.end < self.start:
            raise ValueError(f"the range {self.start:{fmt}} .. {self.end:{fmt}} is empty (end before start)")
        count = int((self.end - self.start) / step) + 1
        if count > MAX_PARTITIONS:
            raise ValueError(f"the range holds {count} partitions, more than {MAX_PARTITIONS}")
        keys = [(self.start + n * step).strftime(fmt) for n in range(count)]
        if len(set(keys)) < len(keys):
            raise ValueError(f"format {fmt!r} writes several {self.every}s as one key")
        return keys


Partitions = list[str] | PartitionRange


def check_key(key: object) -> str:
    """A key as a folder name: one path segment, never `.` or `..` (it cannot leave the input's root)."""
    if not isinstance(key, str) or not key.strip():
        raise ValueError(f"{key!r} is not a partition key (a non-empty folder name)")
    if key in (".", "..") or any(c in key for c in "/\\\0") or len(key) > MAX_KEY_LENGTH:
        raise ValueError(
            f"{key!r} is not a partition key: one folder name of at most {MAX_KEY_LENGTH} characters, "
            "without / or \\, not . or .."
        )
    return key


def check_spec(spec: Partitions) -> Partitions:
    """The keys of a list checked, once each; a range's keys are made and checked too."""
    keys = spec.keys() if isinstance(spec, PartitionRange) else spec
    if not keys:
        raise ValueError("no partition given (a list of keys, globs such as 2026-01-*, or {start, end, every})")
    seen: set[str] = set()
    for key in keys:
        if check_key(key) in seen:
            raise ValueError(f"{key!r} is named twice")
        seen.add(key)
    return spec


def resolve(spec: Partitions, inputs: Sequence[Dataset]) -> list[str]:
    """The keys `spec` names: a range's, a list's, each glob replaced by the folders it matches where the
    first input path has `{partition}` (sorted). Raises ConfigError naming `partitions`."""
    if isinstance(spec, PartitionRange):
        return spec.keys()
    keys: list[str] = []
    found: list[str] | None = None
    for key in spec:
        if not GLOB_CHARS & set(key):
            keys.append(key)
            continue
        found = _found(inputs[0].path[0]) if found is None else found
        matched = fnmatch.filter(found, key)
        if not matched:
            where = inputs[0].path[0]
            raise ConfigError("partitions", f"{key!r} matches no partition in {where}", f"found: {_some(found)}")
        keys += [name for name in matched if name not in keys]
    return keys


def _found(path: str) -> list[str]:
    """The keys present where `path` has `{partition}`: the names in its parent folder that fill the segment."""
    parent, _, rest = path.partition(PLACEHOLDER)
    folder, _, before = parent.rpartition("/")
    after = rest.split("/", 1)[0]
    try:
        names = [entry.rstrip("/").rsplit("/", 1)[-1] for entry in _listing(folder or "/")]
    except (FileNotFoundError, NotADirectoryError):
        raise ConfigError("partitions", f"{folder} is not a folder to find partitions in") from None
    return sorted(
        name[len(before) : len(name) - len(after)]
        for name in names
        if name.startswith(before) and name.endswith(after) and len(name) > len(before) + len(after)
    )


def _listing(folder: str) -> list[str]:
    """The names in a folder, local or at a URL (a store's listing of the prefix)."""
    if not is_url(folder):
        return os.listdir(folder)
    filesystem, inner = storage.filesystem_of(folder)
    return [str(name) for name in filesystem.ls(inner, detail=False)]


def _some(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "") if names else "none"


def expand(inputs: Sequence[Dataset], keys: Sequence[str]) -> list[Dataset]:
    """Each key's datasets, key after key: the inputs with `{partition}` filled."""
    return [
        dataset.model_copy(update={"path": [path.replace(PLACEHOLDER, key) for path in dataset.path]})
        for key in keys
        for dataset in inputs
    ]


def spans(keys: Sequence[str], starts: Sequence[int], total: int) -> list[tuple[str, int, int]]:
    """(key, first index, end index) of each partition's mini-batches, from the index each of the expanded
    datasets started at (`starts`, as many per key as there are inputs) and the plan's size."""
    per_key = len(starts) // len(keys) if keys else 0
    firsts = [starts[n * per_key] for n in range(len(keys))]
    return [(key, first, end) for key, first, end in zip(keys, firsts, [*firsts[1:], total])]
