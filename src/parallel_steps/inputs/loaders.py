"""Loaders: a `MiniBatch` descriptor -> what `run()` receives. Runs inside the worker.

File mini-batches need no import beyond the standard library, so a file step's
workers never pay for pandas or pyarrow.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..storage.objects import any_url, open_input, read_range
from .minibatch import MiniBatch
from .tables import parse_bytes, read_table

if TYPE_CHECKING:
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
    return load_table(mini_batch).to_pandas()


def load_table(mini_batch: MiniBatch) -> pa.Table:
    """The Arrow table of a tabular mini-batch; values from its path (hive folders, `partition_format`)
    are the last columns."""
    read = mini_batch.read or {}
    if mini_batch.kind == "keys":
        return _key_rows(mini_batch, read)
    partitions = read.get("partitions")
    table = _piece(mini_batch, read)
    return with_path_columns(table, partitions[0]) if partitions else table


def _piece(mini_batch: MiniBatch, read: dict[str, Any]) -> pa.Table:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path, size = mini_batch.paths[0], read.get("size")
    if mini_batch.kind == "parquet":
        assert mini_batch.row_groups is not None  # the planner names every Parquet piece's row groups
        with open_input(path, size) as file:  # the footer, then the column chunks of these row groups
            return pq.ParquetFile(file, pre_buffer=True).read_row_groups(list(mini_batch.row_groups))
    if mini_batch.end is None:
        return read_table(path, mini_batch.kind, read.get("options", {}), size=size)
    data = read_range(path, mini_batch.start, mini_batch.end)
    schema = pa.ipc.read_schema(pa.py_buffer(read["schema"]))
    return parse_bytes(data, mini_batch.kind, read.get("options", {}), at_start=mini_batch.start == 0, schema=schema)


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
