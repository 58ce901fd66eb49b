"""Transient storage errors retried with backoff: throttling (503 SlowDown, 429), a server error (5xx),
a refused or reset connection, a timeout. What a user must fix (no such object, access denied) is
raised at once.

The window is the run's `run_invocation_timeout` (`StorageSettings.retry_s`): an object store that
stays unreachable longer fails the attempt as any slow run() would.
"""

from __future__ import annotations

import errno
import random
import time
from collections.abc import Callable
from typing import TypeVar

from .options import current

T = TypeVar("T")

_FIRST_S, _MAX_S = 0.1, 5.0
_TRANSIENT_ERRNOS = {
    errno.EBUSY,  # s3fs's translation of 503 SlowDown
    errno.ECONNREFUSED,
    errno.ECONNRESET,
    errno.ECONNABORTED,
    errno.ETIMEDOUT,
    errno.EPIPE,
    errno.EAGAIN,
    errno.EHOSTUNREACH,
    errno.ENETUNREACH,
}
_TRANSIENT_STATUS = {408, 429, 500, 502, 503, 504}
# The exceptions of botocore, aiohttp, azure-core and fsspec that mean "the service did not answer (well)";
# matched by name, so that none of those packages is imported here.
_TRANSIENT_TYPES = {
    "EndpointConnectionError",
    "ConnectionClosedError",
    "ConnectTimeoutError",
    "ReadTimeoutError",
    "ResponseStreamingError",
    "ServerDisconnectedError",
    "ClientConnectorError",
    "ClientOSError",
    "ClientPayloadError",
    "ServiceRequestError",
    "ServiceResponseError",
    "IncompleteReadError",
    "FSTimeoutError",
}
_TRANSIENT_WORDS = ("SlowDown", "ServiceUnavailable", "Throttl", "RequestTimeout", "InternalError", "ServerBusy")


def retried(call: Callable[[], T], seconds: float | None = None) -> T:
    """`call()`, again after a transient error (see `Backoff`); the last error is raised."""
    backoff = Backoff(seconds)
    while True:
        try:
            return call()
        except Exception as exc:
            time.sleep(backoff.pause(exc))


class Backoff:
    """Exponential backoff (0.1 s doubling up to 5 s, jittered) for up to `seconds` (default: the run's
    retry window). One policy for the blocking and the asyncio callers."""

    def __init__(self, seconds: float | None = None):
        self.deadline = time.monotonic() + (current().retry_s if seconds is None else seconds)
        self._next = _FIRST_S

    def pause(self, exc: Exception) -> float:
        """How long to wait before trying again after `exc`; raises `exc` when it is not transient or the
        window is over."""
        left = self.deadline - time.monotonic()
        if left <= 0 or not is_transient(exc):
            raise exc
        pause, self._next = min(self._next * (0.5 + random.random() / 2), left), min(self._next * 2, _MAX_S)
        return pause


def is_transient(exc: BaseException) -> bool:
    """Whether an error (or one it was raised from) says the storage service failed for now."""
    seen: set[int] = set()
    error: BaseException | None = exc
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)):
            return False
        if isinstance(error, (ConnectionError, TimeoutError)) or type(error).__name__ in _TRANSIENT_TYPES:
            return True
        if isinstance(error, OSError) and error.errno in _TRANSIENT_ERRNOS:
            return True
        status = getattr(error, "status_code", None) or getattr(error, "status", None) or getattr(error, "code", None)
        if isinstance(status, int) and status in _TRANSIENT_STATUS:
            return True
        if any(word in str(error) for word in _TRANSIENT_WORDS):
            return True
        error = error.__cause__ or error.__context__
    return False
