"""Input datasets: what a step partitions. `ensure_dataset` turns a path, a dict or a dataset into one.

A dataset only names files and how to read them; listing and splitting happen
lazily in the planner, reading happens in the worker.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

from .minibatch import MiniBatch
from .partitions import PartitionFormat

if TYPE_CHECKING:
    import pandas as pd

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
    """What both kinds share: the paths, and partition values in them."""

    model_config = ConfigDict(frozen=True, extra="forbid")
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

    def to_path(self) -> list[str]:
        """Every file the dataset names, in the order the planner reads them (as Azure ML's `to_path`)."""
        from .planner import iter_file_runs

        return [path for run in iter_file_runs(self.path) for path in run]


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
    _mini_batch: MiniBatch | None = PrivateAttr(None)  # set on the dataset a mini-batch's context gives run()

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

    @classmethod
    def of_mini_batch(cls, mini_batch: MiniBatch) -> TabularDataset:
        """The rows of one mini-batch as a dataset (what `mini_batch_context.dataset` is)."""
        read = mini_batch.read or {}
        dataset = cls(list(dict.fromkeys(mini_batch.paths)), read_options=read.get("options", {}))
        dataset._mini_batch = mini_batch
        return dataset

    def to_pandas_dataframe(self) -> pd.DataFrame:
        """Every row as one pandas DataFrame (as Azure ML's `to_pandas_dataframe`), path columns last."""
        import pandas as pd

        from .loaders import load
        from .planner import Planner

        if self._mini_batch is not None:
            rows: pd.DataFrame = load(self._mini_batch)
            return rows
        frames = [load(mini_batch) for mini_batch in Planner([self], batch_size=1 << 62).mini_batches()]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

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
