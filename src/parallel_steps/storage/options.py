"""Which fsspec options (credentials, endpoints) a URL is opened with, and how long storage errors are retried.

The step's `storage_options` map URL prefixes (`s3://bucket/in`, or a scheme alone, `abfs://`) to a
filesystem's keyword arguments; the longest prefix matching a URL wins. The driver sets them for the
run (`using`); workers get them, resolved, in their environment (`STORAGE_VARIABLE`), never in a
file of the run directory. An engine adapter puts its own credentials (an Airflow connection, a Prefect
block) into `storage_options`, as the options of the URLs they open.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

#: The workers' environment variable holding the run's `StorageSettings` as JSON.
STORAGE_VARIABLE = "PARALLEL_STEPS_STORAGE"
DEFAULT_RETRY_S = 60.0
#: The fields that name where data is, where an engine may give its own storage objects instead of URLs.
LOCATION_FIELDS = ("inputs", "side_inputs", "models", "output")


@dataclass(frozen=True)
class StorageSettings:
    """The options by URL prefix (values resolved) and the seconds transient errors are retried for."""

    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    retry_s: float = DEFAULT_RETRY_S

    def options_for(self, url: str) -> dict[str, Any]:
        """The options of the longest prefix of `url` (a prefix ends at a `/` or is the whole URL, so
        `s3://data` does not match `s3://database/x`); none: fsspec's defaults."""
        best = ""
        for prefix in self.options:
            if len(prefix) > len(best) and matches(prefix, url):
                best = prefix
        return dict(self.options[best]) if best else {}

    def to_environment(self) -> dict[str, str]:
        """The variable that carries these settings to a worker."""
        return {STORAGE_VARIABLE: json.dumps({"options": dict(self.options), "retry_s": self.retry_s})}


def matches(prefix: str, url: str) -> bool:
    if prefix.endswith("://"):
        return url.startswith(prefix)
    base = prefix.rstrip("/")
    return url == base or url.startswith(base + "/")


_current: contextvars.ContextVar[StorageSettings | None] = contextvars.ContextVar("storage_settings", default=None)


@contextlib.contextmanager
def using(settings: StorageSettings) -> Iterator[StorageSettings]:
    """Open URLs with `settings` in this block (the driver of one run; threads keep their own)."""
    token = _current.set(settings)
    try:
        yield settings
    finally:
        _current.reset(token)


def current() -> StorageSettings:
    """The settings of the run in this context, else those a worker got in its environment, else none."""
    settings = _current.get()
    if settings is not None:
        return settings
    return _from_environment(os.environ.get(STORAGE_VARIABLE, ""))


@functools.lru_cache(maxsize=4)
def _from_environment(text: str) -> StorageSettings:
    if not text:
        return StorageSettings()
    data = json.loads(text)
    return StorageSettings(data.get("options") or {}, float(data.get("retry_s") or DEFAULT_RETRY_S))


def locations_as_urls(
    fields: Mapping[str, Any], url_of: Callable[[Any], str | None]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """`fields` with each engine storage object in a location field (an Airflow `ObjectStoragePath`, a Prefect
    bucket block; `url_of` gives its URL, None for any other value) as its URL, and those objects by URL: an
    adapter turns their credentials into the options of their URLs."""
    found: dict[str, Any] = {}

    def as_url(value: Any) -> Any:
        url = url_of(value)
        if url is not None:
            found[url] = value
            return url
        if isinstance(value, (list, tuple)):
            return [as_url(item) for item in value]
        if isinstance(value, Mapping):
            return {key: as_url(item) for key, item in value.items()}
        return value

    return {name: as_url(value) if name in LOCATION_FIELDS else value for name, value in fields.items()}, found
