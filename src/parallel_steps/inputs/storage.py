"""Where data lives: local paths, or fsspec URLs (`s3://`, `gs://`, `abfs://`, `file://`, ...).

The planner lists and fingerprints through here, workers open and download through
here; everything else only sees strings. fsspec (and the filesystem's own package,
such as s3fs) is imported only when a URL is used.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from ..errors import InputError, first_line

GLOB_CHARS = set("*?[")


class RemoteStat(NamedTuple):
    """What a fingerprint needs of a remote file, shaped like `os.stat_result`: its size and a
    version (ETag or modification time) that changes when its content does."""

    st_size: int
    st_mtime_ns: str


#: What `stat` gives: a local file's stat, or a remote object's size and version.
Stat = os.stat_result | RemoteStat


def is_url(path: str) -> bool:
    return "://" in path


def any_url(paths: Iterable[str]) -> bool:
    """Whether any of `paths` is a URL, in one search (a worker asks it for every mini-batch)."""
    return "://" in "\n".join(paths)


def stat(path: str) -> Stat:
    """`os.stat` of a path, or the size and version of a URL's object; errors name the file."""
    try:
        if not is_url(path):
            return os.stat(path)
        filesystem, inner = _filesystem(path)
        return _remote_stat(filesystem.info(inner))
    except OSError as exc:
        raise InputError(path, f"cannot read ({getattr(exc, 'strerror', None) or first_line(exc)})") from None


def list_url(url: str) -> list[str]:
    """Every file a URL names (an object, a folder recursively, or a glob), as sorted URLs."""
    filesystem, inner = _filesystem(url)
    matches = filesystem.glob(inner) if GLOB_CHARS & set(inner) else [inner]
    files: list[str] = []
    for match in matches:
        if filesystem.isdir(match):
            files += filesystem.find(match)
        elif filesystem.exists(match):
            files.append(match)
    return sorted(filesystem.unstrip_protocol(file) for file in files)


def open_input(path: str) -> BinaryIO:
    """A binary file object reading a local path or a URL (seekable: pyarrow reads Parquet footers)."""
    if not is_url(path):
        return open(path, "rb")
    filesystem, inner = _filesystem(path)
    file: BinaryIO = filesystem.open(inner, "rb")
    return file


def download(url: str, target: str) -> None:
    """Copy a URL's object, or its folder recursively, to a local path."""
    filesystem, inner = _filesystem(url)
    filesystem.get(inner, target, recursive=filesystem.isdir(inner))


def upload(local: Path, url: str) -> None:
    """Copy a local file, or every file under a local folder (same relative places), to a URL."""
    filesystem, inner = _filesystem(url)
    files = [local] if local.is_file() else sorted(p for p in local.rglob("*") if p.is_file())
    for path in files:
        target = inner if path == local else f"{inner.rstrip('/')}/{path.relative_to(local).as_posix()}"
        filesystem.makedirs(filesystem._parent(target), exist_ok=True)
        filesystem.put_file(str(path), target)


def copy_once(source: str, folder: Path) -> str:
    """A local copy of a side input (a path or a URL) in `folder`, made once however many workers ask:
    the first copies while the others wait on a lock. Returns the copy's path."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / (Path(source.rstrip("/")).name or "side_input")
    with open(folder.parent / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists():
            partial = folder / f".partial-{os.getpid()}"
            if is_url(source):
                download(source, str(partial))
            elif os.path.isdir(source):
                shutil.copytree(source, partial, symlinks=True)
            else:
                shutil.copy2(source, partial)
            os.rename(partial, target)
    return str(target)


def _filesystem(url: str) -> tuple[Any, str]:
    try:
        import fsspec
    except ImportError:
        raise InputError(
            url,
            "URLs need fsspec: pip install 'parallel-steps[fsspec]' and the filesystem's package (s3fs, gcsfs, adlfs)",
        ) from None
    try:
        filesystem, inner = fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as exc:
        raise InputError(url, f"cannot open ({first_line(exc)})") from None
    return filesystem, inner


def _remote_stat(info: dict[str, Any]) -> RemoteStat:
    keys = ("ETag", "etag", "md5Hash", "mtime", "LastModified", "last_modified", "updated", "created")
    version = next((str(info[key]) for key in keys if info.get(key) is not None), "")
    return RemoteStat(int(info.get("size") or 0), version)
