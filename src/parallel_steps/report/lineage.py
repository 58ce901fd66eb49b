"""Lineage, engine-neutral: where a step reads and writes, named as lineage tools name data (OpenLineage's
dataset naming: a namespace and a name), what its input and output tables look like, and what a run did.

The engines publish these: Airflow as outlet and inlet Assets and OpenLineage facets, Prefect as asset
materializations. Nothing here imports an engine; reading a schema costs a Parquet footer, never the data.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config.model import ParallelRunConfig
from ..inputs.datasets import TabularDataset
from ..inputs.step_partitions import PLACEHOLDER
from ..storage.objects import GLOB_CHARS, is_url, list_url, open_input

#: Schemes of object stores, whose dataset name is the object key (no leading slash).
_OBJECT_STORES = {"s3": "s3", "s3a": "s3", "s3n": "s3", "gs": "gs", "gcs": "gs", "wasbs": "wasbs", "wasb": "wasbs"}
_ADLS = ("abfss", "abfs", "az", "adl")
_ERROR_GROUPS = 10  # in the lineage facet; the report lists them all


@dataclass(frozen=True)
class DataLocation:
    """Where data is: its URI (an asset's identity) and its OpenLineage namespace and name."""

    uri: str
    namespace: str
    name: str


def locate(path: str) -> DataLocation:
    """The location of a local path (made absolute) or a URL.

    OpenLineage names a local file `file` + its absolute path, an S3 object `s3://bucket` + its key,
    Azure `wasbs://container@account...` or `abfss://container@account.dfs.core.windows.net` + the path.
    fsspec's short Azure form (`az://container/path`, `abfs://container/path`) gets the account from
    AZURE_STORAGE_ACCOUNT_NAME, as adlfs does; without it the namespace names the container alone.
    """
    if not is_url(path):
        absolute = os.path.abspath(path)
        return DataLocation(Path(absolute).as_uri(), "file", absolute)
    parts = urllib.parse.urlsplit(path)
    scheme, netloc, key = parts.scheme.lower(), parts.netloc, parts.path.rstrip("/")
    uri = urllib.parse.urlunsplit((scheme, netloc, key or "/", "", ""))
    if scheme == "file":
        return DataLocation(uri, "file" if not netloc else f"file://{netloc}", key or "/")
    if scheme in _OBJECT_STORES:
        return DataLocation(uri, f"{_OBJECT_STORES[scheme]}://{netloc}", key.lstrip("/"))
    if scheme in _ADLS:
        return DataLocation(uri, _adls_namespace(netloc), key.lstrip("/"))
    return DataLocation(uri, f"{scheme}://{netloc}", key or "/")


def _adls_namespace(netloc: str) -> str:
    if "@" in netloc:
        return f"abfss://{netloc}"
    account = os.environ.get("AZURE_STORAGE_ACCOUNT_NAME")
    return f"abfss://{netloc}@{account}.dfs.core.windows.net" if account else f"abfss://{netloc}"


def input_locations(config: ParallelRunConfig) -> list[DataLocation]:
    """Every path the step's inputs name (a glob, or the `{partition}` of a step over partitions, names the
    folder it is in)."""
    paths = [_place(path) for dataset in config.inputs for path in dataset.path]
    return [locate(path) for path in dict.fromkeys(paths)]


def _place(path: str) -> str:
    """`data/*.csv` -> `data`, `data/{partition}/` -> `data`: a glob or a partition is not a place; the folder
    it looks in is."""
    cuts = [path.index(c) for c in GLOB_CHARS if c in path] + [path.find(PLACEHOLDER)]
    cuts = [cut for cut in cuts if cut >= 0]
    if not cuts:
        return path
    head = path[: min(cuts)]
    return (head.rsplit("/", 1)[0] or "/") if "/" in head else "."


def output_location(config: ParallelRunConfig) -> DataLocation | None:
    """The output folder the author chose (None: the run directory's own, known only when it runs)."""
    return locate(config.output) if config.output else None


def run_facts(summary: Mapping[str, Any]) -> dict[str, Any]:
    """What a run did, for an asset event's extra or a materialization's metadata (JSON-able)."""
    output_file = summary.get("output_file")
    return {
        "run_id": summary.get("run_id"),
        "status": summary.get("status"),
        "reused": bool(summary.get("reused")),
        "rows_written": summary.get("rows_written", 0),
        "mini_batches_run": summary.get("mini_batches_run", 0),
        "mini_batches_reused": summary.get("mini_batches_reused", 0),
        "mini_batches_failed": summary.get("mini_batches_failed", 0),
        "items_succeeded": summary.get("items_succeeded", 0),
        "items_failed": summary.get("items_failed", 0),
        "output_file": locate(output_file).uri if output_file else None,
        "report": summary.get("report_url") or summary.get("report"),
    }


def error_digest(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The run's most frequent distinct errors: the error, failed attempts and mini-batches failed."""
    from .data import error_groups
    from .records import read_run

    run_dir = summary.get("run_dir")
    if not run_dir or not Path(run_dir).is_dir():
        return []
    groups = error_groups(read_run(run_dir, summary))
    keys = ("error", "count", "mini_batches_failed")
    return [{key: group[key] for key in keys} for group in groups[:_ERROR_GROUPS]]


def table_schema(path: str) -> list[tuple[str, str]] | None:
    """(column, type) of a Parquet file, or of the first Parquet file in a folder, from its footer;
    None when there is no Parquet file there (or it cannot be read: lineage never fails a run)."""
    import pyarrow.parquet as pq

    try:
        found = _first_parquet(path)
        if found is None:
            return None
        with open_input(found) as file:
            schema = pq.read_schema(file)
    except Exception:
        return None
    return [(field.name, str(field.type)) for field in schema]


def _first_parquet(path: str) -> str | None:
    if path.lower().endswith(".parquet"):
        return path
    if is_url(path):
        files = list_url(path)
    elif Path(path).is_dir():
        files = sorted(str(p) for p in Path(path).rglob("*.parquet"))
    else:
        return None
    return next((f for f in files if f.lower().endswith(".parquet")), None)


def input_schemas(config: ParallelRunConfig) -> dict[str, list[tuple[str, str]]]:
    """The schema of each tabular input path that holds Parquet, by its location's URI."""
    schemas = {}
    for dataset in config.inputs:
        if not isinstance(dataset, TabularDataset):
            continue
        for path in dataset.path:
            schema = table_schema(_place(path))
            if schema:
                schemas[locate(_place(path)).uri] = schema
    return schemas
