"""What the Airflow DAG and the Prefect flow of a pipeline file share: the pipeline's inputs as the
engine's parameters, the trust rule for their trigger-time values, and the run each task works in.

A trigger (a DAG run's conf, a flow run's parameters) is less trusted than the pipeline's author: by
default it may set the literal inputs (the pipeline's, and its jobs' as `<job>.<input>`) to plain
words (letters, digits and `_.,:=+-`: they reach command lines and arguments), not data paths, which
choose what is read. The author opens inputs by name, or all of them with "all".
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from ..config.types import default_run_root
from ..errors import ConfigError
from .pipeline import Pipeline, read_pipeline
from .pipeline_run import PipelineOptions, PipelineRun, folder_name

_PLAIN = re.compile(r"[A-Za-z0-9_.,:=+-]*")
#: What an author opens to trigger-time values: True (plain literal inputs), False, "all", or input names.
Opened = bool | str | Collection[str]


def pipeline_params(pipeline: Pipeline) -> dict[str, Any]:
    """Parameter name -> default: the pipeline's inputs, then its jobs' literal inputs as `<job>.<input>`."""
    params = {name: value.get("path") if isinstance(value, dict) else value for name, value in pipeline.inputs.items()}
    for node in pipeline.nodes.values():
        for name, value in node.job["inputs"].items():
            if not isinstance(value, dict) and not (isinstance(value, str) and "${{" in value):
                params[f"{node.name}.{name}"] = value
    return params


def trigger_inputs(pipeline: Pipeline, params: Mapping[str, Any], opened: Opened) -> dict[str, Any]:
    """The pipeline inputs (as `read_pipeline` takes them) that trigger-time `params` set; other names
    are not the pipeline's (an engine's own, a config field's) and are left alone.

    Raises:
        ConfigError: a value the author did not open (naming the parameter and how to open it).
    """
    known = pipeline_params(pipeline)
    inputs: dict[str, Any] = {}
    for name, value in params.items():
        if name not in known or value is None or value == known[name]:
            continue
        key = f"jobs.{name.replace('.', '.inputs.', 1)}" if "." in name else name
        data = isinstance(pipeline.inputs.get(name), dict)
        named = opened == "all" or (not isinstance(opened, (bool, str)) and name in opened)
        why = None
        if not named and data:
            why = "chooses data"
        elif not named and opened is not True:
            why = "is not open to trigger-time input"
        elif not named and not _PLAIN.fullmatch(str(value)):
            why = "is not a plain word (letters, digits, _.,:=+-)"
        if why:
            hint = f"the author opens it: params_override=[{name!r}]"
            raise ConfigError(name, f"{value!r} {why}: trigger-time input may not set it", hint)
        inputs[key] = value
    return inputs


def engine_run(
    file: str, params: Mapping[str, Any], opened: Opened, options: PipelineOptions, engine: str, owner: str, run_id: str
) -> PipelineRun:
    """The pipeline run of one DAG run or flow run: the pipeline `file` with the inputs its trigger-time
    `params` set (within what the author `opened`), in `<run_root>/pipelines/<engine>-<owner>/<run_id>` (the
    DAG or flow, and its run), every job's outputs where this run puts them: the engine runs the jobs in
    order and keeps their states.

    Raises:
        ConfigError: a trigger-time value the author did not open.
    """
    pipeline = read_pipeline(file, trigger_inputs(read_pipeline(file), params, opened))
    folder = default_run_root(options.run_root) / "pipelines" / folder_name(f"{engine}-{owner}") / folder_name(run_id)
    run = PipelineRun(pipeline, options, Path(folder), preview=True)
    run.assume_produced()
    return run
