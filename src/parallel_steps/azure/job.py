"""Azure ML SDK v2 `type: parallel` job files, read as written (docs/migration.md has the field table).

A job file becomes the fields of one `ParallelRunConfig`: the input named by `input_data`
is partitioned, the other data inputs become side inputs, `${{inputs.x}}` and
`${{outputs.x}}` in `task.program_arguments` become their local paths (optional parts `$[[...]]` as
references.py keeps or drops them), and the
`--error_threshold`-style settings there set their fields. Keys that only matter on Azure
(compute, environment, display_name, tags, ...) are accepted with one INFO line; any other
key is refused with one line naming it, never dropped silently.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
from pathlib import Path
from typing import Any

from ..config.types import NAME_PATTERN
from ..errors import ConfigError
from ..storage.objects import is_url
from .mltable import mltable_input
from .references import REFERENCE, optional_parts

log = logging.getLogger("parallel_steps.azure")

#: Keys accepted with no effect here (one INFO line names those a file sets).
IGNORED = ("$schema", "compute", "environment", "display_name", "description", "tags", "experiment_name")
_TASK_IGNORED = ("environment",)
_RESOURCES_IGNORED = ("instance_type",)
_OUTPUT_IGNORED = ("mode", "description", "name", "version")
#: Job keys that are configuration fields of the same name and meaning.
_SAME = (
    "mini_batch_size",
    "partition_keys",
    "error_threshold",
    "mini_batch_error_threshold",
    "logging_level",
    "environment_variables",
    "datastores",  # parallel-steps' own: where `azureml://datastores/<name>/...` paths are (docs/storage.md)
    "allow_reuse",  # as ParallelRunStep's: false runs every mini-batch again (a pipeline job: from scratch)
)
#: ParallelRunStep settings a job may pass in `task.program_arguments` (`--error_threshold 5`).
PROGRAM_SETTINGS = (
    "error_threshold",
    "mini_batch_error_threshold",
    "allowed_failed_count",
    "allowed_failed_percent",
    "progress_update_timeout",
    "first_task_creation_timeout",
    "resource_monitor_interval",
    "profiling_module",
)
#: ...and those with no meaning here: the time a mini-batch's data takes to arrive counts in run_invocation_timeout.
_PROGRAM_IGNORED = ("task_overhead_timeout", "overhead_timeout", "copy_logs_to_parent")
_JOB_KEYS: tuple[str, ...] = IGNORED + _SAME + ("type", "name", "inputs", "outputs", "input_data", "resources", "task")
_JOB_KEYS += ("retry_settings", "max_concurrency_per_instance")
_DATA_TYPES = ("uri_folder", "uri_file", "mltable", "custom_model", "mlflow_model")
_ANY_REFERENCE = re.compile(r"\$\{\{[^}]*\}\}")


#: Configuration fields by the job keys that set them under another name, to name them as the file does.
AZURE_NAMES = {
    "node_count": "resources.instance_count",
    "process_count_per_node": "max_concurrency_per_instance",
    "run_max_try": "retry_settings.max_retries",
    "run_invocation_timeout": "retry_settings.timeout",
}


def job_fields(job: dict[str, Any], file: Path) -> dict[str, Any]:
    """The configuration fields of a `type: parallel` job; relative paths are relative to `file`'s folder."""
    if job.get("type") == "pipeline":
        raise ConfigError("type", "'pipeline' is a pipeline of jobs", "run it with: parallel-steps run PIPELINE.yml")
    if job.get("type") != "parallel":
        raise ConfigError("type", f"{job.get('type')!r} is not a parallel job", "parallel-steps runs type: parallel")
    known_keys(job, "", _JOB_KEYS)
    base = file.absolute().parent
    inputs, outputs = _inputs(job.get("inputs") or {}, base), _outputs(job.get("outputs") or {}, base)
    task = mapping_of(job.get("task"), "task")
    ignored = [key for key in IGNORED if key in job] + [f"task.{key}" for key in _TASK_IGNORED if key in task]
    fields: dict[str, Any] = {key: job[key] for key in _SAME if key in job}
    fields |= _name(job) | _resources(job, ignored) | _retries(job)
    if "max_concurrency_per_instance" in job:
        fields["process_count_per_node"] = job["max_concurrency_per_instance"]
    primary = _primary(job, inputs)
    dataset = inputs[primary].pop("dataset")
    fields["inputs"] = [dataset]
    fields["side_inputs"] = {name: spec["path"] for name, spec in inputs.items() if "path" in spec and name != primary}
    if dataset["type"] == "files" and "mini_batch_size" not in job and "partition_keys" not in job:
        fields["mini_batch_size"] = 1  # the v2 default
    fields.update(_task(task, base, primary, inputs, outputs, fields, ignored))
    if ignored:
        log.info("%s: %s accepted as Azure ML takes them, no effect here", file, ", ".join(ignored))
    return fields


def known_keys(mapping: dict[str, Any], where: str, keys: tuple[str, ...]) -> None:
    """Refuse a key with no meaning here, naming it."""
    unknown = [key for key in mapping if key not in keys]
    if unknown:
        raise ConfigError(f"{where}{unknown[0]}", "has no meaning here", f"supported: {', '.join(sorted(keys))}")


def mapping_of(value: Any, where: str) -> dict[str, Any]:
    """`value` as a mapping (None: empty), or one line naming `where`."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(where, f"{value!r} is not a mapping")
    return value


def _name(job: dict[str, Any]) -> dict[str, Any]:
    """Azure job names may hold '_' and capitals and run longer; step names are lowercase with '-', 32 at most
    (a longer name is cut there)."""
    if "name" not in job:
        return {}
    name = str(job["name"]).lower().replace("_", "-")[:32].rstrip("-")
    if len(name) < 3 or not re.match(NAME_PATTERN, name):
        raise ConfigError("name", f"{job['name']!r} cannot be a step name", "3-32 letters, digits, '-' or '_'")
    return {"name": name}


def _resources(job: dict[str, Any], ignored: list[str]) -> dict[str, Any]:
    resources = mapping_of(job.get("resources"), "resources")
    known_keys(resources, "resources.", ("instance_count", *_RESOURCES_IGNORED))
    ignored += [f"resources.{key}" for key in _RESOURCES_IGNORED if key in resources]
    return {"node_count": resources["instance_count"]} if "instance_count" in resources else {}


def _retries(job: dict[str, Any]) -> dict[str, Any]:
    retry = mapping_of(job.get("retry_settings"), "retry_settings")
    known_keys(retry, "retry_settings.", ("max_retries", "timeout"))
    fields: dict[str, Any] = {}
    if "max_retries" in retry:
        fields["run_max_try"] = int(retry["max_retries"]) + 1  # retries after the first attempt
    if "timeout" in retry:
        fields["run_invocation_timeout"] = retry["timeout"]
    return fields


def _inputs(inputs: dict[str, Any], base: Path) -> dict[str, dict[str, Any]]:
    """name -> {"literal": value} or {"type", "path"} of every input."""
    found = {}
    for name, spec in mapping_of(inputs, "inputs").items():
        where = f"inputs.{name}"
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(name)):
            raise ConfigError(where, "is not a valid input name (letters, digits and _)")
        if not isinstance(spec, dict):
            found[name] = {"literal": spec}
            continue
        known_keys(spec, f"{where}.", ("type", "path", "mode", "description"))
        kind = spec.get("type", "uri_folder")
        if kind not in _DATA_TYPES:
            raise ConfigError(
                f"{where}.type", f"{kind!r} is not supported here", f"use one of {', '.join(_DATA_TYPES)}"
            )
        found[name] = {"type": kind, "path": _local(spec.get("path"), base, f"{where}.path")}
    return found


def _outputs(outputs: dict[str, Any], base: Path) -> dict[str, dict[str, Any]]:
    """name -> {"type", "path"}; path is None where Azure ML chooses the place (`_azure_chooses`)."""
    found = {}
    for name, spec in mapping_of(outputs, "outputs").items():
        where = f"outputs.{name}"
        spec = mapping_of(spec, where)
        known_keys(spec, f"{where}.", ("type", "path", *_OUTPUT_IGNORED))
        path = spec.get("path")
        local = None if _azure_chooses(path) else _local(path, base, f"{where}.path")
        found[name] = {"type": spec.get("type", "uri_folder"), "path": local, "name": _file_name(path)}
    return found


def _azure_chooses(path: Any) -> bool:
    """No path, an Azure ML asset or a path of expressions (`${{name}}`): the output stays in the run folder.
    A datastore path is kept (the step's `datastores` say where it is)."""
    return path is None or (str(path).startswith("azureml:") and not _is_datastore(str(path)))


def _is_datastore(path: str) -> bool:
    return path.startswith("azureml://datastores/") and not _ANY_REFERENCE.search(path)


def _file_name(path: Any) -> str | None:
    return str(path).rstrip("/").rsplit("/", 1)[-1] if path else None


def _local(path: Any, base: Path, where: str) -> str:
    """An absolute local path or an fsspec URL; Azure ML assets and pipeline bindings are refused."""
    if not isinstance(path, str) or not path:
        raise ConfigError(where, "needs a path")
    if _ANY_REFERENCE.search(path):
        raise ConfigError(where, f"{path} binds another job's data", "give a local path or an fsspec URL")
    if path.startswith("azureml:") and not _is_datastore(path):
        raise ConfigError(where, f"{path} names Azure ML data", "give a local path, an fsspec URL or a datastore path")
    return path if is_url(path) or os.path.isabs(path) else os.path.normpath(base / path)


def _primary(job: dict[str, Any], inputs: dict[str, dict[str, Any]]) -> str:
    """The input `input_data` names; it becomes the step's dataset."""
    reference = REFERENCE.fullmatch(str(job.get("input_data", "")).strip())
    if not reference or reference.group(1) != "inputs" or reference.group(2) not in inputs:
        raise ConfigError("input_data", f"{job.get('input_data')!r} names no input", "use ${{inputs.NAME}}")
    name = reference.group(2)
    spec = inputs[name]
    if spec.get("type") not in ("uri_folder", "uri_file", "mltable"):
        raise ConfigError(
            "input_data", f"input {name} is not data to partition", "use a uri_folder, uri_file or mltable"
        )
    if spec["type"] == "mltable":
        spec["dataset"] = mltable_input(spec["path"], f"inputs.{name}")
    else:
        spec["dataset"] = {"type": "files", "path": spec["path"]}
    return name


def _task(
    task: dict[str, Any],
    base: Path,
    primary: str,
    inputs: dict[str, dict[str, Any]],
    outputs: dict[str, dict[str, Any]],
    fields: dict[str, Any],
    ignored: list[str],
) -> dict[str, Any]:
    known_keys(task, "task.", ("type", "code", "entry_script", "program_arguments", "append_row_to", *_TASK_IGNORED))
    if task.get("type", "run_function") != "run_function":
        raise ConfigError("task.type", f"{task['type']!r} is not supported here", "use run_function")
    if "entry_script" not in task:
        raise ConfigError("task.entry_script", "is required")
    config: dict[str, Any] = {"entry_script": str(task["entry_script"])}
    if "code" in task:
        config["source_directory"] = _local(task["code"], base, "task.code")
    else:
        config["entry_script"] = _local(config["entry_script"], base, "task.entry_script")
    paths = {("inputs", name): f"${{side_inputs.{name}}}" for name, spec in inputs.items() if "path" in spec}
    paths[("inputs", primary)] = inputs[primary]["path"]  # the data itself, as the job names it
    paths |= {("inputs", name): str(spec["literal"]) for name, spec in inputs.items() if "literal" in spec}
    given = {name for kind, name in paths if kind == "inputs"}
    arguments = [_substitute(arg, paths, outputs) for arg in _split(task.get("program_arguments"), given)]
    config["arguments"] = arguments
    config.update(_program_settings(arguments, fields, ignored))
    config.update(_append_row(task.get("append_row_to"), outputs))
    return config


def _split(arguments: Any, given: set[str]) -> list[str]:
    """The program arguments, their optional parts kept or dropped by the inputs `given` (references.py)."""
    if arguments is None:
        return []
    if isinstance(arguments, list):
        return [kept for a in arguments if (kept := optional_parts(str(a), given).strip())]
    try:
        return shlex.split(optional_parts(str(arguments), given))
    except ValueError as exc:
        raise ConfigError("task.program_arguments", f"cannot be split into arguments ({exc})") from None


def _substitute(argument: str, paths: dict[tuple[str, str], Any], outputs: dict[str, dict[str, Any]]) -> str:
    def replace(match: re.Match[str]) -> str:
        kind, name = match.group(1), match.group(2)
        if kind == "outputs" and name in outputs:
            if outputs[name]["path"] is None:
                raise ConfigError(f"outputs.{name}", "is used in task.program_arguments, so it needs a local path")
            return str(outputs[name]["path"])
        if (kind, name) not in paths:
            have = ", ".join(n for k, n in paths if k == kind) if kind == "inputs" else ", ".join(outputs)
            raise ConfigError("task.program_arguments", f"{match.group(0)} names no {kind[:-1]}", f"have: {have}")
        return str(paths[(kind, name)])

    replaced = REFERENCE.sub(replace, argument)
    other = _ANY_REFERENCE.search(replaced)
    if other:
        raise ConfigError("task.program_arguments", f"{other.group(0)} cannot be resolved here")
    return replaced


def _program_settings(arguments: list[str], fields: dict[str, Any], ignored: list[str]) -> dict[str, Any]:
    """ParallelRunStep settings passed as program arguments (`--allowed_failed_percent 30`); they stay in
    sys.argv too, as on Azure ML. A setting also given as a job field must agree with it."""
    settings: dict[str, Any] = {}
    for index, argument in enumerate(arguments):
        name, equals, value = argument.removeprefix("--").partition("=")
        if not argument.startswith("--") or name not in PROGRAM_SETTINGS + _PROGRAM_IGNORED:
            continue
        if not equals:
            value = arguments[index + 1] if index + 1 < len(arguments) else ""
        if name in _PROGRAM_IGNORED:
            ignored.append(f"--{name}")
            continue
        if name in fields and str(fields[name]) != value:
            raise ConfigError(name, f"{fields[name]!r} conflicts with --{name} {value} in task.program_arguments")
        settings[name] = value
    return settings


def _append_row(target: Any, outputs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """`append_row_to: ${{outputs.x}}`: the output folder and file name; without it, only counts (summary_only)."""
    if target is None:
        return {"output_action": "summary_only"}
    reference = REFERENCE.fullmatch(str(target).strip())
    if not reference or reference.group(1) != "outputs" or reference.group(2) not in outputs:
        raise ConfigError("task.append_row_to", f"{target!r} names no output", "use ${{outputs.NAME}}")
    output = outputs[reference.group(2)]
    fields: dict[str, Any] = {"output_action": "append_row"}
    if output["type"] == "uri_file":
        if output["name"]:
            fields["append_row_file_name"] = output["name"]
        folder = output["path"].rsplit("/", 1)[0] if output["path"] else None
    else:
        folder = output["path"]
    if folder:
        fields["output"] = folder
    return fields
