"""Input datasets: what a step partitions. `ensure_dataset` turns a path, a dict or a dataset into one.

A dataset is a pure description: it names files and how to read them, and does no I/O.
Listing and splitting happen lazily in the planner, reading in the worker's loaders; a
mini-batch's data as an entry script reads it (`to_path()`, `to_pandas_dataframe()`) is in
mini_batch_data.py, above all three.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .partitions import PartitionFormat

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


class _Dataset(BaseModel):
    """What both kinds share: the paths, and partition values in them. Each kind's validator is built when
    it is first used on its own (a run of files never builds the tables')."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    path: list[str]
    partition_format: str | None = Field(
        None,
        description="The end of each file's path with keys in braces, as in Azure ML: /{user}/{genre}/*.wav gives "
        "user and genre (strings; {day:yyyy/MM/dd} gives a datetime), for partition_keys and as columns of tables.",
    )

    @field_validator("path", mode="before")
    @classmethod
    def _paths(cls, value: Any) -> list[str]:
        return _as_path_list(value)

    @field_validator("partition_format")
    @classmethod
    def _partition_format(cls, value: str | None) -> str | None:
        if value is not None:
            PartitionFormat(value)  # raises ValueError saying what is wrong
        return value


class FileDataset(_Dataset):
    """Files, folders (recursive) or globs; `run()` gets a list of file paths.

    Args:
        path: a path, folder, glob or fsspec URL, or a list of them.
        partition_format: key values in the paths (`/{user}/{genre}/*.wav`), for `partition_keys`.
    """

    type: Literal["files"] = "files"

    def __init__(self, path: Any = None, **data: Any):
        super().__init__(path=data.pop("path", path), **data)


class TabularDataset(_Dataset):
    """CSV, Parquet or JSON lines files; `run()` gets a pandas DataFrame.

    Folders named `key=value` (hive layout, as Spark and pyarrow write them) become columns
    after the file's own ones; a `partition_format` names such values instead.

    Args:
        path: a file, folder, glob or fsspec URL, or a list of them.
        format: `csv`, `parquet` or `jsonl`; default from the file extension.
        read_options: options for reading, e.g. `delimiter=";"`, `header=False`,
            `column_names=[...]` for CSV.
        partition_format: columns taken from the paths (`/{store}/{brand}/*.parquet`), instead of hive folders.
    """

    type: Literal["tabular"] = "tabular"
    format: Literal["csv", "parquet", "jsonl"] | None = None
    read_options: dict[str, Any] = Field(default_factory=dict)

    def __init__(
        self,
        path: Any = None,
        format: str | None = None,
        read_options: dict[str, Any] | None = None,
        partition_format: str | None = None,
        **options: Any,
    ):
        super().__init__(  # type: ignore[call-arg]  # pydantic's takes every field; the checker sees _Dataset's
            path=path,
            format=format,
            read_options={**(read_options or {}), **options},
            partition_format=partition_format,
        )

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
