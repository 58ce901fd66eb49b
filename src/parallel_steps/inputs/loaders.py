"""Loaders: a `MiniBatch` descriptor -> what `run()` receives. Runs inside the worker.

File mini-batches need no import beyond the standard library, so a file step's
workers never pay for pandas or pyarrow.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..storage.objects import any_url, open_input, read_range
from .minibatch import MiniBatch
from .tables import parse_bytes, read_table

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa  # no type information: its names are Any to the checker, and say what is meant


def load(mini_batch: MiniBatch, localize: Callable[[MiniBatch], list[str]] | None = None) -> Any:
    """A list of local paths for files (`localize` gives local copies of those named by URLs, keeping
    their names); a pandas DataFrame with the file's columns and dtypes for tables."""
    if mini_batch.kind == "files":
        if not any_url(mini_batch.paths):
            return list(mini_batch.paths)
        if localize is None:
            raise ValueError("files named by URLs need a download folder")
        return localize(mini_batch)
    read = mini_batch.read or {}
    if mini_batch.kind == "keys":
        return _key_rows(mini_batch, read).to_pandas()
    partitions = read.get("partitions")
    table, lines = _piece(mini_batch, read)
    frame = with_path_columns(table, partitions[0]).to_pandas() if partitions else table.to_pandas()
    return _nested_as_written(frame, table, lines) if lines is not None else frame


def _nested_as_written(frame: pd.DataFrame, table: pa.Table, lines: bytes) -> pd.DataFrame:
    """JSON lines' objects and arrays as the file has them (dicts and lists), not as Arrow unifies them
    across rows (a key absent from one row's object there as None, arrays as numpy arrays, integers as
    floats beside a null): an OpenAI batch file's `body` goes to the server as it was written."""
    import pyarrow as pa

    nested = [f.name for f in table.schema if pa.types.is_nested(f.type)]
    rows = [json.loads(line) for line in lines.splitlines() if line.strip()] if nested else []
    if len(rows) != len(frame):  # not one row per line: leave Arrow's values
        return frame
    for name in nested:
        frame[name] = [row.get(name) for row in rows]
    return frame


def _piece(mini_batch: MiniBatch, read: dict[str, Any]) -> tuple[pa.Table, bytes | None]:
    """The Arrow table of a mini-batch of one file, and for JSON lines the bytes it was parsed from."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path, size = mini_batch.paths[0], read.get("size")
    if mini_batch.kind == "parquet":
        assert mini_batch.row_groups is not None  # the planner names every Parquet piece's row groups
        with open_input(path, size) as file:  # the footer, then the column chunks of these row groups
            return pq.ParquetFile(file, pre_buffer=True).read_row_groups(list(mini_batch.row_groups)), None
    if mini_batch.end is None:  # a whole file (its errors name it); JSON lines are read again, for their objects
        table = read_table(path, mini_batch.kind, read.get("options", {}), size=size)
        if mini_batch.kind != "jsonl":
            return table, None
        with open_input(path, size) as file:
            return table, file.read()
    data = read_range(path, mini_batch.start, mini_batch.end)
    schema = pa.ipc.read_schema(pa.py_buffer(read["schema"]))
    table = parse_bytes(data, mini_batch.kind, read.get("options", {}), at_start=mini_batch.start == 0, schema=schema)
    return table, data if mini_batch.kind == "jsonl" else None


def _key_rows(mini_batch: MiniBatch, read: dict[str, Any]) -> pa.Table:
    """The rows of every file of the mini-batch whose keys equal its key values, with the keys last
    (as Azure ML gives a partitioned table): the other columns, the key columns of the files, then the
    columns of the paths."""
    import pyarrow as pa
    import pyarrow.compute as pc

    keys, wanted = read["key_columns"], mini_batch.key_values()
    partitions = read.get("partitions") or [{}] * len(mini_batch.paths)
    sizes = read.get("sizes") or [None] * len(mini_batch.paths)
    tables = []
    for path, fmt, values, size in zip(mini_batch.paths, read["formats"], partitions, sizes):
        table = with_path_columns(read_table(path, fmt, read.get("options", {}), size=size), values)
        mask = None
        for column, value in wanted.items():
            match = pc.is_null(table[column]) if value is None else pc.equal(table[column], value)
            mask = match if mask is None else pc.and_(mask, match)
        tables.append(table.filter(pc.fill_null(mask, False)))
    table = pa.concat_tables(tables, promote_options="permissive")
    from_paths = list(dict.fromkeys(name for values in partitions for name in values))
    last = [key for key in keys if key not in from_paths] + from_paths
    return table.select([name for name in table.column_names if name not in last] + last)


def with_path_columns(table: pa.Table, values: dict[str, Any]) -> pa.Table:
    """`table` with one constant column per value from its file's path, last (replacing a file column of that name)."""
    import pyarrow as pa

    for name, value in values.items():
        if name in table.column_names:
            table = table.drop_columns([name])
        scalar = pa.scalar(value) if value is not None else pa.scalar(None, pa.string())
        table = table.append_column(name, pa.repeat(scalar, table.num_rows))
    return table
