"""Loaders: a `MiniBatch` descriptor -> what `run()` receives. Runs inside the worker.

File mini-batches need no import beyond the standard library, so a file step's
workers never pay for pandas or pyarrow.
"""

from __future__ import annotations

from typing import Any

from .minibatch import MiniBatch
from .tables import parse_bytes, read_table


def load(mini_batch: MiniBatch) -> Any:
    """A list of paths for files; a pandas DataFrame with the file's columns and dtypes for tables."""
    if mini_batch.kind == "files":
        return list(mini_batch.paths)
    return load_table(mini_batch).to_pandas()


def load_table(mini_batch: MiniBatch):
    """The Arrow table of a tabular mini-batch."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    read = mini_batch.read or {}
    path = mini_batch.paths[0]
    if mini_batch.kind == "parquet":
        return pq.ParquetFile(path).read_row_groups(list(mini_batch.row_groups))
    if mini_batch.kind == "keys":
        return _key_rows(mini_batch, read)
    if mini_batch.end is None:
        return read_table(path, mini_batch.kind, read.get("options", {}))
    with open(path, "rb") as file:
        file.seek(mini_batch.start)
        data = file.read(mini_batch.end - mini_batch.start)
    schema = pa.ipc.read_schema(pa.py_buffer(read["schema"]))
    return parse_bytes(data, mini_batch.kind, read.get("options", {}), at_start=mini_batch.start == 0, schema=schema)


def _key_rows(mini_batch: MiniBatch, read: dict[str, Any]):
    """The rows of every file of the mini-batch whose key columns equal its key values."""
    import pyarrow as pa
    import pyarrow.compute as pc

    tables = []
    for path, fmt in zip(mini_batch.paths, read["formats"]):
        table = read_table(path, fmt, read.get("options", {}))
        mask = None
        for column, value in zip(read["key_columns"], mini_batch.keys):
            match = pc.is_null(table[column]) if value is None else pc.equal(table[column], value)
            mask = match if mask is None else pc.and_(mask, match)
        tables.append(table.filter(pc.fill_null(mask, False)))
    return pa.concat_tables(tables, promote_options="permissive")
