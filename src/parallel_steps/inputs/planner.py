"""The planner: datasets -> a stream of small `MiniBatch` descriptors, in a deterministic order.

Nothing here holds one object per input item for the whole input: files are listed
one folder at a time and grouped as they come. A descriptor names data (paths, a
byte range, row groups or key values); the worker reads the data itself.
"""

from __future__ import annotations

import bisect
import functools
import glob
import hashlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from stat import S_ISDIR
from typing import Any

from ..errors import ConfigError, InputError
from ..storage import objects as storage
from ..storage.objects import RemoteStat, Stat, has_glob, is_url, list_detailed
from .datasets import Dataset, FileDataset, TabularDataset
from .fingerprints import file_identity, file_token, files_fingerprint
from .minibatch import MiniBatch
from .partitions import PartitionFormat, below, hive_values
from .pieces import cut_file
from .tables import read_table, row_count, table_columns

_IGNORED_PREFIXES = (".", "_")  # like pyarrow.dataset: _SUCCESS, .crc files of Spark outputs
_RUN = 10_000  # paths listed at a time


@dataclass
class Planner:
    """Splits datasets into mini-batches.

    Args:
        datasets: the step's inputs (one type).
        batch_size: files per mini-batch, or bytes per mini-batch for tabular data.
        partition_keys: keys (columns, or keys of the paths); one mini-batch per distinct combination.
        fingerprint: `stat` (path, size, mtime) or `content` (sha256 of the bytes).
        defer_files: leave file mini-batches unfingerprinted (and unsized): their worker fingerprints
            them as it reads them, in parallel. What a run with nothing to reuse wants: listing a
            folder then costs no system call per file.
    """

    datasets: list[Dataset]
    batch_size: int
    partition_keys: list[str] | None = None
    fingerprint: str = "stat"
    defer_files: bool = False
    notes: list[str] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)  # the index each dataset's mini-batches start at

    def mini_batches(self) -> Iterator[MiniBatch]:
        index = 0
        for dataset in self.datasets:
            self.starts.append(index)
            if isinstance(dataset, FileDataset):
                pieces = self._file_key_batches(dataset) if self.partition_keys else self._file_batches(dataset)
            elif self.partition_keys:
                pieces = self._key_batches(dataset)
            else:
                pieces = self._tabular_batches(dataset)
            for piece in pieces:
                yield MiniBatch(index=index, **piece)
                index += 1

    # Files ---------------------------------------------------------------

    def _file_batches(self, dataset: FileDataset) -> Iterator[dict[str, Any]]:
        size = self.batch_size
        group: list[str] = []
        stats: list[RemoteStat | None] | None = None  # the listing's (None for a local file), once a URL is listed
        for run, listed in iter_listed_runs(dataset.path):
            if listed is not None and stats is None:
                stats = [None] * len(group)
            group += run
            if stats is not None:
                stats += listed if listed is not None else [None] * len(run)
            full = len(group) - len(group) % size
            for start in range(0, full, size):
                chunk = None if stats is None else stats[start : start + size]
                yield self._files_piece(tuple(group[start : start + size]), chunk)
            group = group[full:]
            stats = None if stats is None else stats[full:]
        if group:
            yield self._files_piece(tuple(group), stats)

    def _file_key_batches(self, dataset: FileDataset) -> Iterator[dict[str, Any]]:
        """One mini-batch per distinct combination of `partition_keys` in the paths (`partition_format`)."""
        if dataset.partition_format is None:  # the configuration refuses such a step
            raise ValueError("file inputs are partitioned by keys of their partition_format")
        keys, path_format = list(self.partition_keys or []), PartitionFormat(dataset.partition_format)
        combos: dict[tuple[Any, ...], list[tuple[str, RemoteStat | None]]] = {}
        for run, listed in iter_listed_runs(dataset.path):
            for path, stat in zip(run, listed if listed is not None else [None] * len(run)):
                values = _format_values(path_format, path)
                combos.setdefault(tuple(values[key] for key in keys), []).append((path, stat))
        for combo in sorted(combos, key=_nulls_last):
            files = combos[combo]
            piece = self._files_piece(tuple(path for path, _ in files), [stat for _, stat in files])
            yield dict(piece, keys=combo, read=dict(piece.get("read") or {}, key_columns=keys))

    def _files_piece(self, paths: tuple[str, ...], listed: Sequence[RemoteStat | None] | None) -> dict[str, Any]:
        """A file mini-batch. Deferred (a fresh run), local files are fingerprinted by their worker, and
        listed objects (`listed`: their stats, None for local files) travel with their tokens from the
        listing for the worker to fingerprint them."""
        if self.defer_files:
            if listed is None or all(stat is None for stat in listed):
                return dict(kind="files", paths=paths, items=len(paths), nbytes=None, fingerprint=None)
            tokens = tuple(None if stat is None else file_token(stat) for stat in listed)
            nbytes = sum(stat.st_size for stat in listed if stat is not None)
            return dict(
                kind="files", paths=paths, items=len(paths), nbytes=nbytes, fingerprint=None, read=dict(tokens=tokens)
            )
        stats = [
            storage.stat(path) if stat is None else stat for path, stat in zip(paths, listed or [None] * len(paths))
        ]
        return dict(
            kind="files",
            paths=paths,
            items=len(paths),
            nbytes=sum(s.st_size for s in stats),
            fingerprint=files_fingerprint(paths, stats, self.fingerprint),
        )

    def _file_identity(self, path: str, stat: Stat) -> bytes:
        return file_identity(path, stat, self.fingerprint)

    def _piece_fingerprint(self, path: str, stat: Stat, dataset: TabularDataset, *extra: Any) -> str:
        described: tuple[Any, ...] = (dataset.read_options, extra)
        if dataset.partition_format:  # only then: the fingerprints of earlier runs without one stay valid
            described += (dataset.partition_format,)
        return hashlib.sha1(self._file_identity(path, stat) + repr(described).encode()).hexdigest()

    # Tabular -------------------------------------------------------------

    def check_partition_keys(self) -> None:
        """Each partition key is a column of the first file of each table input, or a value of its path; raises
        ConfigError naming the key and the file otherwise (what planning would meet, found at once)."""
        for dataset in self.datasets:
            if not isinstance(dataset, TabularDataset) or not self.partition_keys:
                continue
            for path, stat, fmt, values in self._tabular_files(dataset):
                columns = [*table_columns(path, fmt, dataset.read_options, stat.st_size), *values]
                missing = [key for key in self.partition_keys if key not in columns]
                if missing:
                    raise ConfigError(
                        "partition_keys", f"{missing[0]!r} is not a column of {path}", f"columns: {', '.join(columns)}"
                    )
                break

    def _tabular_files(self, dataset: TabularDataset) -> Iterator[tuple[str, Stat, str, dict[str, Any]]]:
        """(path, stat, format, values from the path) of every file: the `partition_format`'s keys, else
        the hive folders (`key=value/`) below what the dataset names."""
        path_format = PartitionFormat(dataset.partition_format) if dataset.partition_format else None
        for spec in dataset.path:
            for path, stat in iter_files([spec], skip_hidden=True):
                try:
                    fmt = dataset.format_of(path)
                except ValueError as exc:
                    raise InputError(path, str(exc).split(": ", 1)[-1]) from None
                values = _format_values(path_format, path) if path_format else hive_values(path, spec)
                yield path, stat, fmt, values

    def _tabular_batches(self, dataset: TabularDataset) -> Iterator[dict[str, Any]]:
        for path, stat, fmt, values in self._tabular_files(dataset):
            partitions = dict(partitions=(values,)) if values else {}
            fingerprint = functools.partial(self._piece_fingerprint, path, stat, dataset)
            pieces = cut_file(path, stat.st_size, fmt, dataset.read_options, self.batch_size, self.notes, fingerprint)
            for piece in pieces:
                yield dict(piece, read={**piece["read"], **partitions}) if partitions else piece

    def _key_batches(self, dataset: TabularDataset) -> Iterator[dict[str, Any]]:
        """One mini-batch per distinct combination of `partition_keys` across the dataset; a key is a
        column of the files or a value of their paths (hive folders, `partition_format`). Its fingerprint
        covers only the files holding that combination: a new or changed file reruns only its groups."""
        keys = list(self.partition_keys or [])
        combos: dict[tuple[Any, ...], list[Any]] = {}
        identities: dict[str, bytes] = {}
        for path, stat, fmt, values in self._tabular_files(dataset):
            identities[path] = self._file_identity(path, stat)
            in_file = [key for key in keys if key not in values]
            if in_file:
                table = read_table(path, fmt, dataset.read_options, columns=in_file, size=stat.st_size)
                counts = table.group_by(in_file).aggregate([([], "count_all")]).to_pylist()
            else:
                counts = [{"count_all": row_count(path, fmt, dataset.read_options, stat.st_size)}]
            for row in counts:
                if not row["count_all"]:
                    continue
                combo = tuple(values[key] if key in values else row[key] for key in keys)
                entry = combos.setdefault(combo, [0, [], [], [], []])
                entry[0] += row["count_all"]
                entry[1].append(path)
                entry[2].append(fmt)
                entry[3].append(stat.st_size)
                entry[4].append(values)
        for combo in sorted(combos, key=_nulls_last):
            rows, paths, formats, sizes, partitions = combos[combo]
            files = b"".join(identities[path] for path in paths)
            fingerprint = hashlib.sha1(files + repr((keys, combo, dataset.read_options)).encode()).hexdigest()
            read = dict(options=dataset.read_options, key_columns=keys, formats=tuple(formats), sizes=tuple(sizes))
            if any(partitions):
                read["partitions"] = tuple(partitions)
            yield dict(
                kind="keys",
                paths=tuple(paths),
                keys=combo,
                items=rows,
                nbytes=sum(sizes),
                read=read,
                fingerprint=fingerprint,
            )


def _format_values(path_format: PartitionFormat, path: str) -> dict[str, Any]:
    values = path_format.values(path)
    if values is None:
        raise InputError(path, f"does not match partition_format {path_format.text!r}")
    return values


def _nulls_last(combo: tuple[Any, ...]) -> tuple[tuple[bool, Any], ...]:
    return tuple((value is None, 0 if value is None else value) for value in combo)


# Listing -----------------------------------------------------------------


def iter_files(paths: list[str], skip_hidden: bool = False) -> Iterator[tuple[str, Stat]]:
    """(path, stat) of every file named by `paths` (files, folders recursively, globs), in sorted order;
    a URL's stats come from its listing."""
    for run, stats in iter_listed_runs(paths, skip_hidden):
        if stats is None:
            for path in run:
                yield path, storage.stat(path)
        else:
            yield from zip(run, stats)


def iter_file_runs(paths: list[str], skip_hidden: bool = False) -> Iterator[list[str]]:
    """The files of `iter_files` as lists of consecutive paths (a folder's files between its
    subfolders), so that grouping them into mini-batches is slicing, not a step per file."""
    for run, _ in iter_listed_runs(paths, skip_hidden):
        yield run


def iter_listed_runs(
    paths: list[str], skip_hidden: bool = False
) -> Iterator[tuple[list[str], list[RemoteStat] | None]]:
    """The runs of `iter_file_runs`, each with its files' stats where the listing gave them (URLs: one
    detailed listing); None for local files, which are statted only when a fingerprint is wanted."""
    for spec in paths:
        is_glob = has_glob(spec)
        if is_url(spec):
            listed = [(url, st) for url, st in list_detailed(spec) if not (skip_hidden and _hidden(url, spec))]
            if not listed:
                raise InputError(spec, "matches no files" if is_glob else "no such file or folder")
            yield [url for url, _ in listed], [st for _, st in listed]
            continue
        if is_glob:
            matches = sorted(glob.iglob(spec, recursive=True))
        elif os.path.lexists(spec):
            matches = [spec]
        else:
            raise InputError(spec, "no such file or folder")
        found = False
        for match in matches:
            for run in _walk(match, skip_hidden):
                found = True
                yield run, None
        if not found:
            raise InputError(spec, "matches no files" if is_glob else "folder has no files")


def _walk(path: str, skip_hidden: bool) -> Iterator[list[str]]:
    """Files at or under `path` (a local one) in name order."""
    status = storage.stat(path)
    if isinstance(status, os.stat_result) and S_ISDIR(status.st_mode):
        yield from _walk_folder(path, skip_hidden)
    else:
        yield [path]


def _walk_folder(folder: str, skip_hidden: bool) -> Iterator[list[str]]:
    """Holds one folder's sorted names at a time, never the whole tree; subfolders are walked
    where their names fall among the files."""
    files: list[str] = []
    folders: list[str] = []
    try:
        with os.scandir(folder) as scan:
            for entry in scan:
                if not (skip_hidden and entry.name.startswith(_IGNORED_PREFIXES)):
                    (folders if entry.is_dir() else files).append(entry.name)
    except OSError as exc:
        raise InputError(folder, f"cannot list folder ({exc.strerror})") from None
    files.sort()
    folders.sort()
    prefix, start = os.path.join(folder, ""), 0
    for name in folders:
        end = bisect.bisect_left(files, name, start)
        yield from _paths(prefix, files, start, end)
        start = end
        yield from _walk_folder(prefix + name, skip_hidden)
    yield from _paths(prefix, files, start, len(files))


def _paths(prefix: str, names: list[str], start: int, end: int) -> Iterator[list[str]]:
    """Full paths of names[start:end], a bounded run at a time: a folder of a million files is held once,
    as names, not twice."""
    for first in range(start, end, _RUN):
        yield [prefix + name for name in names[first : min(end, first + _RUN)]]


def _hidden(url: str, spec: str) -> bool:
    """Whether a listed object lies in or is a hidden entry below what the user named (`_temporary/`
    of a Spark output, `.crc` files), as local folders skip them at every level."""
    return any(part.startswith(_IGNORED_PREFIXES) for part in below(url, spec).split("/") if part)
