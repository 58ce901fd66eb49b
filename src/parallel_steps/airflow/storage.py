"""Airflow adapter: Airflow's object storage and connections as the step's `storage_options`.

Inputs, side inputs, models and the output may be `ObjectStoragePath`s
(`ObjectStoragePath("s3://aws_default@bucket/in/")`), and a `storage_options` prefix may name a connection
instead of options (`{"s3://bucket": {"conn_id": "aws_default"}}`). When the task runs, a path becomes its URL
and the filesystem Airflow opens for its connection becomes the fsspec options of that URL: from then on
they are storage options like any other (masked everywhere, handed to workers in their environment only).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from airflow.sdk import ObjectStoragePath
from airflow.sdk.io import attach
from airflow.sdk.log import mask_secret

from ..errors import ConfigError
from ..storage.options import locations_as_urls

CONN_ID = "conn_id"  # the key of a `storage_options` entry that names a connection
# Option names whose values Airflow's task log masks (the filesystems' names for keys, tokens, passwords).
_SECRET_WORDS = ("secret", "token", "key", "password", "connection_string", "credential")


def is_storage_path(value: Any) -> bool:
    return isinstance(value, ObjectStoragePath)


def _url_of(value: Any) -> str | None:
    return value.as_uri() if isinstance(value, ObjectStoragePath) else None  # without the connection: s3://bucket/in


def with_connections(fields: dict[str, Any]) -> dict[str, Any]:
    """`fields` with `ObjectStoragePath`s as their URLs and the connections they and `storage_options`
    name as fsspec options (an option the task gives itself wins over its connection's)."""
    resolved, paths = locations_as_urls(fields, _url_of)
    given = fields.get("storage_options") or {}
    if not isinstance(given, Mapping):  # not options: the field's own check says so
        return resolved
    options = {prefix: _named(prefix, value) for prefix, value in given.items()}
    for url, path in paths.items():
        if path.conn_id and url not in options:
            options[url] = connection_options(path.fs, path.conn_id, url)
    if options:
        resolved["storage_options"] = options
    return resolved


def _named(prefix: str, value: Any) -> Any:
    """A `storage_options` entry; one that names a connection becomes that connection's options."""
    if not isinstance(value, Mapping) or CONN_ID not in value or "://" not in str(prefix):
        return value
    given = {key: item for key, item in value.items() if key != CONN_ID}
    filesystem = attach(urlsplit(prefix).scheme, conn_id=str(value[CONN_ID])).fs
    return {**connection_options(filesystem, str(value[CONN_ID]), prefix), **given}


def connection_options(filesystem: Any, conn_id: str, url: str) -> dict[str, Any]:
    """The fsspec options of the filesystem Airflow opened for `conn_id`, as JSON data a worker can open it
    with (an s3fs `session`, which cannot travel, becomes the keys it holds). Secret values are masked in
    the task log from here on.

    Raises:
        ConfigError: an option is an object that cannot reach a worker (naming the URL and the connection).
    """
    options = dict(filesystem.storage_options)
    session = options.pop("session", None)
    if session is not None:
        options = _merged(options, _session_options(session))
    try:
        json.dumps(options)
    except TypeError:
        odd = ", ".join(key for key, item in options.items() if not _is_json(item))
        raise ConfigError(
            "storage_options",
            f"{url}: connection {conn_id!r} opens the store with objects that cannot reach a worker ({odd})",
            "use a connection with a key and secret, or give the store's storage_options",
        ) from None
    _mask(options)
    return options


def _session_options(session: Any) -> dict[str, Any]:
    """An aiobotocore session (the amazon provider's) as s3fs keyword arguments: its keys as they are now,
    and its region."""

    async def frozen() -> Any:
        credentials = await session.get_credentials()
        return None if credentials is None else await credentials.get_frozen_credentials()

    credentials = asyncio.run(frozen())
    options: dict[str, Any] = {}
    if credentials is not None:
        options = {"key": credentials.access_key, "secret": credentials.secret_key}
        if credentials.token:
            options["token"] = credentials.token
    region = session.get_config_variable("region")
    if region:
        options["client_kwargs"] = {"region_name": region}
    return options


def _merged(options: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    merged = {**options, **more}
    if isinstance(options.get("client_kwargs"), dict) and "client_kwargs" in more:
        merged["client_kwargs"] = {**options["client_kwargs"], **more["client_kwargs"]}
    return merged


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value)
    except TypeError:
        return False
    return True


def _mask(options: Mapping[str, Any]) -> None:
    for key, value in options.items():
        if isinstance(value, Mapping):
            _mask(value)
        elif isinstance(value, str) and value and any(word in key.lower() for word in _SECRET_WORDS):
            mask_secret(value)
