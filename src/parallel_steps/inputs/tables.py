"""Reading tabular files with pyarrow: record boundaries, plan-time schemas and parsing of pieces."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from ..errors import InputError, first_line
from ..storage.objects import open_input

if TYPE_CHECKING:
    import pyarrow as pa  # no type information: its names are Any to the checker, and say what is meant

_SCAN_BLOCK = 1 << 20

_SCHEMA_SAMPLE = 4 << 20


def record_boundaries(path: str, size: int, batch_size: int, quote: bytes | None) -> list[int]:
    """Offsets [0, b1, ..., size] where each piece is about `batch_size` bytes and ends after a
    newline outside quotes, so a quoted newline in a CSV value never splits a record.

    With a quote character the file is read once, counting quotes: a newline ends a
    record when the number of quotes before it is even (RFC 4180 escapes a quote by
    doubling it, which keeps the parity). Without one (JSON lines) it only seeks.
    """
    bounds, target, quotes = [0], batch_size, 0
    with open_input(path, size) as file:
        while target < size:
            if not quote:
                file.seek(max(file.tell(), target))
            base = file.tell()
            block = file.read(_SCAN_BLOCK)
            if not block:
                break
            seen = 0  # quotes in block[:seen] are already in `quotes`
            newline = block.find(b"\n", max(0, target - base))
            while newline != -1:
                if quote:
                    quotes += block.count(quote, seen, newline)
                    seen = newline
                if quotes % 2 == 0:
                    cut = base + newline + 1
                    if cut >= size:
                        break
                    bounds.append(cut)
                    target = cut + batch_size
                    newline = block.find(b"\n", max(newline + 1, target - base))
                else:
                    newline = block.find(b"\n", newline + 1)
            if quote:
                quotes += block.count(quote, seen)
    bounds.append(size)
    return bounds


def plan_schema(
    path: str, fmt: str, options: dict[str, Any], first_end: int, quote: bytes | None, size: int | None = None
) -> bytes:
    """The Arrow schema of a split file, inferred from its head, so that every piece of the
    file reads with the same columns and types."""
    with open_input(path, size) as file:
        head = file.read(min(first_end, _SCHEMA_SAMPLE))
    if len(head) < first_end:
        head = head[: _last_boundary(head, quote)]
    table = parse_bytes(head, fmt, options, at_start=True)
    schema: bytes = table.schema.serialize().to_pybytes()
    return schema


def _last_boundary(data: bytes, quote: bytes | None) -> int:
    newline = data.rfind(b"\n")
    while newline != -1 and quote and data.count(quote, 0, newline) % 2:
        newline = data.rfind(b"\n", 0, newline)
    return newline + 1


def parse_bytes(
    data: bytes, fmt: str, options: dict[str, Any], at_start: bool, schema: pa.Schema | None = None
) -> pa.Table:
    """Parse CSV or JSON lines bytes into an Arrow table (the planner's and the loader's parser).

    `at_start` says the bytes begin at the start of the file (header and skipped rows);
    `schema` forces the plan-time column names and types (columns typed null are inferred).
    """
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.json as pjson

    typed = None if schema is None else pa.schema([f for f in schema if not pa.types.is_null(f.type)])
    if fmt == "jsonl":
        parse = pjson.ParseOptions(explicit_schema=typed, unexpected_field_behavior="infer") if typed else None
        return pjson.read_json(io.BytesIO(data), parse_options=parse)
    has_header = options.get("header", True)
    names = options.get("column_names") or (None if at_start or schema is None else schema.names)
    skip = options.get("skip_rows", 0) + (1 if has_header and names else 0) if at_start else 0
    read = pcsv.ReadOptions(
        column_names=names,
        autogenerate_column_names=not names and not has_header,
        skip_rows=skip,
        encoding=options.get("encoding", "utf8"),
    )
    parse = pcsv.ParseOptions(
        delimiter=options.get("delimiter", ","), quote_char=options.get("quote_char", '"'), newlines_in_values=True
    )
    convert = pcsv.ConvertOptions(column_types=typed) if typed is not None else None
    return pcsv.read_csv(io.BytesIO(data), read_options=read, parse_options=parse, convert_options=convert)


def read_table(
    path: str, fmt: str, options: dict[str, Any], columns: list[str] | None = None, size: int | None = None
) -> pa.Table:
    """A whole file as an Arrow table (optionally some columns; `size` if known); errors name the file."""
    import pyarrow.parquet as pq

    try:
        with open_input(path, size) as file:
            if fmt == "parquet":
                return pq.read_table(file, columns=columns)
            table = parse_bytes(file.read(), fmt, options, at_start=True)
        return table.select(columns) if columns else table
    except KeyError as exc:
        raise InputError(path, f"has no column {exc}") from None
    except Exception as exc:
        raise InputError(path, f"not a readable {fmt} file ({first_line(exc)})") from None


def table_columns(path: str, fmt: str, options: dict[str, Any], size: int | None = None) -> list[str]:
    """A file's column names: a Parquet footer says them, a text file is read."""
    if fmt != "parquet":
        columns: list[str] = read_table(path, fmt, options, size=size).column_names
        return columns
    return list(_parquet_footer(path, size).schema.names)


def row_count(path: str, fmt: str, options: dict[str, Any], size: int | None = None) -> int:
    """The rows of a whole file: a Parquet footer says it, a text file is read."""
    if fmt != "parquet":
        rows: int = read_table(path, fmt, options, size=size).num_rows
        return rows
    rows = _parquet_footer(path, size).num_rows
    return rows


def _parquet_footer(path: str, size: int | None) -> Any:
    """A Parquet file's metadata (its footer only); errors name the file."""
    import pyarrow.parquet as pq

    try:
        with open_input(path, size) as file:
            return pq.ParquetFile(file).metadata
    except Exception as exc:
        raise InputError(path, f"not a readable parquet file ({first_line(exc)})") from None
