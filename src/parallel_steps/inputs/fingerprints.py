"""Input fingerprints for reuse: a file's size and mtime, or (mode `content`) a hash of its bytes.

Light on purpose: workers import it to fingerprint the files they read.
"""

from __future__ import annotations

import hashlib
import os

from ..errors import InputError
from . import storage
from .storage import is_url

_BLOCK = 1 << 20


def file_identity(
    path: str, stat: os.stat_result | storage.RemoteStat | None, mode: str, name: str | None = None
) -> bytes:
    """What identifies one file's content: `name` (default the path) with its size and mtime, or its hash."""
    return _identity(path, stat, mode, name).encode()


def files_fingerprint(paths, stats, mode: str) -> str:
    """The fingerprint of a file mini-batch (the planner and the worker compute it the same way).
    One buffer is hashed per mini-batch: workers do this for every mini-batch they run."""
    return hashlib.sha1("".join([_identity(path, stat, mode) for path, stat in zip(paths, stats)]).encode()).hexdigest()


def _identity(path: str, stat, mode: str, name: str | None = None) -> str:
    if mode == "content":
        return f"{name or path}\0{content_hash(path)}\n"
    if stat is None:
        stat = os.stat(path) if not is_url(path) else storage.stat(path)
    return f"{name or path}\0{stat.st_size}\0{stat.st_mtime_ns}\n"


def content_hash(path: str) -> str:
    digest = hashlib.sha256()
    try:
        with storage.open_input(path) as file:
            while block := file.read(_BLOCK):
                digest.update(block)
    except OSError as exc:
        raise InputError(path, f"cannot read ({exc.strerror})") from None
    return digest.hexdigest()
