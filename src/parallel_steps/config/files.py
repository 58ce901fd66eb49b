"""Configuration files -> configuration fields: a step file, or an Azure ML v2 `type: parallel` job file.

Step files are YAML mappings read with errors naming the file, their relative paths made relative
to the file's folder (so a step runs the same from any working directory); the Azure ML layer reads
its pipeline and component files with the same two functions.

The loader between the model and the formats it is written in: `ParallelRunConfig.from_yaml`
asks it for a file's fields, and it dispatches by the file's shape (no configuration field is
called `type`, so a `type:` key marks a job file, read by the job reader the Azure ML layer
registers: loaders.py). The model imports no reader of any format.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import ConfigError, InputError
from .loaders import job_reader


def file_fields(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The fields of a step file (relative paths made relative to its folder) or of a job file."""
    data = read_yaml(path, "step file")
    if "type" in data:
        return _job_fields(data, path)
    return resolve_paths(data, Path(path).absolute().parent)


def job_file_fields(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The fields of a job file; a step file given instead is a ConfigError saying what to use."""
    data = read_yaml(path, "job file")
    if "type" not in data:
        raise ConfigError(
            "type", "is missing: this is not an Azure ML job file", "a step file: ParallelRunConfig.from_yaml"
        )
    return _job_fields(data, path)


def _job_fields(data: dict[str, Any], path: str | os.PathLike[str]) -> dict[str, Any]:
    reader = job_reader()
    if reader is None:  # only when parallel_steps/__init__.py did not run its registrations
        raise ConfigError(str(path), "is an Azure ML job file (it has a type: key), and no job reader is registered")
    return reader(data, Path(path))


def read_yaml(path: str | os.PathLike[str], what: str) -> dict[str, Any]:
    """The mapping in a YAML file; a missing, unreadable or malformed file is an InputError naming it."""
    import yaml  # here, not at the top: most runs never read YAML, and it costs start-up time

    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except FileNotFoundError:
        raise InputError(str(path), f"{what} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(str(path), f"cannot read {what} ({exc})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise InputError(str(path), f"not valid YAML{where}") from None
    if not isinstance(data, dict):
        raise InputError(str(path), f"a {what} must be a mapping of fields")
    return data


_PATH_FIELDS = ("entry_script", "source_directory", "output", "run_root")


def resolve_paths(data: dict[str, Any], base: Path) -> dict[str, Any]:
    """Make the relative paths of a step file relative to `base` (URLs are left alone)."""

    def absolute(path: Any) -> Any:
        if not isinstance(path, str) or "://" in path or os.path.isabs(path):
            return path
        return str(base / path)

    data = dict(data)
    for key in _PATH_FIELDS:
        if key in data and not (key == "entry_script" and data.get("source_directory")):
            data[key] = absolute(data[key])
    for key in ("side_inputs", "models"):
        if isinstance(data.get(key), dict):
            data[key] = {k: absolute(v) for k, v in data[key].items()}
    if "inputs" in data:
        items = data["inputs"] if isinstance(data["inputs"], list) else [data["inputs"]]
        data["inputs"] = [_resolve_input(item, absolute) for item in items]
    return data


def _resolve_input(item: Any, absolute: Callable[[Any], Any]) -> Any:
    if isinstance(item, str):
        return absolute(item)
    if isinstance(item, dict) and "path" in item:
        paths = item["path"]
        item = {**item, "path": [absolute(p) for p in paths] if isinstance(paths, list) else absolute(paths)}
    return item
