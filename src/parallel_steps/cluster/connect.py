"""Connecting the driver to Ray: the cluster it is already connected to, `ray_address`, RAY_ADDRESS,
or a local Ray started for the run (and stopped after it)."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ray

from ..errors import ConfigError
from .access import granted

_CONNECT_S = 10.0  # how long a cluster address may refuse connections before the run gives up
_PROBE_S = 1.0
_AUTH_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")  # what ray.init may change (the mode) or this sets


class RayConnection:
    """`open()` connects (or finds the connection this process has); `close()` undoes what open did."""

    def __init__(self, address: str | None, gpus: int):
        self.address = address or os.environ.get("RAY_ADDRESS")
        self.gpus = gpus
        self.owned = False  # this run connected (or started Ray), so it disconnects
        self.started_local = False  # no address: a local Ray only this run uses
        self._saved_env: dict[str, str | None] = {}
        self._session_dir: str | None = None  # the local Ray's session folder (in $TMPDIR/ray), removed by close()

    def open(self) -> None:
        if ray.is_initialized():
            return
        quiet: dict[str, Any] = dict(logging_level=logging.WARNING, log_to_driver=False)
        self._saved_env = {name: os.environ.get(name) for name in _AUTH_ENV}
        access = granted(self.address)
        if access and access.token:  # a token from a connection; Ray reads one from the environment only
            os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=access.token)
        with _own_sigterm_handler():
            self._init(quiet)
        self.owned = True
        self.started_local = not self.address

    def _init(self, quiet: dict[str, Any]) -> None:
        if self.address:
            check_reachable(self.address)
            try:
                ray.init(address=self.address, **quiet)
            except Exception as exc:  # Ray raises ConnectionError, RuntimeError, its own errors
                lines = [line for line in str(exc).splitlines() if line.strip()] or [type(exc).__name__]
                raise ConfigError(
                    "ray_address",
                    f"cannot connect to the Ray cluster at {self.address}: {lines[-1]}",
                    "check the address; a token-protected cluster also needs RAY_AUTH_MODE=token and RAY_AUTH_TOKEN",
                ) from None
        else:
            # "local" never attaches to a cluster someone else started on this machine.
            context = ray.init(address="local", num_gpus=self.gpus, include_dashboard=False, **quiet)
            self._session_dir = context.address_info.get("session_dir")

    def close(self) -> None:
        if self.owned:
            ray.shutdown()
            if self._session_dir:
                _remove_session(Path(self._session_dir))
            for name, value in self._saved_env.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def _remove_session(session: Path) -> None:
    """A local Ray's session folder (its sockets, logs and spill files), once it has stopped, and what points
    at it in Ray's temporary folder: nothing the run made stays in $TMPDIR. The run's own logs have what its
    workers wrote."""
    shutil.rmtree(session, ignore_errors=True)
    latest = session.parent / "session_latest"
    if latest.is_symlink() and not latest.exists():  # it pointed at the session just removed
        latest.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        session.parent.rmdir()  # Ray's folder, when no other session is in it


@contextlib.contextmanager
def _own_sigterm_handler() -> Iterator[None]:
    """Keep the caller's own SIGTERM handler: `ray.init` replaces it with `sys.exit`, which would end a
    driver (a detached run, a Ray job that Ray stops, `parallel-steps node`) without canceling its run."""
    handler = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        if callable(handler) and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, handler)


def check_reachable(address: str) -> None:
    """Fail fast on a `host:port` nothing listens on: Ray itself keeps retrying for minutes."""
    match = re.fullmatch(r"([\w.\-]+):(\d+)", address)
    if not match:
        return  # "auto", "ray://...": left to Ray
    deadline = time.monotonic() + _CONNECT_S
    while True:
        try:
            socket.create_connection((match.group(1), int(match.group(2))), timeout=_PROBE_S).close()
            return
        except OSError as exc:
            if time.monotonic() >= deadline:
                raise ConfigError(
                    "ray_address",
                    f"nothing accepts connections at {address} ({exc.strerror or exc})",
                    "start the cluster, or check the address and RAY_ADDRESS",
                ) from None
            time.sleep(_PROBE_S)
