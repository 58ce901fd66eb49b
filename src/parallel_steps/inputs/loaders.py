"""Loaders: a `MiniBatch` descriptor -> what `run()` receives. Runs inside the worker.

File mini-batches need no import beyond the standard library, so a file step's
workers never pay for pandas or pyarrow.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from .minibatch import MiniBatch
from .storage import any_url, download, is_url, open_input
from .tables import parse_bytes, read_table


def load(mini_batch: MiniBatch, download_dir: Callable[[], str] | None = None) -> Any:
    """A list of local paths for files (URLs are downloaded first, into the folder `download_dir()`
    gives, keeping their names); a pandas DataFrame with the file's columns and dtypes for tables."""
    if mini_batch.kind == "files":
        if not any_url(mini_batch.paths):
            return list(mini_batch.paths)
        if download_dir is None:
            raise ValueError("files named by URLs need a download folder")
        folder = download_dir()
        return [_local_copy(path, folder, position) for position, path in enumerate(mini_batch.paths)]
    return load_table(mini_batch).to_pandas()


def _local_copy(path: str, folder: str, position: int) -> str:
    if not is_url(path):
        return path
    target = os.path.join(folder, str(position), path.rstrip("/").rsplit("/", 1)[-1])
    os.makedirs(os.path.dirname(target))
    download(path, target)
    return target


def load_table(mini_batch: MiniBatch):
    """The Arrow table of a tabular mini-batch."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    read = mini_batch.read or {}
    path = mini_batch.paths[0]
    if mini_batch.kind == "parquet":
        with open_input(path) as file:
            return pq.ParquetFile(file).read_row_groups(list(mini_batch.row_groups))
    if mini_batch.kind == "keys":
        return _key_rows(mini_batch, read)
    if mini_batch.end is None:
        return read_table(path, mini_batch.kind, read.get("options", {}))
    with open_input(path) as file:
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
