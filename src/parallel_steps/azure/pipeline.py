"""Azure ML SDK v2 `type: pipeline` files read as written: the nodes, their components, their order.

A node is `type: parallel` (run as a step: its job, once bound, goes through `job.job_fields`) or
`type: command` (a subprocess, `command.py`), written inline or as `component: ./file.yml`, whose
declared inputs the node binds. `${{parent.inputs.x}}`, `${{parent.outputs.x}}` and
`${{parent.jobs.<node>.outputs.<name>}}` connect them; the last give the order. Relative paths are
relative to the file that holds them (the pipeline, or the component). Keys that only matter on Azure
are accepted with one INFO line; any other key is refused with one line naming it.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config.files import read_yaml
from ..errors import ConfigError, InputError
from ..storage.objects import is_url
from .job import known_keys, mapping_of

log = logging.getLogger("parallel_steps.azure")

_KEYS: tuple[str, ...] = ("$schema", "type", "name", "display_name", "description", "experiment_name", "tags")
_KEYS += ("settings", "inputs", "outputs", "jobs", "compute")
_IGNORED = ("$schema", "display_name", "description", "experiment_name", "tags", "compute")
_SETTINGS = ("default_compute", "default_datastore", "continue_on_step_failure", "force_rerun")
#: Component keys that describe the component, not what it runs.
_COMPONENT_META = ("$schema", "name", "version", "display_name", "description", "tags", "is_deterministic")
_NODE_META = ("compute", "display_name", "description", "tags", "experiment_name")
#: Command node keys (parallel nodes take a parallel job's, checked by `job.job_fields`).
COMMAND_KEYS = ("type", "command", "code", "inputs", "outputs", "environment_variables", "environment", "resources")
COMMAND_IGNORED = ("environment", "resources")
DATA_TYPES = ("uri_folder", "uri_file", "mltable", "custom_model", "mlflow_model")
FOLDER_TYPES = ("uri_folder", "mltable", "custom_model", "mlflow_model")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: `${{parent.inputs.x}}`, `${{parent.outputs.x}}`, `${{parent.jobs.n.outputs.o}}`.
BINDING = re.compile(r"\$\{\{\s*parent\.(?:(inputs|outputs)\.(\w+)|jobs\.(\w+)\.outputs\.(\w+))\s*\}\}")


@dataclass(frozen=True)
class Node:
    """One node: its kind, its job (the component's keys with the node's on top), and what it reads."""

    name: str
    kind: str  # "parallel" or "command"
    job: dict[str, Any]
    upstream: tuple[str, ...] = ()  # the nodes whose outputs it binds
    component: Path | None = None  # the component file it runs, when one


@dataclass
class Pipeline:
    """A pipeline file: its inputs and outputs, and its nodes in an order that runs each after its upstream."""

    file: Path
    name: str
    inputs: dict[str, Any]  # name -> a literal, or {"type", "path"} for data
    outputs: dict[str, dict[str, Any]]  # name -> {"type", "path" (None: under the run)}
    nodes: dict[str, Node]
    settings: dict[str, Any] = field(default_factory=dict)


def is_pipeline_file(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a YAML file saying `type: pipeline` (a cheap look at the file, for the CLI)."""
    file = Path(path)
    if file.suffix.lower() not in (".yml", ".yaml") or not file.is_file():
        return False
    try:
        return read_yaml(file, "step file").get("type") == "pipeline"
    except InputError:  # reported as the step file's error, where it is read as one
        return False


def read_pipeline(path: str | os.PathLike[str], inputs: dict[str, Any] | None = None) -> Pipeline:
    """The pipeline in `path`; `inputs` replace the values of its inputs (`name`) and of its jobs' inputs
    (`jobs.<job>.inputs.<name>`): `--set` values, an engine's parameters."""
    file = Path(path).absolute()
    return pipeline_from_data(read_yaml(file, "pipeline file"), file, inputs)


def pipeline_from_data(data: dict[str, Any], file: Path, inputs: dict[str, Any] | None = None) -> Pipeline:
    """The pipeline a mapping describes (a file's, or an SDK object's export); paths relative to `file`'s folder."""
    if data.get("type") != "pipeline":
        raise ConfigError("type", f"{data.get('type')!r} is not a pipeline", "a pipeline file says type: pipeline")
    known_keys(data, "", _KEYS)
    settings = mapping_of(data.get("settings"), "settings")
    known_keys(settings, "settings.", _SETTINGS)
    used = ("default_datastore", "continue_on_step_failure")
    ignored = [key for key in _IGNORED if key in data] + [f"settings.{key}" for key in settings if key not in used]
    base = file.parent
    declared = {name: _absolute_data(spec, base) for name, spec in mapping_of(data.get("inputs"), "inputs").items()}
    given = dict(inputs or {})
    job_inputs = {key: given.pop(key) for key in list(given) if key.startswith("jobs.")}
    for name, value in given.items():
        if name not in declared:
            raise ConfigError(f"inputs.{name}", "is not an input of the pipeline", f"inputs: {', '.join(declared)}")
        declared[name] = _with_value(declared[name], value, base)
    outputs = {
        name: _output(spec, f"outputs.{name}", base)
        for name, spec in mapping_of(data.get("outputs"), "outputs").items()
    }
    jobs = mapping_of(data.get("jobs"), "jobs")
    if not jobs:
        raise ConfigError("jobs", "the pipeline has no jobs")
    nodes = [_node(str(name), spec, base, ignored) for name, spec in jobs.items()]
    nodes = [_with_inputs(node, job_inputs, base) for node in nodes]
    unknown = [key for key in job_inputs if key.split(".")[1] not in jobs]
    if unknown:
        raise ConfigError(unknown[0], "names no job of the pipeline", f"jobs: {', '.join(map(str, jobs))}")
    if ignored:
        log.info("%s: %s accepted as Azure ML takes them, no effect here", file, ", ".join(ignored))
    name = str(data.get("name") or data.get("display_name") or file.stem)
    return Pipeline(file, name, declared, outputs, _in_order(nodes, declared, outputs), settings)


def _node(name: str, spec: Any, base: Path, ignored: list[str]) -> Node:
    where = f"jobs.{name}"
    if not _NAME.fullmatch(name):
        raise ConfigError(where, "is not a valid node name (letters, digits and _)")
    spec = _absolute_job(mapping_of(spec, where), base)
    component: dict[str, Any] = {}
    if "component" in spec:
        component = _component(spec["component"], f"{where}.component", base)
    kind = spec.get("type") or component.get("type")
    if component and component.get("type") != kind:
        raise ConfigError(f"{where}.type", f"{kind!r} does not match its component's type {component.get('type')!r}")
    if kind not in ("parallel", "command"):
        raise ConfigError(f"{where}.type", f"{kind!r} is not run here", "parallel and command nodes run")
    ignored += [f"{where}.{key}" for key in _NODE_META if key in spec]
    job = {key: value for key, value in component.items() if key not in ("inputs", "outputs", *_COMPONENT_META)}
    job.update(
        {key: value for key, value in spec.items() if key not in ("component", "inputs", "outputs", *_NODE_META)}
    )
    if isinstance(component.get("task"), dict) and isinstance(spec.get("task"), dict):
        job["task"] = {**component["task"], **spec["task"]}
    job["type"] = kind
    job["inputs"] = _bound_inputs(mapping_of(component.get("inputs"), f"{where}.component inputs"), spec, where)
    job["outputs"] = _bound_outputs(mapping_of(component.get("outputs"), f"{where}.component outputs"), spec, where)
    upstream = []
    for match in BINDING.finditer(repr((job["inputs"], job["outputs"]))):
        if match.group(3) and match.group(3) not in upstream:
            upstream.append(match.group(3))
    reference = spec.get("component")
    component_file = None
    if isinstance(reference, str) and not reference.startswith("azureml:"):
        component_file = base / reference.removeprefix("file:")
    return Node(name, kind, job, tuple(upstream), component_file)


def _with_inputs(node: Node, values: dict[str, Any], base: Path) -> Node:
    """The node with the values given for its inputs (`jobs.<job>.inputs.<name>`)."""
    prefix = f"jobs.{node.name}.inputs."
    given = {key.removeprefix(prefix): value for key, value in values.items() if key.startswith(prefix)}
    if not given:
        return node
    inputs = dict(node.job["inputs"])
    for name, value in given.items():
        if name not in inputs:
            raise ConfigError(f"{prefix}{name}", "is not an input of the job", f"inputs: {', '.join(inputs)}")
        inputs[name] = _with_value(inputs[name], value, base)
    return Node(node.name, node.kind, {**node.job, "inputs": inputs}, node.upstream, node.component)


def _component(reference: Any, where: str, base: Path) -> dict[str, Any]:
    """The component a node runs: an inline mapping, or the file `./x.yml` (or `file:./x.yml`) names."""
    if isinstance(reference, dict):
        return _absolute_job(reference, base)
    text = str(reference)
    if text.startswith("azureml:"):
        raise ConfigError(where, f"{text} names a registered component", "give its file: component: ./component.yml")
    path = base / text.removeprefix("file:")
    component = read_yaml(path, "component file")
    if component.get("type") not in ("parallel", "command"):
        raise ConfigError(where, f"{path}: type {component.get('type')!r} is not run here", "parallel or command")
    return _absolute_job(component, path.parent)


def _bound_inputs(declared: dict[str, Any], spec: dict[str, Any], where: str) -> dict[str, Any]:
    """The node's inputs: the values it gives, typed by the component's declarations, else their defaults."""
    given = mapping_of(spec.get("inputs"), f"{where}.inputs")
    inputs: dict[str, Any] = {}
    for name, value in given.items():
        if declared and name not in declared:
            raise ConfigError(
                f"{where}.inputs.{name}", "is not an input of the component", f"have: {', '.join(declared)}"
            )
        kind = declared.get(name, {}).get("type") if isinstance(declared.get(name), dict) else None
        if isinstance(value, dict):
            inputs[name] = {"type": kind or "uri_folder", **value}
        elif kind in DATA_TYPES:
            inputs[name] = {"type": kind, "path": value}
        else:
            inputs[name] = value
    for name, declaration in declared.items():
        declaration = declaration if isinstance(declaration, dict) else {"default": declaration}
        if name in inputs:
            continue
        if "default" in declaration:
            default = declaration["default"]
            inputs[name] = (
                {"type": declaration["type"], "path": default} if declaration.get("type") in DATA_TYPES else default
            )
        elif not declaration.get("optional"):
            raise ConfigError(f"{where}.inputs.{name}", "is required by the component and not given")
    return inputs


def _bound_outputs(declared: dict[str, Any], spec: dict[str, Any], where: str) -> dict[str, dict[str, Any]]:
    given = mapping_of(spec.get("outputs"), f"{where}.outputs")
    outputs = {}
    for name in dict.fromkeys([*declared, *given]):
        if declared and name not in declared:
            raise ConfigError(
                f"{where}.outputs.{name}", "is not an output of the component", f"have: {', '.join(declared)}"
            )
        declaration = mapping_of(declared.get(name), f"{where}.outputs.{name}")
        value = given.get(name)
        output = {"type": declaration.get("type", "uri_folder")}
        output.update({"path": value} if isinstance(value, str) else mapping_of(value, f"{where}.outputs.{name}"))
        outputs[name] = output
    return outputs


def _in_order(nodes: list[Node], inputs: dict[str, Any], outputs: dict[str, Any]) -> dict[str, Node]:
    """The nodes, each after those it reads (file order otherwise); an unknown reference or a cycle is an error."""
    names = {node.name for node in nodes}
    for node in nodes:
        for match in BINDING.finditer(repr((node.job["inputs"], node.job["outputs"]))):
            kind, name, upstream, output = match.groups()
            where = f"jobs.{node.name}"
            if upstream is not None and upstream not in names:
                raise ConfigError(where, f"{match.group(0)} names no job", f"jobs: {', '.join(sorted(names))}")
            if upstream is not None and output not in next(n for n in nodes if n.name == upstream).job["outputs"]:
                raise ConfigError(where, f"{match.group(0)}: job {upstream} has no output {output}")
            if kind is not None and name not in (inputs if kind == "inputs" else outputs):
                raise ConfigError(where, f"{match.group(0)} names no pipeline {kind[:-1]}")
    ordered: dict[str, Node] = {}
    while len(ordered) < len(nodes):
        ready = [n for n in nodes if n.name not in ordered and all(up in ordered for up in n.upstream)]
        if not ready:
            stuck = sorted(n.name for n in nodes if n.name not in ordered)
            raise ConfigError("jobs", f"{', '.join(stuck)} read each other's outputs in a cycle")
        ordered[ready[0].name] = ready[0]
    return ordered


def _absolute_job(job: dict[str, Any], base: Path) -> dict[str, Any]:
    """A job or component with its local paths made absolute against `base` (the file's folder)."""
    job = dict(job)
    for key in ("inputs", "outputs"):
        if isinstance(job.get(key), dict):
            job[key] = {name: _absolute_data(spec, base) for name, spec in job[key].items()}
    if isinstance(job.get("code"), str):
        job["code"] = absolute(job["code"], base)
    task = job.get("task")
    if isinstance(task, dict):
        task = dict(task)
        if isinstance(task.get("code"), str):
            task["code"] = absolute(task["code"], base)
        elif isinstance(task.get("entry_script"), str):
            task["entry_script"] = absolute(task["entry_script"], base)
        job["task"] = task
    return job


def _absolute_data(spec: Any, base: Path) -> Any:
    if isinstance(spec, dict) and isinstance(spec.get("path"), str):
        return {**spec, "path": absolute(spec["path"], base)}
    return spec


def _with_value(declared: Any, value: Any, base: Path) -> Any:
    """An input's declaration with a new value (a data input's new path)."""
    if isinstance(declared, dict) and declared.get("type") in DATA_TYPES:
        return {**declared, "path": absolute(str(value), base)}
    return value


def _output(spec: Any, where: str, base: Path) -> dict[str, Any]:
    spec = _absolute_data(mapping_of(spec, where), base)
    return {"type": spec.get("type", "uri_folder"), "path": spec.get("path")}


def absolute(path: str, base: Path) -> str:
    """A local path made absolute against `base`; URLs, `azureml:` names and `${{...}}` bindings as they are."""
    if is_url(path) or path.startswith("azureml:") or "${{" in path or os.path.isabs(path):
        return path
    return os.path.normpath(base / path)
