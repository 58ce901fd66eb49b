"""Spools and assembly (store/output.py): every format, exactly once from the slices the ledger names,
in plan order, and a torn tail (a worker killed halfway through a write) never read. Spools are named
as a worker names them (`spool_path`: text formats compressed), unless a test says otherwise."""

import json
import os

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from parallel_steps.store import output
from parallel_steps.store.output import Part, Spool, assemble, count_rows, encode, link_or_copy, spool_path


def spool_of(tmp_path, worker: str, results: list, fmt: str) -> list[Part]:
    spool = Spool(spool_path(str(tmp_path), worker, fmt))
    parts = [spool.append(result, fmt) for result in results]
    spool.flush()
    spool.close()
    return parts


def test_text_is_one_str_line_per_element_and_tables_are_space_separated_rows():
    assert encode(["a", 1, None], "text") == b"a\n1\nNone\n"
    frame = pd.DataFrame({"x": [1, 2], "name": ["a b", "c"]})
    assert encode(frame, "text") == b'1 "a b"\n2 c\n'


def test_jsonl_writes_one_object_per_row_of_lists_and_frames():
    assert encode([{"a": 1}, {"a": 2}], "jsonl") == b'{"a": 1}\n{"a": 2}\n'
    assert encode(pd.DataFrame({"a": [3]}), "jsonl") == b'{"a": 3}\n'


def test_an_empty_result_writes_no_slice(tmp_path):
    spool = Spool(spool_path(str(tmp_path), "w0", "text"))
    assert spool.append([], "text") is None
    assert spool.append(None, "text") is None
    spool.close()
    assert os.path.getsize(spool.path) == 0


def test_count_rows_counts_elements_and_table_rows():
    assert count_rows(None) == 0
    assert count_rows([1, 2, 3]) == 3
    assert count_rows(pa.table({"a": [1, 2]})) == 2
    assert count_rows(pd.DataFrame({"a": [1, 2, 3, 4]})) == 4


def test_text_assembly_follows_the_order_given_not_the_order_written(tmp_path):
    a = spool_of(tmp_path, "w0", [["a1"], ["a2"]], "text")
    b = spool_of(tmp_path, "w1", [["b1"]], "text")
    target = tmp_path / "out" / "result.txt"
    assemble([b[0], a[1], a[0]], target, "text")
    assert target.read_text() == "b1\na2\na1\n"


def test_only_named_slices_are_assembled_so_a_retried_attempt_counts_once(tmp_path):
    _first_try, retry, other = spool_of(tmp_path, "w0", [["x"], ["x"], ["y"]], "text")
    target = tmp_path / "result.txt"
    assemble([retry, other], target, "text")  # the ledger names one successful attempt per mini-batch
    assert target.read_text() == "x\ny\n"


def test_a_torn_tail_of_a_killed_worker_is_never_read(tmp_path):
    (part,) = spool_of(tmp_path, "w0", [["complete"]], "text")
    with open(part.path, "ab") as spool:
        spool.write(b"half a sli")  # the worker died while writing its next slice
    target = tmp_path / "result.txt"
    assemble([part], target, "text")
    assert target.read_text() == "complete\n"


def test_a_resumed_worker_appends_after_the_slices_already_named(tmp_path):
    (first,) = spool_of(tmp_path, "w0", [["before"]], "text")
    (second,) = spool_of(tmp_path, "w0", [["after"]], "text")
    assert second.offset == first.offset + first.length
    target = tmp_path / "result.txt"
    assemble([first, second], target, "text")
    assert target.read_text() == "before\nafter\n"


def test_csv_slices_share_one_header_and_other_columns_are_aligned_to_the_union(tmp_path):
    parts = spool_of(tmp_path, "w0", [[{"a": 1, "b": 2}], [{"a": 3, "b": 4}], [{"a": 5, "c": 6}]], "csv")
    target = tmp_path / "result.csv"
    assemble(parts, target, "csv")
    assert target.read_text().splitlines() == ["a,b,c", "1,2,", "3,4,", "5,,6"]


def test_parquet_slices_become_one_table_with_the_unified_schema(tmp_path):
    parts = spool_of(tmp_path, "w0", [pa.table({"a": [1, 2]}), pa.table({"a": [3], "b": ["x"]})], "parquet")
    target = tmp_path / "result.parquet"
    assemble(parts, target, "parquet")
    table = pq.read_table(target)
    assert table.column("a").to_pylist() == [1, 2, 3]
    assert table.column("b").to_pylist() == [None, None, "x"]


@pytest.mark.parametrize("fmt", ["text", "jsonl", "csv", "parquet"])
def test_no_slices_still_write_an_empty_output_file(tmp_path, fmt):
    target = tmp_path / f"result.{fmt}"
    assemble([], target, fmt)
    assert target.exists()
    assert not list(tmp_path.glob(".*.tmp"))


def test_jsonl_assembly_keeps_every_row_once(tmp_path):
    parts = spool_of(tmp_path, "w0", [[{"i": 0}, {"i": 1}], [{"i": 2}]], "jsonl")
    target = tmp_path / "result.jsonl"
    assemble(parts, target, "jsonl")
    assert [json.loads(line)["i"] for line in target.read_text().splitlines()] == [0, 1, 2]


def test_link_or_copy_puts_the_file_at_the_target_and_is_idempotent(tmp_path):
    source = tmp_path / "a.txt"
    source.write_text("rows\n")
    target = tmp_path / "out" / "b.txt"
    assert link_or_copy(source, target) == target
    assert link_or_copy(target, target) == target
    assert target.read_text() == "rows\n"


def test_text_spools_are_compressed_and_a_long_run_of_slices_is_assembled_a_bounded_piece_at_a_time(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(output, "_CHUNK", 64)  # far less than the run of slices below
    results = [[f"/data/in/{i:07d}.txt" for i in range(first, first + 10)] for first in range(0, 2000, 10)]
    parts = spool_of(tmp_path, "w0", results, "text")
    rows = "".join(f"{row}\n" for result in results for row in result)
    assert os.path.getsize(parts[0].path) * 3 < len(rows)
    target = tmp_path / "result.txt"
    assemble(parts, target, "text")  # the slices lie end to end: one run, copied in chunks
    assert target.read_text() == rows
    assemble([parts[7], parts[3]], target, "text")  # and each slice decompresses alone
    assert target.read_text().splitlines() == results[7] + results[3]


def test_an_uncompressed_spool_of_an_earlier_version_is_read_as_it_is(tmp_path):
    spool = Spool(str(tmp_path / "node0-process000.text"))  # the name spools had before compression
    parts = [spool.append(["a", "b"], "text"), spool.append(["c"], "text")]
    spool.close()
    assert (tmp_path / "node0-process000.text").read_bytes() == b"a\nb\nc\n"
    target = tmp_path / "result.txt"
    assemble([parts[1], parts[0]], target, "text")
    assert target.read_text() == "c\na\nb\n"
