"""`azureml://datastores/<name>/paths/<path>` URIs, resolved through a mapping of datastore names to folders or
fsspec URLs: the step's `datastores` field (a step file, a v2 job file, `--set`), a pipeline's
`--set datastores.<name>=...`, and, under both, `PARALLEL_STEPS_DATASTORES` (JSON) in the environment. The
credentials of a mapped store are the step's `storage_options` for its URL, as for any URL.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError

_URI = re.compile(r"^azureml://datastores/(?P<name>[^/]+)/paths(?:/(?P<path>.*))?$")
#: The datastore `${{default_datastore}}` names when the pipeline's `settings.default_datastore` does not.
DEFAULT_DATASTORE = "workspaceblobstore"
#: The environment's mapping, JSON: {"workspaceblobstore": "abfs://container@account.dfs.core.windows.net"}.
DATASTORES_VARIABLE = "PARALLEL_STEPS_DATASTORES"
#: The step's fields that hold paths (`arguments`: those that are a URI, whole).
PATH_FIELDS = ("inputs", "side_inputs", "models", "output", "arguments")
_HOW_STEP = "map it: datastores: {{{name}: FOLDER_OR_URL}} in the step, or {variable} in the environment"
_HOW_PIPELINE = "map it: --set datastores.{name}=FOLDER_OR_URL, or give the path: --set {where}=PATH"


def resolve_datastore_uri(uri: str, datastores: Mapping[str, str], where: str, how: str = _HOW_PIPELINE) -> str:
    """The folder or URL an `azureml://datastores/...` URI names; any other value is returned unchanged.

    Args:
        datastores: name -> folder or URL, over the environment's mapping.
        where: the field or key the URI is in, named by the error.
        how: the error's hint, with `{name}`, `{where}` and `{variable}` filled in.

    Raises:
        ConfigError: the URI names a datastore that neither mapping maps (naming `where`).
    """
    match = _URI.match(uri)
    if match is None:
        return uri
    name, path = match.group("name"), (match.group("path") or "").strip("/")
    mapping = {**environment_datastores(), **datastores}
    if name not in mapping:
        raise ConfigError(
            where,
            f"{uri} is on datastore {name!r}, which is not mapped here",
            how.format(name=name, where=where, variable=DATASTORES_VARIABLE),
        )
    root = mapping[name].rstrip("/")
    return f"{root}/{path}" if path else root


def environment_datastores() -> dict[str, str]:
    """The mapping `PARALLEL_STEPS_DATASTORES` holds ({} when unset)."""
    text = os.environ.get(DATASTORES_VARIABLE, "").strip()
    if not text:
        return {}
    try:
        mapping = json.loads(text)
    except json.JSONDecodeError:
        mapping = None
    if not isinstance(mapping, dict) or not all(isinstance(value, str) for value in mapping.values()):
        raise ConfigError(
            DATASTORES_VARIABLE,
            "is not a JSON mapping of datastore names to folders or URLs",
            'e.g. {"workspaceblobstore": "abfs://container@account.dfs.core.windows.net"}',
        )
    return {str(name): value for name, value in mapping.items()}


def resolve_step_paths(fields: dict[str, Any]) -> dict[str, Any]:
    """A step's fields with the datastore URIs of its path fields resolved through its `datastores` field
    (an invalid one is left to the field's own check)."""
    datastores = fields.get("datastores") or {}
    if not isinstance(datastores, Mapping):
        return fields
    resolved = dict(fields)
    for name in PATH_FIELDS:
        if name in fields:
            resolved[name] = _resolved(fields[name], datastores, name)
    return resolved


def _resolved(value: Any, datastores: Mapping[str, str], where: str) -> Any:
    if isinstance(value, str):
        return resolve_datastore_uri(value, datastores, where, _HOW_STEP)
    if isinstance(value, (list, tuple)):
        return [_resolved(item, datastores, where) for item in value]
    if isinstance(value, Mapping):
        return {key: _resolved(item, datastores, f"{where}.{key}") for key, item in value.items()}
    paths = getattr(value, "path", None)
    if isinstance(paths, list) and hasattr(value, "model_copy"):  # a FileDataset or TabularDataset
        return value.model_copy(update={"path": _resolved(paths, datastores, where)})
    return value
