"""Input datasets: what a step partitions. `ensure_dataset` turns a path, a dict or a dataset into one.

A dataset only names files and how to read them; listing and splitting happen
lazily in the planner, reading happens in the worker.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: CSV read options a TabularDataset accepts (JSON lines and Parquet need none).
CSV_OPTIONS = ("delimiter", "header", "column_names", "quote_char", "encoding", "skip_rows")
_EXTENSIONS = {
    ".csv": "csv",
    ".tsv": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".jsonl": "jsonl",
    ".json": "jsonl",
    ".ndjson": "jsonl",
}


def _as_path_list(value: Any) -> list[str]:
    paths = [value] if isinstance(value, (str, os.PathLike)) else list(value or [])
    if not paths:
        raise ValueError("needs at least one path")
    return [os.fspath(p) for p in paths]


class FileDataset(BaseModel):
    """Files, folders (recursive) or globs; `run()` gets a list of file paths.

    Args:
        path: a path, folder, glob or fsspec URL, or a list of them.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    type: Literal["files"] = "files"
    path: list[str]

    def __init__(self, path: Any = None, **data: Any):
        super().__init__(path=data.pop("path", path), **data)

    @field_validator("path", mode="before")
    @classmethod
    def _paths(cls, value: Any) -> list[str]:
        return _as_path_list(value)


class TabularDataset(BaseModel):
    """CSV, Parquet or JSON lines files; `run()` gets a pandas DataFrame.

    Args:
        path: a file, folder, glob or fsspec URL, or a list of them.
        format: `csv`, `parquet` or `jsonl`; default from the file extension.
        read_options: options for reading, e.g. `delimiter=";"`, `header=False`,
            `column_names=[...]` for CSV.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    type: Literal["tabular"] = "tabular"
    path: list[str]
    format: Literal["csv", "parquet", "jsonl"] | None = None
    read_options: dict[str, Any] = Field(default_factory=dict)

    def __init__(
        self, path: Any = None, format: str | None = None, read_options: dict[str, Any] | None = None, **options: Any
    ):
        super().__init__(path=path, format=format, read_options={**(read_options or {}), **options})

    @field_validator("path", mode="before")
    @classmethod
    def _paths(cls, value: Any) -> list[str]:
        return _as_path_list(value)

    @field_validator("read_options")
    @classmethod
    def _known_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(options) - set(CSV_OPTIONS))
        if unknown:
            raise ValueError(f"unknown read option {unknown[0]!r} (use {', '.join(CSV_OPTIONS)})")
        return options

    def format_of(self, path: str) -> str:
        """The format of one file: the dataset's `format`, else from its extension."""
        if self.format:
            return self.format
        ext = os.path.splitext(path)[1].lower()
        if ext not in _EXTENSIONS:
            raise ValueError(f"cannot tell the format of {path!r} (set format: csv, parquet or jsonl)")
        return _EXTENSIONS[ext]


Dataset = FileDataset | TabularDataset


def ensure_dataset(value: Any) -> Dataset:
    """A dataset from what users write: a dataset, a path (files), or a dict with `type`."""
    if isinstance(value, (FileDataset, TabularDataset)):
        return value
    if isinstance(value, (str, os.PathLike)):
        return FileDataset(value)
    if isinstance(value, dict):
        data = dict(value)
        kind = data.pop("type", "files")
        if kind == "files":
            return FileDataset(**data)
        if kind == "tabular":
            return TabularDataset(**data)
        raise ValueError(f"unknown input type {kind!r} (use files or tabular)")
    raise ValueError(f"cannot use {value!r} as an input (use a path, FileDataset or TabularDataset)")
