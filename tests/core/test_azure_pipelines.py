"""Azure ML `type: pipeline` files run with `parallel-steps run` as written: Microsoft's oj-sales shape (a
command job partitioning a CSV file into an MLTable folder, then a parallel job training one model per
group), the iris pipeline (an MLflow model folder, an `azureml://` output on a mapped datastore), a
pipeline of a parallel component, and a failed job that stops its dependants until a rerun resumes."""

import json
import pickle
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from parallel_steps import StepFailed
from parallel_steps.azure.pipeline_run import run_pipeline

from .conftest import cli, cli_json

ONE_WORKER = ("--set", "node_count=1", "--set", "process_count_per_node=1")  # the samples ask for 2 x 2


def test_the_oj_sales_pipeline_partitions_then_trains_one_model_per_group(azure_examples):
    pipeline = azure_examples / "pipelines" / "oj_sales" / "pipeline.yml"
    code, summary = cli_json("run", pipeline, *ONE_WORKER)
    assert code == 0, summary["status_reason"]
    partition, train = summary["jobs"]["partition_job"], summary["jobs"]["parallel_train"]
    assert (partition["status"], train["status"]) == ("Succeeded", "Succeeded")
    table = Path(partition["outputs"]["tabular_output_data"])
    assert (table / "MLTable").is_file()
    assert len(list(table.glob("*/*/partitioned_data.csv"))) == 9
    models = sorted(Path(train["outputs"]["model_folder"]).glob("*/*/model.pkl"))
    assert [m.relative_to(train["outputs"]["model_folder"]).parts[:2] for m in models] == [
        (store, brand) for store in ("1000", "1001", "1002") for brand in ("dominicks", "minute_maid", "tropicana")
    ]
    assert hasattr(pickle.loads(models[0].read_bytes()), "predict")

    code, again = cli_json("run", pipeline, *ONE_WORKER)  # nothing changed: both jobs reused by their keys
    assert code == 0
    assert again["run_dir"] != summary["run_dir"]
    assert [job["status"] for job in again["jobs"].values()] == ["Reused", "Reused"]
    assert again["jobs"]["parallel_train"]["outputs"] == train["outputs"]


def test_the_iris_pipeline_writes_to_a_mapped_datastore(azure_examples, tmp_path):
    pipeline = azure_examples / "pipelines" / "iris" / "pipeline.yml"
    store = tmp_path / "blob"
    mapped = ("--set", f"datastores.workspaceblobstore={store}")
    planned = cli("plan", pipeline, *mapped)
    assert planned.returncode == 0, planned.stderr
    assert "batch_prediction (parallel): 1 mini-batches" in planned.stdout

    unmapped = cli("run", pipeline, *ONE_WORKER)
    assert unmapped.returncode == 2
    assert unmapped.stdout == ""
    assert "is on datastore 'workspaceblobstore', which is not mapped here" in unmapped.stderr
    assert "--set datastores.workspaceblobstore=" in unmapped.stderr
    assert not list((tmp_path / "runs" / "pipelines").glob("*/*/pipeline.json"))  # a user error leaves no run

    code, summary = cli_json("run", pipeline, *ONE_WORKER, *mapped)
    assert code == 0, summary["status_reason"]
    result = store / summary["run_id"] / "aggregated_returns.csv"  # paths/${{name}}/aggregated_returns.csv
    assert summary["jobs"]["batch_prediction"]["outputs"]["job_output_file"] == str(result)
    scored = pd.read_csv(result, delimiter=" ", header=None)
    assert scored.shape == (150, 5)
    assert (scored[4].value_counts() > 40).all()  # three varieties, about 50 each

    component = azure_examples / "pipelines" / "iris" / "pipeline_with_component.yml"
    code, summary = cli_json("run", component, *ONE_WORKER, "--set", f"outputs.scores={tmp_path / 'scores.txt'}")
    assert code == 0, summary["status_reason"]
    assert (tmp_path / "scores.txt").read_text() == result.read_text()


PIPELINE = """
type: pipeline
inputs:
  raw: {type: uri_folder, path: raw}
  limit: {type: uri_file, path: limit.txt}
jobs:
  prepare:
    type: command
    inputs: {raw: "${{parent.inputs.raw}}"}
    outputs: {clean: {type: uri_folder}}
    code: src
    command: cp ${{inputs.raw}}/* ${{outputs.clean}}/
  score:
    type: parallel
    inputs:
      rows: {type: uri_folder, path: "${{parent.jobs.prepare.outputs.clean}}"}
      limit: "${{parent.inputs.limit}}"
    outputs: {scores: {type: uri_file}}
    input_data: ${{inputs.rows}}
    mini_batch_size: "1"
    mini_batch_error_threshold: 0
    retry_settings: {max_retries: 0}
    task:
      code: src
      entry_script: score.py
      program_arguments: --limit ${{inputs.limit}}
      append_row_to: ${{outputs.scores}}
  report:
    type: command
    inputs: {scores: "${{parent.jobs.score.outputs.scores}}"}
    outputs: {count: {type: uri_file}}
    code: src
    command: wc -l < ${{inputs.scores}} > ${{outputs.count}}
"""

SCORE = """
import sys
limit = int(open(sys.argv[sys.argv.index("--limit") + 1]).read())
def run(mini_batch):
    values = [int(open(path).read()) for path in mini_batch]
    if any(value > limit for value in values):
        raise ValueError(f"{values} is over the limit {limit}")
    return values
"""


def test_a_failed_parallel_job_stops_its_dependants_and_a_rerun_resumes_there(tmp_path):
    (tmp_path / "raw").mkdir()
    for index, value in enumerate([1, 2, 30]):
        (tmp_path / "raw" / f"{index}.txt").write_text(str(value))
    (tmp_path / "limit.txt").write_text("10")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "score.py").write_text(textwrap.dedent(SCORE))
    (tmp_path / "pipeline.yml").write_text(textwrap.dedent(PIPELINE))

    code, failed = cli_json("run", "pipeline.yml", "--set", "process_count_per_node=1", cwd=tmp_path)
    assert code == 1
    assert failed["status_reason"].startswith("job score failed: ")
    assert "ValueError: [30] is over the limit 10" in failed["status_reason"]
    statuses = {name: job["status"] for name, job in failed["jobs"].items()}
    assert statuses == {"prepare": "Succeeded", "score": "Failed", "report": "Skipped"}
    assert failed["jobs"]["report"]["status_reason"] == "job score failed"
    assert not (Path(failed["run_dir"]) / "jobs" / "report").exists()

    (tmp_path / "limit.txt").write_text("100")  # the fix
    # Python's caches beside the code the jobs share (what importing score.py leaves where bytecode is written)
    (tmp_path / "src" / "__pycache__").mkdir(exist_ok=True)
    (tmp_path / "src" / "__pycache__" / "score.cpython-311.pyc").write_bytes(b"cache")
    code, resumed = cli_json("run", "pipeline.yml", "--set", "process_count_per_node=1", cwd=tmp_path)
    assert code == 0, resumed["status_reason"]
    assert resumed["run_dir"] == failed["run_dir"]  # the same run, resumed
    jobs = resumed["jobs"]
    assert (jobs["prepare"]["status"], jobs["prepare"]["status_reason"]) == ("Reused", "succeeded in this run; kept")
    assert (jobs["score"]["status"], jobs["report"]["status"]) == ("Succeeded", "Succeeded")
    assert Path(jobs["report"]["outputs"]["count"]).read_text().strip() == "3"
    record = json.loads((Path(resumed["run_dir"]) / "pipeline.json").read_text())
    assert record["status"] == "Succeeded"

    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "a.txt").write_text("7")
    given = ("--set", f"jobs.prepare.outputs.clean={tmp_path / 'other'}")
    code, one = cli_json(
        "run", "pipeline.yml", "--job", "score", *given, "--set", "process_count_per_node=1", cwd=tmp_path
    )
    assert code == 0, one["status_reason"]
    assert list(one["jobs"]) == ["score"]  # only that job, on the upstream output given
    assert one["jobs"]["score"]["status"] == "Succeeded"
    assert Path(one["jobs"]["score"]["outputs"]["scores"]).read_text() == "7\n"


COMMANDS = """
type: pipeline
settings: {continue_on_step_failure: CONTINUE}
jobs:
  fails:
    type: command
    command: python -c "raise ValueError('bad input\\\\n{\\\\n}')"
  after_fails:
    type: command
    inputs: {log: "${{parent.jobs.fails.outputs.log}}"}
    command: cat ${{inputs.log}}
  independent:
    type: command
    outputs: {done: {type: uri_file}}
    command: echo done > ${{outputs.done}}
"""


def test_a_failed_command_stops_the_rest_unless_continue_on_step_failure(tmp_path):
    for continue_on_failure, independent in (("false", "NotStarted"), ("true", "Succeeded")):
        text = textwrap.dedent(COMMANDS).replace("CONTINUE", continue_on_failure)
        text = text.replace(
            "  fails:\n    type: command\n", "  fails:\n    type: command\n    outputs: {log: {type: uri_file}}\n"
        )
        (tmp_path / f"{continue_on_failure}.yml").write_text(text)
        with pytest.raises(StepFailed) as failed:
            run_pipeline(tmp_path / f"{continue_on_failure}.yml")
        jobs = failed.value.summary["jobs"]
        assert jobs["fails"]["status"] == "Failed"
        assert jobs["fails"]["status_reason"].startswith("exited with 1: ValueError: bad input (log: ")
        assert (jobs["after_fails"]["status"], jobs["independent"]["status"]) == ("Skipped", independent)
