"""Output: each worker appends the rows of its successful attempts to its own spool file, and the
output file is assembled from the slices the ledger names, in plan order.

Exactly once, cheaply: an attempt's rows become one slice (path, offset, length)
of its worker's spool, written and flushed before the worker reports success;
the ledger names the slice of the one successful attempt, and assembly reads
only named slices. A worker killed halfway leaves an unnamed tail that nothing
reads. One spool per worker (not a file per mini-batch) keeps file creation off
the hot path. The output file appears atomically (written beside, then renamed).

Spools of text formats are compressed a slice at a time: the run folder keeps every row for reuse
beside the output file, and rows of text compress about fivefold (a 1M-file run's folder held its
output twice, 40 of its 77 MB). Each slice ends with a full flush, so it decompresses alone, and
slices that lie end to end decompress as one stream. The spool's name says it is compressed
(`spool_path`): spools of runs from before are read as they are, for reuse.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from ..protocol import Part as Part  # carried in outcomes; written and read here
from .space import write_site

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa  # no type information: its names are Any to the checker, and say what is meant


#: The slices of text output with `append_row_dataframe_header`: each begins with its DataFrame's header
#: line (an empty line for other results), and assembly writes the first header once, at the top.
TEXT_WITH_HEADER = "text_header"


#: The suffix of a compressed spool: raw deflate (no header), a full flush after each slice.
_COMPRESSED = ".deflate"

#: Bytes read (and at most written) at a time when a long run of slices is copied into the output.
_CHUNK = 1 << 20


def spool_format(output_format: str, dataframe_header: bool) -> str:
    """How the workers encode their slices: as the output file, or text with a header line per slice."""
    return TEXT_WITH_HEADER if output_format == "text" and dataframe_header else output_format


def spool_path(parts_dir: str, worker: str, fmt: str) -> str:
    """A worker's spool file: compressed for text formats (Parquet slices are compressed files already)."""
    name = f"{worker}.{fmt}"
    return os.path.join(parts_dir, name if fmt == "parquet" else name + _COMPRESSED)


def count_rows(result: Any) -> int:
    """Elements returned by run(): rows of a DataFrame or Table, else len()."""
    if result is None:
        return 0
    if hasattr(result, "num_rows"):
        rows: int = result.num_rows
        return rows
    return len(result)


#: The field of a result row that says the row failed (as in the OpenAI Batch API's output lines).
ERROR_FIELD = "error"


def row_errors(result: Any) -> tuple[int, Any]:
    """How many rows of run()'s result have an `error` that is not null, and the first such error: items that
    failed, each recorded by its row, while the mini-batch succeeds (docs/model_servers.md). Rows are dicts,
    or a DataFrame or Table with an `error` column; other rows (strings, tuples) carry no error, and a list whose
    first row is not a dict is taken to hold none."""
    if isinstance(result, list | tuple):  # the common case, on the hot path: rows of one kind, dicts or not
        if not result or not isinstance(result[0], dict):
            return 0, None
        errors = [row[ERROR_FIELD] for row in result if isinstance(row, dict) and row.get(ERROR_FIELD) is not None]
    elif hasattr(result, "num_rows"):  # a pyarrow Table
        if ERROR_FIELD not in result.column_names:
            return 0, None
        errors = [error for error in result.column(ERROR_FIELD).to_pylist() if error is not None]
    elif (columns := getattr(result, "columns", None)) is not None:  # a pandas DataFrame
        errors = result[ERROR_FIELD].dropna().tolist() if ERROR_FIELD in columns else []
    else:
        return 0, None
    return len(errors), errors[0] if errors else None


class Spool:
    """One worker's append-only file of result slices.

    Buffered: a slice may reach the disk only at the next `flush()`. A write that fails (a full disk)
    leaves the offsets of later slices true (what a flush could not write stays buffered, in order), but
    the slices a failed write or flush held must not be reported as written."""

    def __init__(self, path: str):
        self.path = path
        self._file = open(path, "ab")  # append: a resumed run's worker continues after old slices
        # Level 1: within a fifth of level 6's size. Memory level 4: the full flush after each slice clears
        # the match table, and a table of the default size (8) costs a third more to clear than to fill
        # with a slice of ten paths, for no smaller output (the same size on slices of 10 and 100 rows).
        self._deflate = zlib.compressobj(1, zlib.DEFLATED, -15, 4) if path.endswith(_COMPRESSED) else None

    def append(self, result: Any, fmt: str) -> Part | None:
        """Write run()'s result as one slice in `fmt`; None when it has no rows."""
        if count_rows(result) == 0:
            return None
        data = encode(result, fmt)
        if self._deflate is not None:
            data = self._deflate.compress(data) + self._deflate.flush(zlib.Z_FULL_FLUSH)
        offset = self._file.tell()
        write_site("spool", self.path)
        self._file.write(data)
        return Part(self.path, offset, len(data))

    def flush(self) -> None:
        """Make the slices written so far readable by the driver (before their success is reported)."""
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def encode(result: Any, fmt: str) -> bytes:
    """The bytes of one slice: text lines, JSON lines, CSV with a header, or a Parquet file."""
    if fmt == "text":
        return _text(result).encode("utf-8")
    if fmt == TEXT_WITH_HEADER:
        return (_text_header(result) + "\n" + _text(result)).encode("utf-8")
    if fmt == "jsonl":
        return "".join(json.dumps(row, default=str, ensure_ascii=False) + "\n" for row in _records(result)).encode(
            "utf-8"
        )
    if fmt == "csv":
        return _to_pandas(result).to_csv(index=False).encode("utf-8")
    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    pq.write_table(_to_arrow(result), buffer)
    return buffer.getvalue()


def _is_frame(result: Any) -> bool:
    kind = type(result)
    return kind is not list and kind.__module__.split(".")[0] in ("pandas", "pyarrow")


def _text(result: Any) -> str:
    """ParallelRunStep's `append_row` lines: `str(element)` per element; a table's rows with their
    values separated by spaces, no header, no index (pandas' CSV writer with a space: a value holding
    a space is quoted, dates without a time print as dates), what `read_csv(delimiter=" ", header=None)`
    reads back."""
    if _is_frame(result):
        return _to_pandas(result).to_csv(sep=" ", header=False, index=False, lineterminator="\n")
    return "\n".join(map(str, result)) + "\n"


def _text_header(result: Any) -> str:
    """A DataFrame's column names as `_text` writes its values (space-separated, quoted as needed); "" for lists."""
    if not _is_frame(result):
        return ""
    return _to_pandas(result).head(0).to_csv(sep=" ", index=False, lineterminator="\n").rstrip("\n")


def _records(result: Any) -> Iterable[Any]:
    if _is_frame(result):
        return _to_pandas(result).to_dict(orient="records")
    rows: Iterable[Any] = result
    return rows


def _to_pandas(result: Any) -> pd.DataFrame:
    import pandas as pd

    if isinstance(result, pd.DataFrame):
        return result
    if hasattr(result, "to_pandas"):
        frame: pd.DataFrame = result.to_pandas()
        return frame
    rows = list(result)
    if rows and all(isinstance(r, dict) for r in rows):
        return pd.DataFrame.from_records(rows)
    return pd.DataFrame({"result": rows})


def _to_arrow(result: Any) -> pa.Table:
    import pyarrow as pa

    if isinstance(result, pa.Table):
        return result
    return pa.Table.from_pandas(_to_pandas(result), preserve_index=False)


# Assembly ----------------------------------------------------------------------


class _SliceReader:
    """Reads slices' rows (decompressed), keeping each spool file open once; `check` before each read
    (it may raise: a cancel)."""

    def __init__(self, check: Callable[[], None] | None = None) -> None:
        self._files: dict[str, BinaryIO] = {}
        self._check = check

    def read(self, part: Part) -> bytes:
        """One slice's rows (or the start of them, for a part cut short of its slice's end)."""
        return b"".join(self.chunks(part))

    def chunks(self, part: Part) -> Iterator[bytes]:
        """The rows of `part` a bounded piece at a time: a run of slices may be a whole spool."""
        file = self._files.get(part.path)
        if file is None:
            file = self._files[part.path] = open(part.path, "rb")
        file.seek(part.offset)
        inflate = zlib.decompressobj(-15) if part.path.endswith(_COMPRESSED) else None
        left = part.length
        while left > 0:
            if self._check is not None:
                self._check()
            data = file.read(min(left, _CHUNK))
            if not data:
                break
            left -= len(data)
            if inflate is None:
                yield data
                continue
            yield inflate.decompress(data, _CHUNK)
            while inflate.unconsumed_tail:
                yield inflate.decompress(inflate.unconsumed_tail, _CHUNK)
        if inflate is not None:
            yield inflate.flush()  # what a match cut at the last chunk's bound still holds

    def close(self) -> None:
        for file in self._files.values():
            file.close()


def assemble(parts: Iterable[Part], target: Path, fmt: str, check: Callable[[], None] | None = None) -> None:
    """Write every slice, in the given order, into `target`, atomically; `check`, called before each slice,
    may raise to stop (nothing is then left at `target`)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    reader = _SliceReader(check)
    try:
        write_site("output", target)
        if fmt == "parquet":
            _assemble_parquet(list(parts), tmp, reader)
        elif fmt == "csv":
            _assemble_csv(list(parts), tmp, reader)
        elif fmt == TEXT_WITH_HEADER:
            _assemble_text_with_header(list(parts), tmp, reader)
        else:
            with open(tmp, "wb") as out:
                for part in _coalesced(parts):
                    out.writelines(reader.chunks(part))
        os.replace(tmp, target)
    except OSError as exc:
        exc.filename = exc.filename or str(target)  # a failed write names no file: the output it was for
        raise
    finally:
        reader.close()
        tmp.unlink(missing_ok=True)


def _coalesced(parts: Iterable[Part]) -> Iterator[Part]:
    """Slices that lie end to end in one spool as one: a worker's consecutive mini-batches do."""
    path, start, end = None, 0, 0
    for part_path, offset, length in parts:  # unpacked: once per mini-batch of the run
        if part_path == path and offset == end:
            end += length
            continue
        if path is not None:
            yield Part(path, start, end - start)
        path, start, end = part_path, offset, offset + length
    if path is not None:
        yield Part(path, start, end - start)


def _assemble_csv(parts: list[Part], tmp: Path, reader: _SliceReader) -> None:
    """Concatenate CSV slices under one header; slices with other columns are aligned to the union."""
    with open(tmp, "wb") as out:
        if not parts:
            return
        headers = [reader.read(Part(p.path, p.offset, min(p.length, 1 << 16))).split(b"\n", 1)[0] for p in parts]
        columns: list[str] = []
        for header in dict.fromkeys(headers):
            for name in next(csv.reader([header.decode("utf-8")])):
                if name not in columns:
                    columns.append(name)
        union = _csv_line(columns)
        out.write(union + b"\n")
        for part, header in zip(parts, headers):
            data = reader.read(part)
            if header == union:
                out.write(data[len(header) + 1 :])
            else:
                import pandas as pd

                frame = pd.read_csv(io.BytesIO(data)).reindex(columns=columns)
                out.write(frame.to_csv(header=False, index=False).encode("utf-8"))


def _assemble_text_with_header(parts: list[Part], tmp: Path, reader: _SliceReader) -> None:
    """ParallelRunStep's text with `--append_row_dataframe_header`: the first DataFrame's header once, on top."""
    slices = [reader.read(part).split(b"\n", 1) for part in parts]
    with open(tmp, "wb") as out:
        header = next((head for head, _ in slices if head), None)
        if header is not None:
            out.write(header + b"\n")
        for _, rows in slices:
            out.write(rows)


def _csv_line(values: list[str]) -> bytes:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="").writerow(values)
    return buffer.getvalue().encode("utf-8")


def _assemble_parquet(parts: list[Part], tmp: Path, reader: _SliceReader) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not parts:
        pq.write_table(pa.table({}), tmp)
        return

    def table(part: Part) -> pa.Table:
        # ParquetFile, not read_table: that imports pyarrow.dataset (and pandas), seconds on a busy machine
        # spent in one slice, which a cancel waits for.
        return pq.ParquetFile(pa.BufferReader(reader.read(part))).read().replace_schema_metadata(None)

    schema = pa.unify_schemas(
        [pq.read_schema(pa.BufferReader(reader.read(p))).remove_metadata() for p in parts], promote_options="permissive"
    )
    with pq.ParquetWriter(tmp, schema) as writer:
        for part in parts:
            data = table(part)
            for field in schema:
                if field.name not in data.column_names:
                    data = data.append_column(field.name, pa.nulls(data.num_rows, field.type))
            writer.write_table(data.select(schema.names).cast(schema))


def link_or_copy(source: Path, target: Path) -> Path:
    """Put `source` at `target` atomically: a hard link on the same filesystem, else a copy."""
    if target.exists() and source.resolve() == target.resolve():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
    except OSError:
        shutil.copy2(source, tmp)
    os.replace(tmp, target)
    return target
