"""Reading ahead (worker/read_ahead.py): the next mini-batch's input is read on a thread while one runs; what
`run()` then gets is what it would have read itself; one read ahead and never run leaves nothing behind."""

import tempfile

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from parallel_steps import ParallelRunConfig, TabularDataset
from parallel_steps.inputs.loaders import load
from parallel_steps.run import mini_batches
from parallel_steps.worker.downloads import Downloads
from parallel_steps.worker.read_ahead import ReadAhead


@pytest.fixture
def temporary(tmp_path, monkeypatch):
    """An empty temporary folder, as the worker's (its download folder goes there)."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def table_slices(tmp_path):
    """Three mini-batches of one Parquet file, one row group each."""
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": range(300), "text": [f"row {i}" for i in range(300)]}), path, row_group_size=100)
    size = pq.ParquetFile(path).metadata.row_group(0).total_byte_size
    config = ParallelRunConfig(entry_script="score.py", inputs=[TabularDataset(path=[str(path)])], mini_batch_size=size)
    return list(mini_batches(config))


def url_files(tmp_path, count=3):
    folder = tmp_path / "objects"
    folder.mkdir()
    for i in range(count):
        (folder / f"f{i}.txt").write_text(f"{i}\n")
    config = ParallelRunConfig(entry_script="score.py", inputs=[f"file://{folder}"], mini_batch_size=count)
    return list(mini_batches(config))


def test_a_table_slice_read_ahead_is_what_run_would_have_read(tmp_path, temporary):
    _, second, third = table_slices(tmp_path)
    inputs = ReadAhead(Downloads("test-"), limit=1 << 20)
    assert inputs.start(second) is not None
    data, ahead, _ = inputs.take(second)
    assert ahead
    pd.testing.assert_frame_equal(data, load(second))
    assert list(data["id"]) == list(range(100, 200))
    data, ahead, _ = inputs.take(third)  # not read ahead: read when it runs
    assert not ahead
    assert list(data["id"]) == list(range(200, 300))
    inputs.close()


def test_only_one_mini_batch_is_read_ahead_and_only_the_one_that_runs_next_takes_it(tmp_path, temporary):
    first, second, third = table_slices(tmp_path)
    inputs = ReadAhead(Downloads("test-"), limit=1 << 20)
    assert inputs.start(second, during=first.index) is not None
    assert inputs.start(third) is None  # one ahead at a time
    assert inputs.take(first)[1] is False  # the one that runs now is read as it runs; the next one stays ahead
    assert inputs.take(second)[1:] == (True, first.index)
    inputs.close()


def test_nothing_is_read_ahead_past_the_limit_for_local_files_or_when_turned_off(tmp_path, make_files, temporary):
    _, second, _ = table_slices(tmp_path)
    assert ReadAhead(Downloads("test-"), limit=second.nbytes - 1).start(second) is None
    assert ReadAhead(Downloads("test-"), limit=0).start(second) is None
    make_files(3)
    [local] = mini_batches(ParallelRunConfig(entry_script="score.py", inputs=[str(tmp_path / "data")]))
    assert ReadAhead(Downloads("test-"), limit=1 << 20).start(local) is None  # run() gets their paths: nothing to read


def test_files_read_ahead_and_never_run_leave_nothing_behind(tmp_path, temporary):
    [mini_batch] = url_files(tmp_path)
    inputs = ReadAhead(Downloads("test-"), limit=1 << 20)
    paths = inputs.start(mini_batch).result()  # fetched into the worker's download folder
    assert [open(path).read() for path in paths] == ["0\n", "1\n", "2\n"]
    assert all(path.startswith(str(temporary)) for path in paths)
    inputs.close()  # the worker stops: the mini-batch never ran
    assert list(temporary.iterdir()) == []


def test_files_read_ahead_are_removed_once_their_mini_batch_ran(tmp_path, temporary):
    [mini_batch] = url_files(tmp_path)
    inputs = ReadAhead(Downloads("test-"), limit=1 << 20)
    inputs.start(mini_batch)
    paths, ahead, _ = inputs.take(mini_batch)
    assert ahead
    assert [open(path).read() for path in paths] == ["0\n", "1\n", "2\n"]
    inputs.release(mini_batch)
    assert not any(path.is_file() for path in temporary.rglob("*"))
    inputs.close()
    assert list(temporary.iterdir()) == []
