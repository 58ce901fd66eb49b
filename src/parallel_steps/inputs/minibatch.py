"""The mini-batch descriptor: small, picklable, and cheap to import (workers import it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..masking import mask_urls


@dataclass(slots=True)  # not frozen: a frozen dataclass takes several times longer to make, once per mini-batch
class MiniBatch:
    """One unit of work: which data `run()` gets, not the data itself. Treated as immutable.

    `kind` is `files`, `csv`, `jsonl`, `parquet` or `keys` (rows of tables with these key values).
    Byte ranges (`start`, `end`) are aligned to record boundaries; `items` is None where only
    reading tells. `keys` are the partition key values of a partitioned mini-batch (files or rows).
    """

    index: int
    kind: str
    paths: tuple[str, ...]
    fingerprint: str | None  # None until a worker fingerprints what it reads (a plan that streams)
    nbytes: int
    items: int | None
    start: int = 0
    end: int | None = None
    row_groups: tuple[int, ...] | None = None
    keys: tuple[Any, ...] | None = None
    read: dict[str, Any] | None = None  # read options, plan-time schema, key columns

    @property
    def id(self) -> int:
        return self.index

    def __reduce__(self) -> tuple[type[MiniBatch], tuple[Any, ...]]:
        # A plain tuple of fields: several times faster to pickle than the dataclass default,
        # and a descriptor is pickled twice per mini-batch (ledger, worker pipe).
        return MiniBatch, (
            self.index,
            self.kind,
            self.paths,
            self.fingerprint,
            self.nbytes,
            self.items,
            self.start,
            self.end,
            self.row_groups,
            self.keys,
            self.read,
        )

    def key_values(self) -> dict[str, Any]:
        """Partition key -> this mini-batch's value (`{}` unless the plan was partitioned by keys)."""
        if self.keys is None or self.read is None:
            return {}
        return dict(zip(self.read["key_columns"], self.keys))

    def describe(self) -> str:
        """A short human description: the files, or the file and the piece of it (URLs' credentials masked)."""
        return mask_urls(self._describe())

    def _describe(self) -> str:
        if self.keys is not None:
            return f"{self.key_values()} in {len(self.paths)} file(s)"
        if self.kind == "files":
            first = self.paths[0]
            return (
                first
                if len(self.paths) == 1
                else f"{first} .. {self.paths[-1].rsplit('/', 1)[-1]} ({len(self.paths)} files)"
            )
        if self.row_groups is not None:
            return f"{self.paths[0]} row groups {self.row_groups[0]}-{self.row_groups[-1]}"
        if self.end is not None:
            return f"{self.paths[0]} bytes {self.start}-{self.end}"
        return self.paths[0]
