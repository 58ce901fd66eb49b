"""The value types of the configuration fields: each `Annotated` type carries the one check or
normalisation its values need, so a field's definition (config/fields.py) reads as name, type,
default and description, and the same check is never written twice.

A leaf of the configuration layer: sizes, names and the run root's default live here.
"""

from __future__ import annotations

import os
import re
from datetime import date, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, ValidationError, ValidationInfo
from pydantic.config import JsonDict

from ..errors import ConfigError
from ..inputs.datasets import Dataset, FileDataset, TabularDataset, ensure_dataset
from ..inputs.step_partitions import PartitionRange, check_spec
from ..masking import mask_urls

NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
#: The mark of a field that a DAG param, trigger conf or `--set` may change by default: it changes neither the
#: code that runs, its environment, nor where data is read or written (issue 14; see config/trust.py).
TRIGGER: JsonDict = {"trigger_overridable": True}
_LEVEL_ALIASES = {"WARN": "WARNING", "FATAL": "CRITICAL"}  # Python's logging takes both names
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?i?B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "KB": 2**10, "MB": 2**20, "GB": 2**30, "TB": 2**40}
MAX_WORKERS_PER_GPU = 16  # more processes than this on one GPU would mostly hold copies of the model
MAX_CONCURRENCY_PER_WORKER = 1024  # mini-batches in flight in one worker: far past what a model server takes
_SIZE_HINT = "use 1024, 512KB, 10MB, 1GB"
_INPUT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


def default_run_root(run_root: str | os.PathLike[str] | None = None) -> Path:
    """The folder of run directories: `run_root`, else PARALLEL_STEPS_HOME, else ./.parallel_steps."""
    return Path(run_root or os.environ.get("PARALLEL_STEPS_HOME") or ".parallel_steps").absolute()


def check_input_name(field: str, name: Any) -> None:
    """Names of side inputs (and models) appear in `${side_inputs.NAME}` and in paths on every node: one
    safe path component, like an identifier (letters, digits, `_`, `.`, `-`; no `..`)."""
    if not isinstance(name, str) or not _INPUT_NAME.fullmatch(name) or ".." in name:
        raise ConfigError(field, f"{name!r} is not a valid name", "use letters, digits, _ . - and start with a letter")


def parse_size(value: int | str) -> int:
    """Bytes from an int or a `KB`/`MB`/`GB` string (1024-based, like ParallelRunStep)."""
    if isinstance(value, bool):
        raise ValueError
    if isinstance(value, int):
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError
    unit = (match.group(2) or "").upper().replace("IB", "B")
    return int(float(match.group(1)) * _UNITS[unit])


def is_size_with_unit(value: Any) -> bool:
    return isinstance(value, str) and not value.strip().isdigit()


# The checks, one per kind of value -------------------------------------------------------------


def _step_name(value: str) -> str:
    if not 3 <= len(value) <= 32 or not re.match(NAME_PATTERN, value):
        raise ValueError(f"{value!r} is not a valid step name (3-32 characters matching {NAME_PATTERN})")
    return value


def _datasets(value: Any) -> list[Dataset]:
    items = value if isinstance(value, (list, tuple)) else [value]
    return [_dataset(item, f"inputs[{index}]") for index, item in enumerate(items)]


def _dataset(item: Any, where: str) -> Dataset:
    """A dataset; an error inside it names the input and its field (`inputs[0].partition_format: ...`)."""
    try:
        return ensure_dataset(item)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(p) for p in (where, *error["loc"]))
        if error["type"] == "extra_forbidden":
            model = FileDataset if exc.title == "FileDataset" else TabularDataset
            valid = ", ".join(name for name in model.model_fields if name != "type")
            raise ConfigError(
                field, f"is not a field of a {model.model_fields['type'].default} input", f"valid: {valid}"
            ) from None
        raise ConfigError(field, error["msg"].removeprefix("Value error, ")) from None


def _named_paths(value: Any, info: ValidationInfo) -> dict[str, str]:
    """A mapping of name -> path (a list of paths, or one path, is named after the files); names are checked."""
    if isinstance(value, (str, os.PathLike)):
        value = [value]
    if value is not None and not isinstance(value, (dict, list, tuple)):
        raise ValueError(f"{value!r} is not a mapping of NAME: PATH (or a list of paths)")
    if isinstance(value, (list, tuple)):
        if not all(isinstance(p, (str, os.PathLike)) for p in value):
            raise ValueError(f"{value!r} is not a list of paths (or use NAME: PATH)")
        value = {Path(os.fspath(p)).name: os.fspath(p) for p in value}
    for name in value or {}:
        check_input_name(info.field_name or "side_inputs", name)
    return value or {}


def _azure_name(value: Any) -> Any:
    """An Azure ML object (Environment, ComputeTarget) or mapping is kept as its name only: the summary is
    published, and an environment's definition may hold registry credentials."""
    if value is None or isinstance(value, str):
        return value
    name = value.get("name") if isinstance(value, dict) else getattr(value, "name", None)
    return str(name or type(value).__name__)


def _strings(value: Any) -> Any:
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else value


def _environment(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    value = {str(k): str(v) for k, v in value.items()}
    for name, text in value.items():  # what the OS refuses to start a worker with
        if not name or "=" in name or "\0" in name + text:
            raise ValueError(f"{name!r} is not a valid variable (names are not empty, hold no '='; no NUL)")
    return value


def _storage_options(value: Any) -> Any:
    for prefix, options in value.items() if isinstance(value, dict) else ():
        if not isinstance(prefix, str) or "://" not in prefix:
            raise ValueError(
                f"{mask_urls(str(prefix))!r} is not a URL prefix (e.g. s3://bucket/in, or s3:// for every bucket)"
            )
        if not isinstance(options, dict):
            raise ValueError(
                f"{mask_urls(prefix)}: the options are a mapping (e.g. {{key: ..., secret: ${{env:AWS_SECRET}}}})"
            )
    return value or {}


def _keys(value: Any) -> Any:
    return [value] if isinstance(value, str) else (value or None)


def _partition_keys(value: Any) -> Any:
    """One key (or glob) alone is a list of one; dates that YAML read are written back as keys."""
    if isinstance(value, str):
        return [value] if value.strip() else None
    if isinstance(value, (list, tuple)):
        return [v.isoformat() if isinstance(v, (date, datetime)) else v for v in value]
    return value


def _partition_spec(value: list[str] | PartitionRange | None) -> list[str] | PartitionRange | None:
    return None if value is None else check_spec(value)


def _level(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    return _LEVEL_ALIASES.get(value.strip().upper(), value.strip().upper())


def _size(value: Any, minimum: int = 1) -> Any:
    if value is None or value == "":
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    try:
        size = parse_size(value)
    except (ValueError, TypeError):
        raise ValueError(f"{value!r} is not a size ({_SIZE_HINT})") from None
    if size < minimum:
        raise ValueError(f"{value!r} must be at least {minimum}")
    return value.strip() if isinstance(value, str) else value


def _size_or_zero(value: Any) -> Any:
    return _size(value, minimum=0)


def _file_name(value: str) -> str:
    """Any file name, as in ParallelRunStep, but only a name: the file stays in the output folder."""
    if not value.strip() or value in (".", "..") or any(c in value for c in "/\\\0"):
        raise ValueError(f"{value!r} must be a file name, without a folder (e.g. results.txt)")
    return value


def _patterns(value: list[str]) -> list[str]:
    for pattern in value:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"{pattern!r} is not a valid regex ({exc})") from None
    return value


# The types the fields are declared with ----------------------------------------------------------

StepName = Annotated[str, AfterValidator(_step_name)]
Datasets = Annotated[list[Dataset], BeforeValidator(_datasets)]
NamedPaths = Annotated[dict[str, str], BeforeValidator(_named_paths)]
Arguments = Annotated[list[str], BeforeValidator(_strings)]
EnvironmentVariables = Annotated[dict[str, str], BeforeValidator(_environment)]
StorageOptions = Annotated[dict[str, dict[str, Any]], BeforeValidator(_storage_options)]
PartitionKeys = Annotated[list[str] | None, BeforeValidator(_keys)]
Partitions = Annotated[
    list[str] | PartitionRange | None, BeforeValidator(_partition_keys), AfterValidator(_partition_spec)
]
Size = Annotated[int | str | None, BeforeValidator(_size)]
SizeOrZero = Annotated[int | str | None, BeforeValidator(_size_or_zero)]  # 0 turns off what it bounds
LoggingLevel = Annotated[Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], BeforeValidator(_level)]
FileName = Annotated[str, AfterValidator(_file_name)]
Patterns = Annotated[list[str], AfterValidator(_patterns)]
AzureName = Annotated[str | None, BeforeValidator(_azure_name)]
