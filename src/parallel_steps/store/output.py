"""Output: one part file per successful attempt (written by the worker), assembled in plan order.

Parts make exactly-once cheap: an attempt writes its own part, the ledger names the
part of the one successful attempt, and assembly reads only the parts the ledger
names. The output file appears atomically (written beside it, then renamed).
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

TEXT_FORMATS = ("txt", "jsonl", "csv")


def count_rows(result: Any) -> int:
    """Elements returned by run(): rows of a DataFrame or Table, else len()."""
    if result is None:
        return 0
    if hasattr(result, "num_rows"):
        return result.num_rows
    return len(result)


def write_part(result: Any, base: str, fmt: str) -> str | None:
    """Write run()'s result as `base.<fmt>`; returns the part path, or None when it has no rows."""
    if count_rows(result) == 0:
        return None
    path = f"{base}.{fmt}"
    if fmt == "txt":
        with open(path, "w", encoding="utf-8") as file:
            file.writelines(f"{line}\n" for line in _text_rows(result))
    elif fmt == "jsonl":
        with open(path, "w", encoding="utf-8") as file:
            file.writelines(json.dumps(row, default=str, ensure_ascii=False) + "\n" for row in _records(result))
    elif fmt == "csv":
        _to_pandas(result).to_csv(path, index=False)
    else:
        import pyarrow.parquet as pq

        pq.write_table(_to_arrow(result), path)
    return path


def _is_frame(result: Any) -> bool:
    return type(result).__module__.split(".")[0] in ("pandas", "pyarrow")


def _text_rows(result: Any) -> Iterable[str]:
    """ParallelRunStep's text rows: str(element), or a table row's values joined by spaces."""
    if _is_frame(result):
        frame = _to_pandas(result)
        return (" ".join(str(v) for v in row) for row in frame.itertuples(index=False, name=None))
    return (str(element) for element in result)


def _records(result: Any) -> Iterable[Any]:
    if _is_frame(result):
        return _to_pandas(result).to_dict(orient="records")
    return result


def _to_pandas(result: Any):
    import pandas as pd

    if isinstance(result, pd.DataFrame):
        return result
    if hasattr(result, "to_pandas"):
        return result.to_pandas()
    rows = list(result)
    if rows and all(isinstance(r, dict) for r in rows):
        return pd.DataFrame.from_records(rows)
    return pd.DataFrame({"result": rows})


def _to_arrow(result: Any):
    import pyarrow as pa

    if isinstance(result, pa.Table):
        return result
    return pa.Table.from_pandas(_to_pandas(result), preserve_index=False)


# Assembly ----------------------------------------------------------------------


def assemble(parts: Iterable[str], target: Path, fmt: str) -> None:
    """Write every part, in the given order, into `target`, atomically."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        if fmt == "parquet":
            _assemble_parquet(list(parts), tmp)
        elif fmt == "csv":
            _assemble_csv(list(parts), tmp)
        else:
            with open(tmp, "wb") as out:
                for part in parts:
                    with open(part, "rb") as src:
                        shutil.copyfileobj(src, out, 1 << 20)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def _assemble_csv(parts: list[str], tmp: Path) -> None:
    """Concatenate CSV parts under one header; parts with other columns are aligned to the union."""
    headers = []
    for part in parts:
        with open(part, encoding="utf-8", newline="") as file:
            headers.append(file.readline())
    columns: list[str] = []
    for header in dict.fromkeys(headers):
        for name in next(csv.reader([header])):
            if name not in columns:
                columns.append(name)
    with open(tmp, "w", encoding="utf-8", newline="") as out:
        if not parts:
            return
        union = ",".join(_quote_csv(c) for c in columns) + "\n"
        out.write(union)
        for part, header in zip(parts, headers):
            if header == union:
                with open(part, encoding="utf-8", newline="") as src:
                    src.readline()
                    shutil.copyfileobj(src, out, 1 << 20)
            else:
                import pandas as pd

                pd.read_csv(part).reindex(columns=columns).to_csv(out, header=False, index=False)


def _quote_csv(name: str) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="").writerow([name])
    return buffer.getvalue()


def _assemble_parquet(parts: list[str], tmp: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not parts:
        pq.write_table(pa.table({}), tmp)
        return
    schema = pa.unify_schemas([pq.read_schema(p).remove_metadata() for p in parts], promote_options="permissive")
    with pq.ParquetWriter(tmp, schema) as writer:
        for part in parts:
            table = pq.read_table(part).replace_schema_metadata(None)
            for field in schema:
                if field.name not in table.column_names:
                    table = table.append_column(field.name, pa.nulls(table.num_rows, field.type))
            writer.write_table(table.select(schema.names).cast(schema))


def link_or_copy(source: Path, target: Path) -> None:
    """Put `source` at `target` atomically: a hard link on the same filesystem, else a copy."""
    if source.resolve() == target.resolve():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
    except OSError:
        shutil.copy2(source, tmp)
    os.replace(tmp, target)
