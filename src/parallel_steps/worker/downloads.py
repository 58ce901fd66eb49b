"""Local copies of the files that a worker's mini-batches name by URL (ParallelRunStep's download mode).

A mini-batch's objects are fetched together (storage/fetch.py) into a folder of their own, each
keeping its name, before `run()` gets their paths; the folder goes when the mini-batch is done.
The mini-batch queued next may be fetched on the read-ahead thread (worker/read_ahead.py) while
one runs, so folders are made under a lock.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading

from ..inputs.minibatch import MiniBatch
from ..storage.objects import is_url

#: The folder a worker keeps its copies in, when its pool made it: the local pool removes it once the worker is
#: gone, which a worker killed with copies on disk cannot do itself. Else the worker makes one when needed.
FOLDER_VARIABLE = "PARALLEL_STEPS_DOWNLOADS"


class Downloads:
    """The download folders of one worker, one per mini-batch, in one temporary folder: the pool's
    (`FOLDER_VARIABLE`), else one made when first needed."""

    def __init__(self, prefix: str):
        self._prefix = prefix
        self._root: str | None = os.environ.get(FOLDER_VARIABLE) or None
        self._lock = threading.Lock()

    def localize(self, mini_batch: MiniBatch) -> list[str]:
        """Local paths of the mini-batch's files, its URLs fetched."""
        local, pairs = self._targets(mini_batch)
        from ..storage.fetch import fetch_all  # asyncio and fsspec: only for a step whose files are URLs

        fetch_all(pairs)
        return local

    def release_index(self, index: int) -> None:
        """Remove the copies of a finished mini-batch (or one read ahead and dropped)."""
        if self._root:
            shutil.rmtree(os.path.join(self._root, str(index)), ignore_errors=True)

    def close(self) -> None:
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
        with self._lock:
            if self._root is None:
                self._root = tempfile.mkdtemp(prefix=self._prefix)
        return os.path.join(self._root, str(mini_batch.index))
