"""Inputs, side inputs, models and outputs named by fsspec URLs, against each store: local files (`file://`),
moto's S3 server (`s3://`) and Azurite (`abfs://`), real servers on loopback ports, reached through the step's
`storage_options` (tests/storage_servers.py). Nothing of fsspec is mocked."""

import json
import os
import subprocess
import time

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from parallel_steps import ParallelRunConfig
from parallel_steps.run.step import run_step
from parallel_steps.worker.side_inputs import side_inputs_dir

from .conftest import CLI, cli, output_lines

READ_SCRIPT = """
import os

def run(mini_batch):
    # the worker hands over local copies that keep the file names
    with open("seen.txt", "a") as seen:
        seen.writelines(path + "\\n" for path in mini_batch)
    return [f"{os.path.basename(path)}={open(path).read().strip()} local={os.path.exists(path)}" for path in mini_batch]
"""


def test_file_inputs_from_the_store_are_fetched_and_reused_by_fingerprint(tmp_path, store, make_files, write_script):
    inputs = store.put(make_files(7), "in")
    write_script(READ_SCRIPT)
    config = ParallelRunConfig(
        entry_script="score.py",
        inputs=[inputs],
        mini_batch_size=3,
        output="out",
        storage_options=store.storage_options(),
    )

    first = run_step(config)
    assert first["status"] == "Succeeded", first["status_reason"]
    assert first["mini_batches_total"] == 3
    assert output_lines(first) == [f"f{i:04d}.txt={i} local=True" for i in range(7)]
    copies = (tmp_path / "seen.txt").read_text().split()
    assert len(copies) == 7
    assert not any(map(os.path.exists, copies))  # removed once their mini-batch is done

    assert run_step(config)["reused"] is True  # the listing's sizes and versions match

    time.sleep(0.01)
    store.write_bytes(f"{inputs}/f0004.txt", b"changed\n")  # a new size and version for one object
    rerun = run_step(config)
    assert not rerun["reused"]
    assert rerun["mini_batches_reused"] == 2
    assert rerun["mini_batches_run"] == 1
    assert output_lines(rerun)[4] == "f0004.txt=changed local=True"
    assert len(output_lines(rerun)) == 7


def test_tables_from_the_store_split_into_pieces_give_every_row_once(tmp_path, store, write_script):
    tables = tmp_path / "tables"
    (tables / "_temporary").mkdir(parents=True)
    frame = pd.DataFrame({"id": range(3000), "text": [f"row {i}, with a comma" for i in range(3000)]})
    frame.to_csv(tables / "a.csv", index=False)
    pq.write_table(pa.Table.from_pandas(frame), tables / "b.parquet", row_group_size=1000)
    (tables / "_SUCCESS").write_text("")  # what Spark leaves beside its output: skipped
    (tables / "_temporary" / "part-0.csv").write_text("id\nnot a number\n")
    write_script("def run(frame):\n    return frame[['id']]\n")
    config = ParallelRunConfig(
        entry_script="score.py",
        inputs=[{"type": "tabular", "path": store.put(tables, "tables")}],
        mini_batch_size="16KB",
        output="out",
        append_row_file_name="ids.csv",
        append_row_format="csv",
        storage_options=store.storage_options(),
    )

    summary = run_step(config)

    assert summary["status"] == "Succeeded", summary["status_reason"]
    assert summary["mini_batches_total"] > 4  # the CSV split on byte ranges, the Parquet file on row groups
    ids = pd.read_csv(summary["output_file"])["id"].tolist()
    assert sorted(ids) == sorted(list(range(3000)) * 2)


def test_side_inputs_and_models_from_the_store_reach_the_script_as_local_copies(
    tmp_path, store, make_files, write_script
):
    make_files(2)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "weights.txt").write_text("42\n")
    (tmp_path / "scaler.txt").write_text("7\n")
    write_script("""
        import argparse, os
        from azureml.core import Model
        from parallel_steps import EntryScript

        def init():
            global weights, where, scale
            parser = argparse.ArgumentParser()
            parser.add_argument("--model")
            args, _ = parser.parse_known_args()
            where = EntryScript().get_side_input("model")
            assert args.model == where, (args.model, where)
            weights = open(os.path.join(where, "weights.txt")).read().strip()
            scale = open(Model.get_model_path("scaler")).read().strip()

        def run(mini_batch):
            return [f"{weights} {scale} {where}" for _ in mini_batch]
    """)
    config = ParallelRunConfig(
        entry_script="score.py",
        inputs=["data"],
        output="out",
        side_inputs={"model": store.put(tmp_path / "model", "model")},
        models={"scaler": store.put(tmp_path / "scaler.txt", "models", "scaler.txt")},
        arguments=["--model", "${side_inputs.model}"],
        storage_options=store.storage_options(),
    )

    summary = run_step(config)

    assert summary["status"] == "Succeeded", summary["status_reason"]
    weights, scale, where = output_lines(summary)[0].split(" ", 2)
    assert (weights, scale) == ("42", "7")
    assert where.startswith(str(side_inputs_dir()))
    assert not (side_inputs_dir() / summary["run_id"]).exists()  # the copies go with the run


def test_missing_url_is_one_line_naming_it(tmp_path, store, write_script):
    write_script("def run(mini_batch):\n    return mini_batch\n")
    url, options = store.url("nowhere"), f"storage_options={json.dumps(store.storage_options())}"
    result = subprocess.run(
        [*CLI, "run", "--entry-script", "score.py", "--input", url, "--output", "out", "--set", options],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"parallel-steps: {url}: no such file or folder"]
    assert not (tmp_path / "out").exists()


def test_output_to_the_store_is_uploaded_and_a_reused_run_uploads_it_again(store, make_files, write_script):
    make_files(5)
    write_script("""
        import os
        from parallel_steps import EntryScript

        def run(mini_batch):
            for path in mini_batch:  # files the script writes itself travel with the output
                open(os.path.join(EntryScript().output_dir, os.path.basename(path) + ".done"), "w").close()
            return [os.path.basename(path) for path in mini_batch]
    """)
    scores = store.url("scores")
    config = ParallelRunConfig(
        entry_script="score.py",
        inputs=["data"],
        mini_batch_size=2,
        output=scores,
        storage_options=store.storage_options(),
    )

    summary = run_step(config)

    assert summary["output"] == scores
    assert summary["output_file"] == f"{scores}/parallel_run_step.txt"
    lines = store.read_bytes(f"{scores}/parallel_run_step.txt").decode().splitlines()
    assert lines == [f"f{i:04d}.txt" for i in range(5)]
    done = [url.rsplit("/", 1)[1] for url in store.listing(scores) if url.endswith(".done")]
    assert done == [f"f{i:04d}.txt.done" for i in range(5)]
    assert not [url for url in store.listing(scores) if ".partial" in url]

    elsewhere = run_step(config.with_overrides(output=store.url("copy")))
    assert elsewhere["reused"] is True
    assert store.read_bytes(store.url("copy", "parallel_run_step.txt")) == store.read_bytes(summary["output_file"])


def test_plan_lists_the_store_with_the_steps_storage_options(store, make_files):
    inputs = store.put(make_files(25), "in")
    result = cli(
        "plan", "--input", inputs, "--set", "mini_batch_size=10", "--set",
        f"storage_options={json.dumps(store.storage_options())}", "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert (plan["mini_batches"], plan["items"]) == (3, 25)
    assert plan["first"][0]["source"] == f"{inputs}/f0000.txt .. f0009.txt (10 files)"


def test_partitions_in_the_store_are_found_by_a_glob_and_each_uploaded_to_its_folder(tmp_path, store, write_script):
    for day in ("2026-01-01", "2026-01-02", "2026-02-01"):
        (tmp_path / "days" / day).mkdir(parents=True)
        for n in range(3):
            (tmp_path / "days" / day / f"f{n}.txt").write_text(f"{day}/{n}\n")
    days = store.put(tmp_path / "days", "days")
    write_script("def run(mini_batch):\n    return [open(path).read().strip() for path in mini_batch]\n")
    scores = store.url("scores")
    config = ParallelRunConfig(
        entry_script="score.py",
        inputs=[f"{days}/{{partition}}/"],
        partitions=["2026-01-*"],
        mini_batch_size=2,
        output=scores,
        storage_options=store.storage_options(),
    )

    summary = run_step(config)

    assert list(summary["partitions"]) == ["2026-01-01", "2026-01-02"]
    for day, facts in summary["partitions"].items():
        assert facts["output_file"] == f"{scores}/{day}/parallel_run_step.txt"
        assert store.read_bytes(facts["output_file"]).decode().splitlines() == [f"{day}/{n}" for n in range(3)]
    assert not [url for url in store.listing(scores) if "2026-02-01" in url or ".partial" in url]
