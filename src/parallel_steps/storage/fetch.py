"""Fetching many objects at once: a mini-batch's files, a side input's folder (`download`, `copy_once`).

Object stores answer one request in milliseconds but take many at a time, so objects are fetched
together: on the filesystem's own event loop for async ones (s3fs, adlfs, gcsfs, http), at most
`_CONCURRENCY` requests in flight, else on a bounded thread pool. Each object is one GET
(no HEAD, no "is it a folder?"), and is retried on its own after a transient error.
"""

from __future__ import annotations

import asyncio
import fcntl
import functools
import os
import shutil
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .objects import filesystem_of, is_url, list_url
from .options import current
from .retry import Backoff, retried

_CONCURRENCY = 32


def fetch_all(pairs: Sequence[tuple[str, str]]) -> None:
    """Copy each (URL, local path) pair, creating the local folders; raises the first error that is not
    transient or outlasts the retry window."""
    for _, target in pairs:
        os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
    window = current().retry_s  # read here: the event loop and the pool's threads have contexts of their own
    groups: dict[int, tuple[Any, list[tuple[str, str]]]] = {}
    for url, target in pairs:
        filesystem, inner = filesystem_of(url)
        groups.setdefault(id(filesystem), (filesystem, []))[1].append((inner, target))
    for filesystem, items in groups.values():
        if getattr(filesystem, "async_impl", False):
            from fsspec.asyn import sync

            sync(filesystem.loop, _gather, filesystem, items, window)
        else:
            with ThreadPoolExecutor(min(_CONCURRENCY, len(items))) as pool:
                list(pool.map(functools.partial(_get_one, filesystem, window), items))


def _get_one(filesystem: Any, window: float, item: tuple[str, str]) -> None:
    retried(functools.partial(filesystem.get_file, *item), window)


async def _gather(filesystem: Any, items: list[tuple[str, str]], window: float) -> None:
    limit = asyncio.Semaphore(_CONCURRENCY)

    async def one(inner: str, target: str) -> None:
        backoff = Backoff(window)
        async with limit:
            while True:
                try:
                    await filesystem._get_file(inner, target)
                    return
                except Exception as exc:
                    await asyncio.sleep(backoff.pause(exc))

    tasks = [asyncio.ensure_future(one(inner, target)) for inner, target in items]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:  # after a failure, the rest stop too
            task.cancel()


def download(url: str, target: str) -> None:
    """Copy a URL's object, or its folder recursively, to a local path (one listing, then the objects
    fetched together)."""
    listed = list_url(url)
    if listed == [url.rstrip("/")]:
        fetch_all([(url, target)])
        return
    base = url.rstrip("/") + "/"
    fetch_all([(item, os.path.join(target, item[len(base) :])) for item in listed if item.startswith(base)])
    os.makedirs(target, exist_ok=True)


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
