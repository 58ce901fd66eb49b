"""Reading ahead: while `run()` works on one mini-batch, the worker reads the next one queued to it.

What is read ahead is what `run()` will be given (`inputs/loaders.load`): a table slice as its
DataFrame (Parquet row groups, CSV or JSONL byte ranges, rows by key), or the local copies of files
named by URLs (worker/downloads.py). Local files are not read ahead: `run()` gets their paths.

One mini-batch ahead, on one thread, and only one no larger than `limit` bytes as planned (the
`read_ahead` field; 0 turns it off). A mini-batch read ahead and then not run (the worker is stopped,
the run is canceled) costs only the read: its table is dropped, its copies go with the download folder.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..inputs.loaders import load
from ..inputs.minibatch import MiniBatch
from ..storage.objects import any_url
from .downloads import Downloads

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor


class ReadAhead:
    """The input of each mini-batch, read on a thread when it is next (`start`), else when it runs (`take`)."""

    def __init__(self, downloads: Downloads, limit: int):
        self._downloads, self._limit = downloads, limit
        self._ahead: tuple[int, Future[Any], int | None] | None = None  # (index, its read, the one that ran then)
        self._pool: ThreadPoolExecutor | None = None

    def start(self, mini_batch: MiniBatch, during: int | None = None) -> Future[Any] | None:
        """Read `mini_batch` now, on the thread, if it has anything to read and fits, while mini-batch `during`
        runs; returns the read, if it does."""
        if self._ahead is not None or not self._worth_it(mini_batch):
            return None
        from concurrent.futures import ThreadPoolExecutor  # a step that reads nothing ahead never imports it

        self._pool = self._pool or ThreadPoolExecutor(1, thread_name_prefix="parallel-steps-read-ahead")
        read = self._pool.submit(load, mini_batch, self._downloads.localize)
        self._ahead = (mini_batch.index, read, during)
        return read

    def take(self, mini_batch: MiniBatch) -> tuple[Any, bool, int | None]:
        """What `run()` gets for `mini_batch`; whether it was read ahead (waited for, if still reading), and
        while which mini-batch ran."""
        if self._ahead is not None and self._ahead[0] == mini_batch.index:
            _, read, during = self._ahead
            self._ahead = None
            return read.result(), True, during
        return load(mini_batch, self._downloads.localize), False, None

    def release(self, mini_batch: MiniBatch) -> None:
        """Remove a finished mini-batch's copies of files named by URLs."""
        self._downloads.release_index(mini_batch.index)

    def close(self) -> None:
        """Drop what was read ahead and not run (once its read ends: copies are removed whole), then the
        download folder."""
        self._ahead = None
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        self._downloads.close()

    def _worth_it(self, mini_batch: MiniBatch) -> bool:
        if not self._limit or mini_batch.nbytes > self._limit:
            return False
        return mini_batch.kind != "files" or any_url(mini_batch.paths)
