"""Configuration files -> configuration fields: a step file, or an Azure ML v2 `type: parallel` job file.

The loader between the model and the formats it is written in: `ParallelRunConfig.from_yaml`
asks it for a file's fields, and it dispatches by the file's shape (no configuration field is
called `type`, so a `type:` key marks a job file, read by the job reader the Azure ML layer
registers: config_loaders.py). The model imports no reader of any format.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .config_loaders import job_reader
from .errors import ConfigError
from .stepfile import read_yaml, resolve_paths


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
