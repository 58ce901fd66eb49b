"""Azure ML `MLTable` files: the folder an `mltable` input names holds one, saying which files to read and how.

Read here: `paths` (`file`, `folder`, `pattern`) and the transformations `read_delimited`,
`read_parquet`, `read_json_lines` and `extract_columns_from_partition_format`, and `drop_columns`
of the columns the paths give (the partition format's keys, and `Path` of `include_path_column`,
which only a table that drops it again may ask for: what Azure's partitioning samples write).
Without a read transformation the table is a list of files. Anything else is refused with one line
naming it (a transformation that changed the rows could not be dropped silently).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..config.files import read_yaml
from ..errors import ConfigError
from ..storage.objects import is_url

_READERS = {"read_delimited": "csv", "read_parquet": "parquet", "read_json_lines": "jsonl"}
#: Options with no effect on what is read here (types are always inferred; lines are parsed by pyarrow).
_NO_EFFECT = {"infer_column_types", "empty_as_string", "support_multi_line", "invalid_lines", "partition_size"}
_ENCODINGS = {"utf8": "utf8", "ascii": "ascii", "iso88591": "latin1", "latin1": "latin1", "windows1252": "cp1252"}


def mltable_input(folder: str, where: str) -> dict[str, Any]:
    """The input (`{type: tabular|files, ...}`) an MLTable folder describes; `where` names it in errors."""
    if is_url(folder):
        raise ConfigError(where, f"{folder}: an MLTable is read from a local folder here", "copy it locally")
    root = Path(folder)
    spec = read_yaml(root / "MLTable" if root.is_dir() else root, "MLTable file")
    unknown = sorted(set(spec) - {"$schema", "type", "paths", "transformations"})
    if unknown:
        raise ConfigError(f"{where} MLTable {unknown[0]}", "is not supported here", "use paths and transformations")
    dataset: dict[str, Any] = {"type": "files", "path": _paths(spec.get("paths"), root.absolute(), where)}
    steps = [_step(step, where) for step in spec.get("transformations") or []]
    dropped = [str(c) for name, columns in steps if name == "drop_columns" for c in _column_list(columns)]
    for name, options in steps:
        if name == "extract_columns_from_partition_format":
            dataset["partition_format"] = options.get("partition_format") if isinstance(options, dict) else options
        elif name in _READERS:
            options = dict(options or {})
            if options.pop("include_path_column", False) and "Path" not in dropped:
                raise ConfigError(f"{where} MLTable {name}.include_path_column", "a path column is not supported here")
            dataset.update(type="tabular", format=_READERS[name], **_read_options(name, options, where))
        elif name != "drop_columns":
            raise ConfigError(
                f"{where} MLTable transformation {name}",
                "is not supported here",
                f"supported: {', '.join([*_READERS, 'extract_columns_from_partition_format', 'drop_columns'])}",
            )
    return _drop(dataset, dropped, where)


def _column_list(columns: Any) -> list[Any]:
    if isinstance(columns, dict):  # {columns: [...]}
        columns = columns.get("columns")
    return list(columns) if isinstance(columns, (list, tuple)) else [columns]


def _drop(dataset: dict[str, Any], dropped: list[str], where: str) -> dict[str, Any]:
    """Drop columns the paths give: a dropped key of the partition format matches without becoming a column."""
    text = dataset.get("partition_format")
    for column in dropped:
        if column == "Path":
            continue
        if not text or f"{{{column}}}" not in text:
            raise ConfigError(
                f"{where} MLTable drop_columns", f"{column!r}: only columns the paths give can be dropped here"
            )
        text = text.replace(f"{{{column}}}", "*")
    if text is not None:
        if "{" in text:
            dataset["partition_format"] = text
        else:
            dataset.pop("partition_format")
    return dataset


def _paths(paths: Any, root: Path, where: str) -> list[str]:
    if not isinstance(paths, list) or not paths:
        raise ConfigError(f"{where} MLTable paths", "needs a list of {file|folder|pattern: path}")
    found = []
    for entry in paths:
        kind, path = next(iter(entry.items())) if isinstance(entry, dict) and len(entry) == 1 else (None, None)
        if kind not in ("file", "folder", "pattern") or not isinstance(path, str):
            raise ConfigError(f"{where} MLTable paths", f"{entry!r} is not one of file:, folder: or pattern:")
        if path.startswith("azureml:"):
            raise ConfigError(f"{where} MLTable paths", f"{path} is an Azure ML datastore path", "use a local path")
        found.append(path if is_url(path) or os.path.isabs(path) else os.path.normpath(root / path))
    return found


def _step(step: Any, where: str) -> tuple[str, Any]:
    if isinstance(step, str):
        return step, {}
    if isinstance(step, dict) and len(step) == 1:
        return next(iter(step.items()))
    raise ConfigError(f"{where} MLTable transformations", f"{step!r} is not one transformation")


def _read_options(reader: str, options: dict[str, Any], where: str) -> dict[str, Any]:
    """TabularDataset read options from a read transformation's."""
    read: dict[str, Any] = {}
    for key, value in options.items():
        if key in _NO_EFFECT or (key == "include_path_column" and not value):
            continue
        if key == "delimiter" and reader == "read_delimited":
            read["delimiter"] = value
        elif key == "header" and reader == "read_delimited":
            read["header"] = value != "no_header"
        elif key == "encoding" and str(value).lower().replace("-", "") in _ENCODINGS:
            read["encoding"] = _ENCODINGS[str(value).lower().replace("-", "")]
        else:
            raise ConfigError(f"{where} MLTable {reader}.{key}", f"{value!r} is not supported here")
    return read
