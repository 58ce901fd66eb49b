"""Fetching many objects at once: a mini-batch's files, a side input's folder.

Object stores answer one request in milliseconds but take many at a time, so objects are fetched
together: on the filesystem's own event loop for async ones (s3fs, adlfs, gcsfs, http), at most
`_CONCURRENCY` requests in flight, else on a bounded thread pool. Each object is one GET
(no HEAD, no "is it a folder?"), and is retried on its own after a transient error.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .retry import Backoff, retried
from .storage import filesystem_of
from .storage_options import current

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
