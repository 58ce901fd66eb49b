"""`azureml://datastores/<name>/paths/<path>` URIs, resolved through a mapping of datastore names to
folders or fsspec URLs (`--set datastores.<name>=...`). One function, so that the mapping can move to
the storage layer (named datastores with their credentials) without its callers changing."""

from __future__ import annotations

import re

from ..errors import ConfigError

_URI = re.compile(r"^azureml://datastores/(?P<name>[^/]+)/paths/(?P<path>.*)$")
#: The datastore `${{default_datastore}}` names when the pipeline's `settings.default_datastore` does not.
DEFAULT_DATASTORE = "workspaceblobstore"


def resolve_datastore_uri(uri: str, datastores: dict[str, str], where: str) -> str:
    """The folder or URL an `azureml://datastores/...` URI names; any other value is returned unchanged.

    Raises:
        ConfigError: the URI names a datastore that `datastores` does not map (naming `where`).
    """
    match = _URI.match(uri)
    if match is None:
        return uri
    name, path = match.group("name"), match.group("path").strip("/")
    if name not in datastores:
        raise ConfigError(
            where,
            f"{uri} is on datastore {name!r}, which is not mapped here",
            f"map it: --set datastores.{name}=FOLDER_OR_URL, or give the path: --set {where}=PATH",
        )
    root = datastores[name].rstrip("/")
    return f"{root}/{path}" if path else root
