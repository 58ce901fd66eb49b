"""Inputs and side inputs named by fsspec URLs (`file://` here; `s3://` and the rest go through the same
fsspec calls): listed and fingerprinted through fsspec, downloaded by the worker, reused by fingerprint."""

import os
import subprocess
import sys
import time

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from parallel_steps import ParallelRunConfig
from parallel_steps.step import run_step
from parallel_steps.worker.runtime import SIDE_INPUTS_DIR

from .conftest import output_lines

READ_SCRIPT = """
import os

def run(mini_batch):
    # the worker hands over local copies that keep the file names
    return [f"{os.path.basename(path)}={open(path).read().strip()} local={os.path.exists(path)}" for path in mini_batch]
"""


def _url(path) -> str:
    return f"file://{os.path.abspath(path)}"


def test_file_inputs_named_by_url_are_downloaded_and_reused_by_fingerprint(tmp_path, make_files, write_script):
    data = make_files(7)
    write_script(READ_SCRIPT)
    config = ParallelRunConfig(entry_script="score.py", inputs=[_url(data)], mini_batch_size=3, output="out")

    first = run_step(config)
    assert first["status"] == "Succeeded"
    assert first["mini_batches_total"] == 3
    assert output_lines(first) == [f"f{i:04d}.txt={i} local=True" for i in range(7)]

    assert run_step(config)["reused"] is True  # fingerprints of URL objects match

    time.sleep(0.01)
    (data / "f0004.txt").write_text("changed\n")  # a new size and mtime for one object
    rerun = run_step(config)
    assert not rerun["reused"]
    assert rerun["mini_batches_reused"] == 2
    assert rerun["mini_batches_run"] == 1
    assert output_lines(rerun)[4] == "f0004.txt=changed local=True"
    assert len(output_lines(rerun)) == 7


def test_tables_named_by_url_split_into_pieces_give_every_row_once(tmp_path, write_script):
    (tmp_path / "tables").mkdir()
    frame = pd.DataFrame({"id": range(3000), "text": [f"row {i}, with a comma" for i in range(3000)]})
    frame.to_csv(tmp_path / "tables" / "a.csv", index=False)
    pq.write_table(pa.Table.from_pandas(frame), tmp_path / "tables" / "b.parquet", row_group_size=1000)
    (tmp_path / "tables" / "_SUCCESS").write_text("")  # what Spark leaves beside its output: skipped
    (tmp_path / "tables" / "_temporary").mkdir()
    (tmp_path / "tables" / "_temporary" / "part-0.csv").write_text("id\nnot a number\n")
    write_script("def run(frame):\n    return frame[['id']]\n")
    config = ParallelRunConfig(
        entry_script="score.py",
        inputs=[{"type": "tabular", "path": _url("tables")}],
        mini_batch_size="16KB",
        output="out",
        append_row_file_name="ids.csv",
        append_row_format="csv",
    )

    summary = run_step(config)

    assert summary["status"] == "Succeeded"
    assert summary["mini_batches_total"] > 4  # the CSV split on byte ranges, the Parquet file on row groups
    ids = pd.read_csv(summary["output_file"])["id"].tolist()
    assert sorted(ids) == sorted(list(range(3000)) * 2)


def test_side_input_named_by_url_reaches_the_script_as_a_local_copy(tmp_path, make_files, write_script):
    make_files(2)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "weights.txt").write_text("42\n")
    write_script("""
        import argparse, os
        from parallel_steps import EntryScript

        def init():
            global weights, where
            parser = argparse.ArgumentParser()
            parser.add_argument("--model")
            args, _ = parser.parse_known_args()
            where = EntryScript().get_side_input("model")
            assert args.model == where, (args.model, where)
            weights = open(os.path.join(where, "weights.txt")).read().strip()

        def run(mini_batch):
            return [f"{weights} {where}" for _ in mini_batch]
    """)
    config = ParallelRunConfig(
        entry_script="score.py",
        inputs=["data"],
        output="out",
        side_inputs={"model": _url("model")},
        arguments=["--model", "${side_inputs.model}"],
    )

    summary = run_step(config)

    assert summary["status"] == "Succeeded", summary["status_reason"]
    weights, where = output_lines(summary)[0].split(" ", 1)
    assert weights == "42"
    assert where.startswith(str(SIDE_INPUTS_DIR))
    assert not (SIDE_INPUTS_DIR / summary["run_id"]).exists()  # the copies go with the run


def test_missing_url_is_one_line_naming_it(tmp_path, write_script):
    write_script("def run(mini_batch):\n    return mini_batch\n")
    url = _url("nowhere")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "parallel_steps.cli",
            "run",
            "--entry-script",
            "score.py",
            "--input",
            url,
            "--output",
            "out",
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"parallel-steps: {url}: no such file or folder"]
    assert not (tmp_path / "out").exists()


def test_output_named_by_url_is_uploaded_and_a_reused_run_uploads_it_again(tmp_path, make_files, write_script):
    make_files(5)
    write_script("""
        import os
        from parallel_steps import EntryScript

        def run(mini_batch):
            for path in mini_batch:  # files the script writes itself travel with the output
                open(os.path.join(EntryScript().output_dir, os.path.basename(path) + ".done"), "w").close()
            return [os.path.basename(path) for path in mini_batch]
    """)
    config = ParallelRunConfig(
        entry_script="score.py", inputs=["data"], mini_batch_size=2, output=_url("bucket/scores")
    )

    summary = run_step(config)

    assert summary["output"] == _url("bucket/scores")
    assert summary["output_file"] == _url("bucket/scores/parallel_run_step.txt")
    uploaded = tmp_path / "bucket" / "scores"
    assert (uploaded / "parallel_run_step.txt").read_text().splitlines() == [f"f{i:04d}.txt" for i in range(5)]
    assert sorted(p.name for p in uploaded.glob("*.done")) == [f"f{i:04d}.txt.done" for i in range(5)]

    elsewhere = run_step(config.with_overrides(output=_url("bucket/copy")))
    assert elsewhere["reused"] is True
    assert (tmp_path / "bucket" / "copy" / "parallel_run_step.txt").read_text() == (
        uploaded / "parallel_run_step.txt"
    ).read_text()
