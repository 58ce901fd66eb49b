"""Where data lives: local paths, or fsspec URLs (`s3://`, `gs://`, `abfs://`, `file://`, ...).

The planner lists through here (one detailed listing gives every object's size and
version: no request per object), workers read and fetch through here; everything else
only sees strings. Each URL is opened with the run's `storage_options` for its prefix,
and transient errors are retried (storage/retry.py). fsspec (and the filesystem's own
package, such as s3fs) is imported only when a URL is used.
"""

from __future__ import annotations

import functools
import io
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple, cast

from ..errors import InputError, first_line
from .options import current
from .retry import retried

GLOB_CHARS = set("*?[")
#: Stores whose put is atomic (an object appears only once it is whole): no temporary name needed.
_ATOMIC_PUT = {"s3", "s3a", "gs", "gcs", "abfs", "abfss", "az", "adl", "memory"}


class RemoteStat(NamedTuple):
    """What a fingerprint needs of a remote file, shaped like `os.stat_result`: its size and a
    version (ETag or modification time) that changes when its content does."""

    st_size: int
    st_mtime_ns: str


#: What `stat` gives: a local file's stat, or a remote object's size and version.
Stat = os.stat_result | RemoteStat


def is_url(path: str) -> bool:
    return "://" in path


def has_glob(path: str) -> bool:
    """Whether a path or URL is a glob pattern (an http(s) URL's `?` starts its query: not a pattern)."""
    if path.startswith(("http://", "https://")):
        path = path.split("?", 1)[0]
    return bool(GLOB_CHARS & set(path))


def any_url(paths: Iterable[str]) -> bool:
    """Whether any of `paths` is a URL, in one search (a worker asks it for every mini-batch)."""
    return "://" in "\n".join(paths)


def stat(path: str) -> Stat:
    """`os.stat` of a path, or the size and version of one URL's object (a request: listings give
    these for every object they list, see `list_detailed`); errors name the file."""
    try:
        if not is_url(path):
            return os.stat(path)
        filesystem, inner = filesystem_of(path)
        return remote_stat(retried(lambda: filesystem.info(inner)))
    except OSError as exc:
        raise InputError(path, f"cannot read ({getattr(exc, 'strerror', None) or first_line(exc)})") from None


def local_stats(paths: list[str]) -> list[Stat]:
    """`stat` of many local files, in C (a rerun's plan stats every file it lists); errors name the file."""
    try:
        return list(map(os.stat, paths))
    except OSError:
        return [stat(path) for path in paths]  # raises, naming the first file that cannot be read


def list_detailed(url: str) -> list[tuple[str, RemoteStat]]:
    """Every file a URL names (an object, a folder recursively, or a glob) with its size and version,
    sorted, from the store's listing (no request per object)."""
    filesystem, inner = filesystem_of(url)
    try:
        if has_glob(inner):
            infos: dict[str, dict[str, Any]] = {}
            for name, info in retried(lambda: filesystem.glob(inner, detail=True)).items():
                if info.get("type") == "directory":
                    infos.update(retried(functools.partial(filesystem.find, name, detail=True)))
                else:
                    infos[name] = info
        else:
            infos = retried(lambda: filesystem.find(inner, detail=True))
            if isinstance(infos, list):  # adlfs names a single object without its details
                infos = {name: retried(functools.partial(filesystem.info, name)) for name in infos}
    except (FileNotFoundError, NotADirectoryError):
        infos = {}
    except OSError as exc:
        raise InputError(url, f"cannot list ({getattr(exc, 'strerror', None) or first_line(exc)})") from None
    except Exception as exc:  # a storage library's own (botocore's NoCredentialsError is no OSError)
        raise InputError(url, f"cannot list ({type(exc).__name__}: {first_line(exc)})") from None
    bases = _glob_base(inner), _glob_base(url)
    return sorted(
        (_listed_url(filesystem, *bases, name), remote_stat(info))
        for name, info in infos.items()
        if info.get("type") != "directory" and not name.endswith("/")
    )


def list_url(url: str) -> list[str]:
    """The URLs of `list_detailed`."""
    return [listed for listed, _ in list_detailed(url)]


def _listed_url(filesystem: Any, inner_base: str, url_base: str, name: str) -> str:
    """A listed object's URL written as the user wrote the one listed (`abfs://c@account.../x` keeps its
    account, so its `storage_options` prefix still matches), else as fsspec writes it."""
    if name == inner_base:
        return url_base
    if name.startswith(inner_base + "/") and url_base.endswith(inner_base.split("/", 1)[-1]):
        return url_base + name[len(inner_base) :]
    unstripped: str = filesystem.unstrip_protocol(name)
    return unstripped


def _glob_base(path: str) -> str:
    """The folder a glob pattern starts in (the path itself, less a trailing `/`, when it is none)."""
    if not has_glob(path):
        return path.rstrip("/")
    head = path.split("://", 1)[-1]
    cut = min(head.find(c) for c in GLOB_CHARS if c in head) + len(path) - len(head)
    return path[:cut].rsplit("/", 1)[0]


def open_input(path: str, size: int | None = None) -> BinaryIO:
    """A seekable binary file reading a local path or a URL; `size` (from the listing) spares a URL the
    request that asks it. A URL's reads are range requests of exactly what is read (no read-ahead:
    pyarrow reads a Parquet footer, then only the column chunks of the row groups it needs)."""
    if not is_url(path):
        return open(path, "rb")
    filesystem, inner = filesystem_of(path)
    if size is None:
        size = int(retried(lambda: filesystem.info(inner))["size"])
    return cast(BinaryIO, _RangeFile(filesystem, inner, size))


def read_range(path: str, start: int, end: int) -> bytes:
    """Bytes [start, end) of a local file or a URL's object (one range request)."""
    if not is_url(path):
        with open(path, "rb") as file:
            file.seek(start)
            return file.read(end - start)
    filesystem, inner = filesystem_of(path)
    data: bytes = retried(lambda: filesystem.cat_file(inner, start=start, end=end))
    return data


class _RangeFile(io.RawIOBase):
    """A read-only file over one object of known size; each read is one range request."""

    def __init__(self, filesystem: Any, inner: str, size: int):
        self.filesystem, self.inner, self.size, self.position = filesystem, inner, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = max(0, base + offset)
        return self.position

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self.read(len(view))
        view[: len(data)] = data
        return len(data)

    def read(self, size: int | None = -1) -> bytes:
        start = self.position
        end = self.size if size is None or size < 0 else min(self.size, start + size)
        if end <= start:
            return b""
        data: bytes = retried(lambda: self.filesystem.cat_file(self.inner, start=start, end=end))
        self.position = start + len(data)
        return data

    def readall(self) -> bytes:
        return self.read(-1)


def upload(local: Path, url: str, last: str | None = None, check: Callable[[], None] | None = None) -> None:
    """Copy a local file, or every file under a local folder (same relative places), to a URL. Each object
    appears only whole: stores whose put is atomic get it directly, other filesystems a temporary name that
    is then renamed. `last` (a file name in the folder) goes last, so that once it is there, all is.
    `check`, called before each file, may raise to stop (a cancel)."""
    filesystem, inner = filesystem_of(url)
    files = [local] if local.is_file() else sorted(p for p in local.rglob("*") if p.is_file())
    files.sort(key=lambda path: path.name == last)
    atomic = _protocol(filesystem) in _ATOMIC_PUT
    made: set[str] = set()
    for path in files:
        if check is not None:
            check()
        target = inner if path == local else f"{inner.rstrip('/')}/{path.relative_to(local).as_posix()}"
        parent = filesystem._parent(target)
        if not atomic and parent not in made:
            filesystem.makedirs(parent, exist_ok=True)
            made.add(parent)
        if atomic:
            retried(functools.partial(filesystem.put_file, str(path), target))
        else:
            partial = f"{parent}/.partial-{os.urandom(8).hex()}-{target.rsplit('/', 1)[-1]}"
            retried(functools.partial(filesystem.put_file, str(path), partial))
            retried(functools.partial(filesystem.mv, partial, target))


def filesystem_of(url: str) -> tuple[Any, str]:
    """The fsspec filesystem of a URL, opened with the run's `storage_options` for it, and the path in it."""
    try:
        import fsspec
    except ImportError:
        raise InputError(
            url,
            "URLs need fsspec: pip install 'parallel-steps[fsspec]' and the filesystem's package (s3fs, gcsfs, adlfs)",
        ) from None
    try:
        filesystem, inner = fsspec.core.url_to_fs(url, **current().options_for(url))
    except (ImportError, ValueError, TypeError) as exc:
        raise InputError(url, f"cannot open ({first_line(exc)})") from None
    return filesystem, inner


def _protocol(filesystem: Any) -> str:
    protocol = filesystem.protocol
    return str(protocol if isinstance(protocol, str) else protocol[0])


def remote_stat(info: dict[str, Any]) -> RemoteStat:
    """An object's size and version from a listing's (or `info`'s) entry."""
    keys = ("ETag", "etag", "md5Hash", "mtime", "LastModified", "last_modified", "updated", "created")
    version = next((str(info[key]) for key in keys if info.get(key) is not None), "")
    return RemoteStat(int(info.get("size") or 0), version)
