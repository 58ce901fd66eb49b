"""Binding a pipeline node in one run: every `${{parent...}}` reference, `${{name}}` and
`${{default_datastore}}` replaced by a value, `azureml://datastores/...` resolved, and every output given
a place (an output without a path gets `<run>/jobs/<node>/outputs/<name>`, a folder or a file as its type
says), so that the node is a job that runs on its own."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..storage.datastores import DEFAULT_DATASTORE, resolve_datastore_uri
from ..storage.objects import is_url
from .pipeline import BINDING, DATA_TYPES, FOLDER_TYPES, Node, Pipeline

_EXPRESSIONS = re.compile(r"\$\{\{\s*(name|default_datastore)\s*\}\}")
#: Where outputs stand while a node's reuse key is computed: the key must not change with the run's folder.
PLACEHOLDER_ROOT = Path("/__pipeline_outputs__")


@dataclass
class Bindings:
    """What references resolve to in one pipeline run."""

    pipeline: Pipeline
    run_id: str
    run_dir: Path
    datastores: dict[str, str] = field(default_factory=dict)
    output_paths: dict[str, str] = field(default_factory=dict)  # "outputs.x" / "jobs.n.outputs.o" -> path given
    produced: dict[str, dict[str, str]] = field(default_factory=dict)  # node -> output -> where it is

    def pipeline_output(self, name: str) -> str:
        where = f"outputs.{name}"
        spec = self.pipeline.outputs[name]
        given = self.output_paths.get(where) or spec.get("path")
        return self.place(given, where) if given else str(self.run_dir / "outputs" / name)

    def node_outputs(self, node: Node, root: Path | None = None) -> dict[str, dict[str, Any]]:
        """The node's outputs with their places (`root`: the folder of outputs without a path, default the run's)."""
        outputs = {}
        for name, spec in node.job["outputs"].items():
            where = f"jobs.{node.name}.outputs.{name}"
            given = self.output_paths.get(where) or spec.get("path")
            if given:
                path = self.place(self.references(str(given), where), where)
            else:
                path = str((root or self.run_dir / "jobs" / node.name / "outputs") / name)
            outputs[name] = {**spec, "path": path}
        return outputs

    def place(self, path: str, where: str) -> str:
        path = _EXPRESSIONS.sub(self._expression, path)
        return resolve_datastore_uri(path, self.datastores, where)

    def _expression(self, match: re.Match[str]) -> str:
        if match.group(1) == "name":
            return self.run_id
        return str(self.pipeline.settings.get("default_datastore") or DEFAULT_DATASTORE).removeprefix("azureml:")

    def references(self, text: str, where: str) -> str:
        """`text` with its `${{parent...}}` references replaced by their values."""

        def value(match: re.Match[str]) -> str:
            resolved = self.resolve(match, where)
            return str(resolved["path"] if isinstance(resolved, dict) else resolved)

        return BINDING.sub(value, text)

    def resolve(self, match: re.Match[str], where: str) -> Any:
        """What one reference names: a literal, or {"type", "path"} of data."""
        kind, name, upstream, output = match.groups()
        if kind == "inputs":
            value = self.pipeline.inputs[name]
            if isinstance(value, dict):
                path = value.get("path")
                if path is None:
                    raise ConfigError(f"inputs.{name}", "has no path", f"give one: --set inputs.{name}=PATH")
                return {"type": value.get("type", "uri_folder"), "path": self.place(str(path), f"inputs.{name}")}
            return value
        if kind == "outputs":
            return {"type": self.pipeline.outputs[name]["type"], "path": self.pipeline_output(name)}
        given = self.output_paths.get(f"jobs.{upstream}.outputs.{output}")
        try:
            path = self.place(given, where) if given else self.produced[upstream][output]
        except KeyError:
            raise ConfigError(
                where,
                f"{match.group(0)} has not been produced by a run of this pipeline",
                f"run job {upstream} first, or give it: --set jobs.{upstream}.outputs.{output}=PATH",
            ) from None
        return {"type": _output_type(self.pipeline, upstream, output), "path": path}


def bind(node: Node, bindings: Bindings, outputs_root: Path | None = None) -> dict[str, Any]:
    """The node's job with every reference resolved (`outputs_root`: see `Bindings.node_outputs`): its inputs
    and outputs, and any other field (`resources.instance_count: ${{parent.inputs.nodes}}`, `mini_batch_size`,
    `retry_settings.max_retries`, ...), which takes the bound value with its type."""
    job = {
        key: _field(value, bindings, f"jobs.{node.name}.{key}")
        for key, value in node.job.items()
        if key not in ("inputs", "outputs")
    }
    job["inputs"] = {
        name: _input(value, bindings, f"jobs.{node.name}.inputs.{name}") for name, value in node.job["inputs"].items()
    }
    job["outputs"] = bindings.node_outputs(node, outputs_root)
    return job


def make_output_places(outputs: dict[str, dict[str, Any]]) -> None:
    """Create the local folders outputs are written to (a uri_file's parent), as Azure ML mounts them."""
    for spec in outputs.values():
        path = str(spec["path"])
        if is_url(path):
            continue
        folder = Path(path) if spec.get("type", "uri_folder") in FOLDER_TYPES else Path(path).parent
        folder.mkdir(parents=True, exist_ok=True)


def _field(value: Any, bindings: Bindings, where: str) -> Any:
    """A job field with its `${{parent...}}` references resolved: a whole-value reference becomes the value
    itself (an input's number stays a number; data, its path), one inside a text its text."""
    if isinstance(value, dict):
        return {key: _field(item, bindings, f"{where}.{key}") for key, item in value.items()}
    if isinstance(value, list):
        return [_field(item, bindings, where) for item in value]
    if not isinstance(value, str) or "${{" not in value:
        return value
    whole = BINDING.fullmatch(value.strip())
    if whole is None:
        return bindings.references(value, where)
    resolved = bindings.resolve(whole, where)
    return resolved["path"] if isinstance(resolved, dict) else resolved


def _input(value: Any, bindings: Bindings, where: str) -> Any:
    if isinstance(value, dict):
        path = value.get("path")
        if not isinstance(path, str):
            return value
        whole = BINDING.fullmatch(path.strip())
        resolved = bindings.resolve(whole, where) if whole else bindings.references(path, where)
        path = resolved["path"] if isinstance(resolved, dict) else str(resolved)
        return {**value, "path": bindings.place(path, f"{where}.path")}
    if isinstance(value, str):
        whole = BINDING.fullmatch(value.strip())
        if whole:
            return bindings.resolve(whole, where)
        return bindings.references(value, where)
    return value


def _output_type(pipeline: Pipeline, node: str, output: str) -> str:
    kind = pipeline.nodes[node].job["outputs"][output].get("type", "uri_folder")
    return kind if kind in DATA_TYPES else "uri_folder"
