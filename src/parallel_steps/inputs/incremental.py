"""Sticky plans for file inputs: a rerun keeps the earlier run's mini-batches and cuts only what is new.

Mini-batches are cut from the listing by count, so one new file would shift every later
boundary and nothing after it could be reused. Instead, given the earlier plan (each
mini-batch's member files and their tokens), a rerun lists the inputs and:

- keeps every earlier mini-batch whose files are all still there and unchanged (same
  membership, so its committed result is reused, or it runs if it had none);
- cuts the files that are new, changed, or belonged to a mini-batch that lost a file into
  new mini-batches of exactly `batch_size` files (the last one may be smaller);
- drops deleted files (their rows are not in the new output).

Mini-batches are numbered in the order they are decided while the files are listed: an
earlier one when the last of its files is listed, a new one when it is full (a partial one
at the end of each input). Every earlier one still open is decided at the end of each input, so no
mini-batch holds files of two inputs. The same inputs and earlier plan give the same plan.

Memory stays bounded: the earlier plan is held as one text per mini-batch and one 8-byte
hash per file (numpy arrays), never a Python object per file for the whole input.
"""

from __future__ import annotations

import array
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple, TypeGuard

import numpy as np

from ..masking import mask_urls
from .datasets import Dataset, FileDataset
from .fingerprints import fingerprint_of
from .members import EarlierBatch, check_values, decode_checks, decode_members, token_checks
from .minibatch import MiniBatch
from .planner import iter_listed_runs
from .stat_ahead import tokens_ahead

_EXAMPLES = 5  # dropped mini-batches described in the diff


@dataclass
class PlanDiff:
    """What a rerun changes against the earlier plan, and why."""

    mini_batches_kept: int = 0
    mini_batches_new: int = 0
    mini_batches_dropped: int = 0
    inputs_new: int = 0
    inputs_changed: int = 0
    inputs_deleted: int = 0
    dropped: list[str] = field(default_factory=list)  # a few, with the reason


#: A file as listed: its path, size and token (`fingerprints.file_token`, or its hash in mode `content`).
_File = tuple[str, int, str]


class Planned(NamedTuple):
    """A mini-batch of the new plan, the earlier mini-batch it keeps (None: new), its files' checks
    (`members.token_checks`, as the ledger keeps them)."""

    mini_batch: MiniBatch
    kept: int | None
    checks: bytes


class _Earlier:
    """The earlier plan, indexed: which earlier mini-batch a path belonged to (by hash, confirmed by name).
    One text per earlier mini-batch and two 8-byte numbers per file."""

    def __init__(self, batches: Iterable[EarlierBatch]):
        self.batches: dict[int, EarlierBatch] = {}
        self.sizes: dict[int, int] = {}  # files per earlier mini-batch
        hashes, owners = array.array("q"), array.array("q")
        for batch in batches:
            members = decode_members(batch.members)
            self.batches[batch.idx] = batch
            self.sizes[batch.idx] = len(members)
            hashes.extend(map(hash, members))
            owners.extend(itertools.repeat(batch.idx, len(members)))
        order = np.argsort(np.frombuffer(hashes, dtype=np.int64), kind="stable")
        self._hashes = np.frombuffer(hashes, dtype=np.int64)[order]
        self._owners = np.frombuffer(owners, dtype=np.int64)[order]

    def owners(self, paths: list[str]) -> list[int]:
        """The earlier mini-batch of each path (-1: none). A hash collision is caught later by name."""
        if not len(self._hashes):
            return [-1] * len(paths)
        keys = np.fromiter(map(hash, paths), dtype=np.int64, count=len(paths))
        where = np.minimum(np.searchsorted(self._hashes, keys), len(self._hashes) - 1)
        found = self._hashes[where] == keys
        owners: list[int] = np.where(found, self._owners[where], -1).tolist()
        return owners


class IncrementalPlanner:
    """Plans file inputs against an earlier plan (see the module docstring); `diff` says what changed."""

    def __init__(self, datasets: list[FileDataset], batch_size: int, mode: str, earlier: Iterable[EarlierBatch]):
        self.datasets, self.batch_size, self.mode = datasets, batch_size, mode
        self._earlier = _Earlier(earlier)
        self.diff = PlanDiff()
        self._open: dict[int, list[_File]] = {}  # earlier index -> its files seen
        self._decided: set[int] = set()
        self._pending: list[_File] = []  # files waiting for a new mini-batch
        self._index = 0
        self.starts: list[int] = []  # the index each dataset's mini-batches start at

    def mini_batches(self) -> Iterator[Planned]:
        open_, decided, sizes = self._open, self._decided, self._earlier.sizes
        for dataset in self.datasets:
            self.starts.append(self._index)
            for run, run_sizes, tokens in tokens_ahead(iter_listed_runs(dataset.path), self.mode):
                for file, owner in zip(zip(run, run_sizes, tokens), self._earlier.owners(run)):  # per file: inlined
                    if owner < 0 or owner in decided:
                        self.diff.inputs_new += 1
                        self._pending.append(file)
                        yield from self._flush()
                        continue
                    seen = open_.setdefault(owner, [])
                    seen.append(file)
                    if len(seen) == sizes[owner]:
                        yield from self._decide(owner)
            for owner in list(open_):  # what is still open lost files (or never had all of them)
                yield from self._decide(owner)
            yield from self._flush(final=True)
        for index, batch in self._earlier.batches.items():  # earlier mini-batches none of whose files is left
            if index not in decided:
                self._drop(batch, deleted=self._earlier.sizes[index], changed=0)

    def _decide(self, owner: int) -> Iterator[Planned]:
        """Keep an earlier mini-batch whose files are all there unchanged; else its files go to new ones."""
        batch, seen = self._earlier.batches[owner], self._open.pop(owner)
        self._decided.add(owner)
        members = decode_members(batch.members)
        if [path for path, _, _ in seen] == members:  # the usual case: the same files, listed in the same order
            present, strays = seen, []
        else:
            names = set(members)
            present = [file for file in seen if file[0] in names]
            strays = [file for file in seen if file[0] not in names]  # a hash collision: new files
        paths = tuple(path for path, _, _ in present)
        tokens = [token for _, _, token in present]
        fingerprint = fingerprint_of(paths, tokens)
        deleted = len(members) - len(present)
        # The fingerprint covers every token in full: when it matches, no check needs a look.
        changed = 0 if batch.fingerprint == fingerprint else _changed(batch, members, paths, tokens, deleted)
        if deleted == 0 and changed == 0:
            self.diff.mini_batches_kept += 1
            # The same tokens as the earlier plan's: its checks are these files' checks.
            yield self._emit(present, tokens, kept=owner, fingerprint=fingerprint, checks=batch.checks)
        else:
            self._drop(batch, deleted, changed)
            self._pending += present
        self.diff.inputs_new += len(strays)
        self._pending += strays
        yield from self._flush()

    def _drop(self, batch: EarlierBatch, deleted: int, changed: int) -> None:
        self.diff.mini_batches_dropped += 1
        self.diff.inputs_deleted += deleted
        self.diff.inputs_changed += changed
        if len(self.diff.dropped) < _EXAMPLES:
            why = ", ".join(f"{n} {what}" for n, what in ((changed, "changed"), (deleted, "deleted")) if n)
            first = decode_members(batch.members)[0]
            self.diff.dropped.append(f"earlier mini-batch {batch.idx} ({mask_urls(first)} ..): {why} file(s)")

    def _flush(self, final: bool = False) -> Iterator[Planned]:
        while len(self._pending) >= self.batch_size or (final and self._pending):
            group, self._pending = self._pending[: self.batch_size], self._pending[self.batch_size :]
            self.diff.mini_batches_new += 1
            yield self._emit(group, [token for _, _, token in group], kept=None)

    def _emit(
        self,
        files: list[_File],
        tokens: list[str],
        kept: int | None,
        fingerprint: str | None = None,
        checks: bytes | None = None,
    ) -> Planned:
        paths = tuple(path for path, _, _ in files)
        mini_batch = MiniBatch(
            index=self._index,
            kind="files",
            paths=paths,
            fingerprint=fingerprint or fingerprint_of(paths, tokens),
            nbytes=sum(size for _, size, _ in files),
            items=len(paths),
        )
        self._index += 1
        return Planned(mini_batch, kept, token_checks(tokens) if checks is None else checks)


def _changed(batch: EarlierBatch, members: list[str], paths: tuple[str, ...], tokens: list[str], deleted: int) -> int:
    """How many of an earlier mini-batch's files present now changed, by their checks; at least one when none
    is missing and its fingerprint differs (the checks only count: the fingerprint decides)."""
    earlier_checks = decode_checks(batch.checks)
    by_path = dict(zip(members, earlier_checks)) if earlier_checks else {}
    changed = sum(1 for path, check in zip(paths, check_values(tokens)) if by_path and by_path[path] != check)
    return max(changed, 1) if deleted == 0 and batch.fingerprint is not None else changed


def is_incremental(datasets: list[Dataset], partition_keys: list[str] | None) -> TypeGuard[list[FileDataset]]:
    """Whether sticky planning applies: file inputs (all of `datasets`) not grouped by keys."""
    return not partition_keys and all(isinstance(d, FileDataset) for d in datasets)
