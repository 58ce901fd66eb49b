"""Input fingerprints for reuse: a file's size and mtime, or (mode `content`) a hash of its bytes.

Light on purpose: workers import it to fingerprint the files they read.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Collection, Iterable, Iterator, Sequence
from pathlib import Path

from ..errors import InputError
from ..storage import objects as storage
from ..storage.objects import Stat, is_url

_BLOCK = 1 << 20
# Folders of a source tree that are not its code: caches (a run's own imports write __pycache__ beside the
# entry script) and version-control or environment state. Reuse keys of steps and command jobs skip them.
NOT_CODE_DIRS = frozenset(
    {"__pycache__", ".git", ".hg", ".svn", ".ipynb_checkpoints", ".pytest_cache", ".venv", ".venvs"}
)


def code_files(root: str | Path, skip: Collection[Path] = ()) -> Iterator[tuple[str, os.stat_result]]:
    """The files of a source tree with their stats, in a stable order: not in `NOT_CODE_DIRS`, not under a
    folder of `skip` (resolved paths: run and output folders inside it), none that vanished meanwhile."""
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in NOT_CODE_DIRS and (Path(folder) / d).resolve() not in skip)
        for name in sorted(files):
            path = os.path.join(folder, name)
            try:
                yield path, os.stat(path)
            except OSError:
                continue  # vanished or unreadable: not part of the code


def file_identity(path: str, stat: Stat | None, mode: str, name: str | None = None) -> bytes:
    """What identifies one file's content: `name` (default the path) with its size and mtime, or its hash."""
    return _identity(path, stat, mode, name).encode()


def files_fingerprint(paths: Sequence[str], stats: Iterable[Stat | None], mode: str) -> str:
    """The fingerprint of a file mini-batch (the planner and the worker compute it the same way)."""
    return fingerprint_of(paths, file_tokens(paths, stats, mode))


def file_tokens(paths: Iterable[str], stats: Iterable[Stat | None], mode: str) -> list[str]:
    """What identifies each file's content, without its path: `size\0mtime_ns`, or the content hash.
    Kept per file in the ledger, so a rerun can tell which file of a mini-batch changed."""
    known = list(stats)
    if mode == "stat" and None not in known:  # what a rerun's plan asks for every file it lists: inlined
        return [f"{stat.st_size}\0{stat.st_mtime_ns}" for stat in known if stat is not None]
    return [_token(path, stat, mode) for path, stat in zip(paths, known)]


def local_tokens(paths: Iterable[str]) -> list[str]:
    """The tokens of local files in mode `stat`: one `os.stat` each, in C (a worker does this for every
    file it runs, most of its own cost per mini-batch)."""
    return [f"{stat.st_size}\0{stat.st_mtime_ns}" for stat in map(os.stat, paths)]


def fingerprint_of(paths: Iterable[str], tokens: Iterable[str]) -> str:
    """The fingerprint of files from their tokens. One buffer is hashed per mini-batch: workers do
    this for every mini-batch they run."""
    text = "\n".join(map("\0".join, zip(paths, tokens)))  # joins in C: the hot path of every worker
    return hashlib.sha1((text + "\n").encode()).hexdigest()


def _identity(path: str, stat: Stat | None, mode: str, name: str | None = None) -> str:
    return f"{name or path}\0{_token(path, stat, mode)}\n"


def _token(path: str, stat: Stat | None, mode: str) -> str:
    if mode == "content":
        return content_hash(path)
    if stat is None:
        stat = os.stat(path) if not is_url(path) else storage.stat(path)
    return f"{stat.st_size}\0{stat.st_mtime_ns}"  # file_token, inlined: once per file in every worker


def file_token(stat: Stat) -> str:
    """A file's token in mode `stat` (what a listing gives for an object is enough)."""
    return f"{stat.st_size}\0{stat.st_mtime_ns}"


def content_hash(path: str) -> str:
    digest = hashlib.sha256()
    try:
        with storage.open_input(path) as file:
            while block := file.read(_BLOCK):
                digest.update(block)
    except OSError as exc:
        raise InputError(path, f"cannot read ({exc.strerror})") from None
    return digest.hexdigest()
