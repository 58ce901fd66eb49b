"""Cutting one tabular file into mini-batches: Parquet along its row groups, CSV and JSON lines into
byte ranges that end at a record boundary.

Apart from the planner (which lists the files and decides which are cut) because
each format has its own rules for where a cut may fall, and the reading they need
(Parquet metadata, a scan for record boundaries) is no concern of listing. A piece
is the keyword arguments of a `MiniBatch` but its index; `fingerprint(*extra)` gives
the fingerprint of the piece of this file that `extra` (row groups, a byte range) names.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..errors import InputError, first_line
from ..masking import mask_urls
from ..storage.objects import open_input
from .tables import plan_schema, record_boundaries


def cut_file(
    path: str,
    size: int,
    fmt: str,
    options: dict[str, Any],
    batch_size: int,
    notes: list[str],
    fingerprint: Callable[..., str],
) -> Iterable[dict[str, Any]]:
    """The pieces of one file of `size` bytes in format `fmt`: a Parquet file's row groups, a text file
    of at most `batch_size` bytes whole, a larger one in byte ranges."""
    if fmt == "parquet":
        return _parquet_pieces(path, size, batch_size, notes, fingerprint)
    if size <= batch_size:
        read = dict(options=options, size=size)
        return [dict(kind=fmt, paths=(path,), items=None, nbytes=size, read=read, fingerprint=fingerprint())]
    return _text_pieces(path, size, fmt, options, batch_size, fingerprint)


def _parquet_pieces(
    path: str, size: int, batch_size: int, notes: list[str], fingerprint: Callable[..., str]
) -> Iterator[dict[str, Any]]:
    """Runs of whole row groups of about `batch_size` bytes (a row group is never split); a file with
    too few row groups for its size gets a note in `notes` saying how to split it further. Each piece
    carries the file's size (`read["size"]`): its worker then opens it without asking."""
    import pyarrow.parquet as pq

    try:
        with open_input(path, size) as file:
            meta = pq.ParquetFile(file).metadata
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ...
        raise InputError(path, f"not a readable Parquet file ({first_line(exc)})") from None
    groups = [(i, meta.row_group(i).total_byte_size, meta.row_group(i).num_rows) for i in range(meta.num_row_groups)]
    wanted = -(-size // batch_size)
    if wanted > 1 and len(groups) < wanted:
        notes.append(
            f"{mask_urls(path)}: {len(groups)} row group(s) for about {wanted} mini-batches of "
            f"{batch_size} bytes; rewrite it with smaller row groups to split it further"
        )
    pieces, current = [], []
    for group in groups:
        current.append(group)
        if sum(g[1] for g in current) >= batch_size:
            pieces.append(current)
            current = []
    if current or not pieces:
        pieces.append(current)
    for piece in pieces:
        ids = tuple(g[0] for g in piece)
        yield dict(
            kind="parquet",
            paths=(path,),
            row_groups=ids,
            items=sum(g[2] for g in piece),
            nbytes=sum(g[1] for g in piece),
            read=dict(options={}, size=size),
            fingerprint=fingerprint(ids),
        )


def _text_pieces(
    path: str, size: int, fmt: str, options: dict[str, Any], batch_size: int, fingerprint: Callable[..., str]
) -> Iterator[dict[str, Any]]:
    """Byte ranges of a CSV or JSON lines file, each ending at a record boundary."""
    quote = options.get("quote_char", '"') if fmt == "csv" else None
    quote = quote.encode() if quote else None
    try:
        bounds = record_boundaries(path, size, batch_size, quote)
        schema = plan_schema(path, fmt, options, bounds[1], quote, size)
    except OSError as exc:
        raise InputError(path, f"cannot read ({exc.strerror})") from None
    except Exception as exc:  # pyarrow's parse errors
        raise InputError(path, f"not a readable {fmt} file ({first_line(exc)})") from None
    read = dict(options=options, schema=schema)
    for start, end in itertools.pairwise(bounds):
        yield dict(
            kind=fmt,
            paths=(path,),
            start=start,
            end=end,
            items=None,
            nbytes=end - start,
            read=read,
            fingerprint=fingerprint(start, end),
        )
