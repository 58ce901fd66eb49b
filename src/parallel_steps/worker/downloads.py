"""Local copies of the files that a worker's mini-batches name by URL (ParallelRunStep's download mode).

A mini-batch's objects are fetched together (storage/fetch.py) into a folder of their own, each
keeping its name, before `run()` gets their paths; the folder goes when the mini-batch is done.
While `run()` works on one mini-batch, those queued behind it (`prefetch`) are fetched in the
background, up to `PREFETCH_BYTES` ahead in all.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import TYPE_CHECKING

from ..inputs.minibatch import MiniBatch
from ..storage.objects import any_url, is_url

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

PREFETCH_BYTES = 256 << 20


class Downloads:
    """The download folders of one worker: `localize` for the mini-batch that runs, `prefetch` for the next."""

    def __init__(self, prefix: str):
        self._prefix = prefix
        self._root: str | None = None
        self._ahead: dict[int, tuple[int, Future[None]]] = {}  # mini-batch index -> (bytes, its prefetch)
        self._pool: ThreadPoolExecutor | None = None

    def localize(self, mini_batch: MiniBatch) -> list[str]:
        """Local paths of the mini-batch's files: its URLs fetched (or waited for, when prefetched)."""
        local, pairs = self._targets(mini_batch)
        ahead = self._ahead.pop(mini_batch.index, None)
        if ahead is not None:
            ahead[1].result()
        else:
            from ..storage.fetch import fetch_all  # asyncio and fsspec: only for a step whose files are URLs

            fetch_all(pairs)
        return local

    def prefetch(self, mini_batch: MiniBatch) -> None:
        """Start fetching the files of a mini-batch queued to run, if they fit within `PREFETCH_BYTES` ahead."""
        if mini_batch.kind != "files" or mini_batch.index in self._ahead or not any_url(mini_batch.paths):
            return
        ahead = sum(nbytes for nbytes, _ in self._ahead.values())
        if mini_batch.nbytes is None or ahead + mini_batch.nbytes > PREFETCH_BYTES:
            return
        from concurrent.futures import ThreadPoolExecutor

        from ..storage.fetch import fetch_all

        _, pairs = self._targets(mini_batch)
        self._pool = self._pool or ThreadPoolExecutor(1, thread_name_prefix="parallel-steps-prefetch")
        self._ahead[mini_batch.index] = (mini_batch.nbytes, self._pool.submit(fetch_all, pairs))

    def release(self, mini_batch: MiniBatch) -> None:
        """Remove a finished mini-batch's copies."""
        if self._root and mini_batch.index not in self._ahead:
            shutil.rmtree(self._folder(mini_batch), ignore_errors=True)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        if self._root:
            shutil.rmtree(self._root, ignore_errors=True)

    def _targets(self, mini_batch: MiniBatch) -> tuple[list[str], list[tuple[str, str]]]:
        """Each file's local path (a URL's copy keeps its name, in a folder per position, so that equal names
        never collide) and the (URL, copy) pairs to fetch."""
        folder = self._folder(mini_batch)
        local, pairs = [], []
        for position, path in enumerate(mini_batch.paths):
            if is_url(path):
                target = os.path.join(folder, str(position), path.rstrip("/").rsplit("/", 1)[-1])
                pairs.append((path, target))
                path = target
            local.append(path)
        return local, pairs

    def _folder(self, mini_batch: MiniBatch) -> str:
        if self._root is None:
            self._root = tempfile.mkdtemp(prefix=self._prefix)
        return os.path.join(self._root, str(mini_batch.index))
