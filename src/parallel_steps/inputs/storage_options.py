"""Which fsspec options (credentials, endpoints) a URL is opened with, and how long storage errors are retried.

The step's `storage_options` map URL prefixes (`s3://bucket/in`, or a scheme alone, `abfs://`) to a
filesystem's keyword arguments; the longest prefix matching a URL wins. The driver sets them for the
run (`using`); workers get them, resolved, in their environment (`STORAGE_VARIABLE`), never in a
file of the run directory. An engine adapter feeds its own credentials (a connection) as a `Resolver`
(URL -> options) to `environment.storage_settings`, which asks it for each URL the step names.
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

#: URL -> the filesystem's keyword arguments (empty: fsspec's defaults, the process environment).
Resolver = Callable[[str], dict[str, Any]]


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
