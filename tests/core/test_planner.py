"""The planner and loaders: deterministic mini-batches that read back every item exactly once."""

import os
import tracemalloc

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parallel_steps import FileDataset, InputError, TabularDataset
from parallel_steps.inputs.loaders import load
from parallel_steps.inputs.planner import Planner

from .conftest import cli_json

MB = 2**20


def plan(datasets, batch_size, **kwargs):
    planner = Planner(datasets, batch_size, **kwargs)
    return list(planner.mini_batches()), planner.notes


def read_back(batches) -> pd.DataFrame:
    return pd.concat([load(mb) for mb in batches], ignore_index=True)


class TestFiles:
    def test_25_files_make_three_batches_of_10_10_5(self, make_files):
        make_files(25)
        code, result = cli_json("plan", "--input", "data", "--mini-batch-size", "10")
        assert code == 0
        assert result["mini_batches"] == 3
        assert result["items"] == 25
        assert [b["items"] for b in result["first"]] == [10, 10, 5]
        assert result["bytes"] == sum(len(f"{i}\n") for i in range(25))

    def test_folders_recursive_and_globs_sorted(self, tmp_path):
        for name in ["b/2.txt", "a/1.txt", "a/sub/3.txt", "c.txt", "z.log"]:
            (tmp_path / "in" / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / "in" / name).write_text(name)
        batches, _ = plan([FileDataset(["in", "in/*.txt"])], 100)
        assert load(batches[0]) == ["in/a/1.txt", "in/a/sub/3.txt", "in/b/2.txt", "in/c.txt", "in/z.log", "in/c.txt"]
        again, _ = plan([FileDataset(["in", "in/*.txt"])], 100)
        assert [b.fingerprint for b in again] == [b.fingerprint for b in batches]

    def test_fingerprint_changes_only_for_the_batch_holding_a_changed_file(self, make_files):
        folder = make_files(30)
        before, _ = plan([FileDataset("data")], 10)
        (folder / "f0015.txt").write_text("changed content\n")
        after, _ = plan([FileDataset("data")], 10)
        assert [a.fingerprint == b.fingerprint for a, b in zip(before, after)] == [True, False, True]

    def test_planning_streams_without_an_object_per_file(self, make_files):
        make_files(20000)
        tracemalloc.start()
        count = sum(1 for _ in Planner([FileDataset("data")], 10).mini_batches())
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert count == 2000
        # one folder's sorted names are held while listing; the mini-batches are not
        assert peak < 8 * MB


def write_csv_files(folder, sizes_kb):
    folder.mkdir(parents=True, exist_ok=True)
    frames = {}
    for i, kb in enumerate(sizes_kb):
        rows = max(1, kb * 1024 // 40)
        frame = pd.DataFrame(
            {
                "id": np.arange(rows) + i * 10**7,
                "value": np.linspace(0, 1, rows),
                "text": [f'row "{r}", with comma' if r % 11 == 0 else f"r{r}" for r in range(rows)],
            }
        )
        frame.to_csv(folder / f"part{i}.csv", index=False)
        frames[f"part{i}.csv"] = frame
    return frames


class TestTabular:
    def test_csv_files_of_100kb_to_10mb(self, tmp_path):
        frames = write_csv_files(tmp_path / "csv", [100, 700, 3000, 10240])
        batches, _ = plan([TabularDataset("csv")], MB)
        per_file = {}
        for mb in batches:
            per_file.setdefault(os.path.basename(mb.paths[0]), []).append(mb)
        for name, _frame in frames.items():
            size = os.path.getsize(tmp_path / "csv" / name)
            expected = 1 if size <= MB else round(size / MB)
            assert abs(len(per_file[name]) - expected) <= 1, (name, size, len(per_file[name]))
            back = read_back(per_file[name])
            pd.testing.assert_frame_equal(back, pd.read_csv(tmp_path / "csv" / name), check_dtype=True)

    def test_csv_quoted_newlines_are_never_split(self, tmp_path):
        rows = 30000
        frame = pd.DataFrame({"id": np.arange(rows), "note": [f'line one\nline "two" {i}' for i in range(rows)]})
        frame.to_csv(tmp_path / "q.csv", index=False)
        batches, _ = plan([TabularDataset("q.csv")], 100 * 1024)
        assert len(batches) > 5
        pd.testing.assert_frame_equal(read_back(batches), pd.read_csv(tmp_path / "q.csv"))

    def test_csv_options_delimiter_and_no_header(self, tmp_path):
        (tmp_path / "s.csv").write_text("".join(f"{i};x{i}\n" for i in range(5000)))
        dataset = TabularDataset("s.csv", delimiter=";", header=False, column_names=["n", "label"])
        batches, _ = plan([dataset], 8 * 1024)
        back = read_back(batches)
        assert len(batches) > 3
        assert list(back.columns) == ["n", "label"]
        assert back["n"].tolist() == list(range(5000))

    def test_jsonl_pieces(self, tmp_path):
        frame = pd.DataFrame(
            {
                "id": np.arange(50000),
                "name": [f"n{i}" for i in range(50000)],
                "score": np.random.default_rng(0).random(50000),
            }
        )
        frame.to_json(tmp_path / "d.jsonl", orient="records", lines=True)
        batches, _ = plan([TabularDataset("d.jsonl")], 256 * 1024)
        assert len(batches) > 4
        back = read_back(batches)
        assert back["id"].tolist() == list(range(50000))
        assert back["name"].tolist() == frame["name"].tolist()

    def test_parquet_splits_on_row_groups_and_says_when_it_cannot(self, tmp_path):
        frame = pd.DataFrame({"id": np.arange(200000), "x": np.random.default_rng(1).random(200000)})
        pq.write_table(pa.Table.from_pandas(frame), tmp_path / "many.parquet", row_group_size=10000)
        pq.write_table(pa.Table.from_pandas(frame), tmp_path / "one.parquet", row_group_size=200000)
        many, notes = plan([TabularDataset("many.parquet")], 512 * 1024)
        assert len(many) > 4
        assert notes == []
        assert sum(mb.items for mb in many) == 200000
        pd.testing.assert_frame_equal(read_back(many), frame)
        one, notes = plan([TabularDataset("one.parquet")], 512 * 1024)
        assert len(one) == 1
        assert "1 row group(s)" in notes[0]

    def test_partition_keys_one_batch_per_combination(self, tmp_path):
        frame = pd.DataFrame(
            {"store": ["a", "b", "a", "c", "b", "a"] * 100, "day": [1, 1, 2, 1, 1, 1] * 100, "sales": np.arange(600)}
        )
        frame.iloc[:300].to_csv(tmp_path / "p1.csv", index=False)
        pq.write_table(pa.Table.from_pandas(frame.iloc[300:]), tmp_path / "p2.parquet")
        batches, _ = plan([TabularDataset(["p1.csv", "p2.parquet"])], MB, partition_keys=["store", "day"])
        assert [mb.keys for mb in batches] == [("a", 1), ("a", 2), ("b", 1), ("c", 1)]
        for mb in batches:
            rows = load(mb)
            expected = frame[(frame.store == mb.keys[0]) & (frame.day == mb.keys[1])]
            assert len(rows) == mb.items == len(expected)
            assert sorted(rows["sales"]) == sorted(expected["sales"])

    def test_corrupted_parquet_names_the_file(self, tmp_path):
        (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really parquet")
        with pytest.raises(InputError, match=r"bad\.parquet: not a readable Parquet file"):
            plan([TabularDataset("bad.parquet")], MB)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(
        st.tuples(st.integers(-(10**6), 10**6), st.text(alphabet='ab,"\n x', max_size=12)), min_size=1, max_size=400
    ),
    batch=st.integers(16, 4096),
    fmt=st.sampled_from(["csv", "jsonl", "parquet"]),
)
def test_every_row_read_back_exactly_once(tmp_path_factory, rows, batch, fmt):
    folder = tmp_path_factory.mktemp("prop")
    frame = pd.DataFrame(rows, columns=["n", "s"])
    path = folder / f"t.{fmt}"
    if fmt == "csv":
        frame.to_csv(path, index=False)
    elif fmt == "jsonl":
        frame.to_json(path, orient="records", lines=True)
    else:
        pq.write_table(pa.Table.from_pandas(frame), path, row_group_size=max(1, len(rows) // 7))
    batches, _ = plan([TabularDataset(str(path))], batch)
    back = read_back(batches)
    assert back["n"].tolist() == frame["n"].tolist()
    assert back["s"].fillna("").tolist() == frame["s"].fillna("").tolist()
