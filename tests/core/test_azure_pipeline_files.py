"""Pipeline and component files as Azure ML's samples write them: optional arguments `$[[...]]` in a parallel
component's program arguments, node fields bound to pipeline inputs (`instance_count`, `mini_batch_size`,
`retry_settings`), and a script that writes its own files and returns nothing with `error_threshold: -1`, which
succeeds without reading as failed."""

import json
import textwrap
from pathlib import Path

import pytest

from .conftest import cli, cli_json

PIPELINE = """
$schema: https://azuremlschemas.azureedge.net/latest/pipelineJob.schema.json
type: pipeline
display_name: score_with_options
inputs:
  data: {type: uri_folder, path: data}
  nodes: 2
  batch: 2
  retries: 1
  label: hello
outputs:
  scores: {type: uri_file}
jobs:
  score:
    type: parallel
    component: ./score_component.yml
    inputs:
      data: ${{parent.inputs.data}}
      label: ${{parent.inputs.label}}
    outputs:
      scores: ${{parent.outputs.scores}}
    resources:
      instance_count: ${{parent.inputs.nodes}}
    mini_batch_size: ${{parent.inputs.batch}}
    max_concurrency_per_instance: 1
    retry_settings:
      max_retries: ${{parent.inputs.retries}}
      timeout: 60
"""

COMPONENT = """
$schema: https://azuremlschemas.azureedge.net/latest/parallelComponent.schema.json
type: parallel
name: score
version: 1
inputs:
  data: {type: uri_folder}
  label: {type: string, optional: true}
  threshold: {type: number, optional: true}
outputs:
  scores: {type: uri_file}
input_data: ${{inputs.data}}
mini_batch_size: "10"
task:
  type: run_function
  code: ./src
  entry_script: score.py
  program_arguments: >-
    $[[--label ${{inputs.label}}]]
    $[[--threshold ${{inputs.threshold}}]]
  append_row_to: ${{outputs.scores}}
"""

SCORE = """
import argparse, os

def init():
    global args
    parser = argparse.ArgumentParser()
    parser.add_argument("--label", required=True)
    parser.add_argument("--threshold", type=float)
    args = parser.parse_args()  # every argument known: no bracket or reference left over

def run(mini_batch):
    return [f"{os.path.basename(p)} {args.label} {args.threshold} {len(mini_batch)}" for p in mini_batch]
"""


@pytest.fixture
def pipeline(tmp_path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "score.py").write_text(textwrap.dedent(SCORE))
    (tmp_path / "score_component.yml").write_text(COMPONENT)
    (tmp_path / "data").mkdir()
    for i in range(4):
        (tmp_path / "data" / f"f{i}.txt").write_text(str(i))
    path = tmp_path / "pipeline.yml"
    path.write_text(PIPELINE)
    return path


def job_summary(summary: dict, job: str) -> dict:
    """The run.json of a pipeline job's step run."""
    return json.loads((Path(summary["jobs"][job]["step"]["run_dir"]) / "run.json").read_text())


def test_optional_arguments_are_kept_when_given_and_dropped_when_not(pipeline, tmp_path):
    code, summary = cli_json("run", pipeline, cwd=tmp_path)

    assert code == 0, summary["status_reason"]
    scores = Path(summary["jobs"]["score"]["outputs"]["scores"]).read_text().splitlines()
    assert scores == [f"f{i}.txt hello None 2" for i in range(4)]  # --label given; --threshold dropped


def test_node_fields_bound_to_pipeline_inputs_take_their_values(pipeline, tmp_path):
    code, summary = cli_json("run", pipeline, "--set", "inputs.batch=1", "--set", "inputs.retries=4", cwd=tmp_path)

    assert code == 0, summary["status_reason"]
    config = job_summary(summary, "score")["config"]
    assert (config["node_count"], config["mini_batch_size"], config["run_max_try"]) == (2, 1, 5)
    assert job_summary(summary, "score")["mini_batches_total"] == 4


def test_a_script_that_returns_nothing_with_error_threshold_minus_one_succeeds_without_failed_items(
    tmp_path, make_files, write_script
):
    make_files(6)
    write_script("def run(mini_batch):\n    return []  # writes its own files\n")
    common = ("--entry-script", "score.py", "--input", "data", "--set", "mini_batch_size=2")

    shown = cli("run", *common, "--set", "error_threshold=-1", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert (
        "items:        0 succeeded, 0 failed, 6 returned no result (error_threshold -1: not failures)" in shown.stdout
    )

    code, summary = cli_json("run", *common, "--set", "error_threshold=-1", "--set", "allow_reuse=false", cwd=tmp_path)
    assert (code, summary["items_failed"], summary["items_without_result"]) == (0, 0, 6)

    code, counted = cli_json("run", *common, "--set", "error_threshold=10", "--set", "allow_reuse=false", cwd=tmp_path)
    assert (code, counted["items_failed"], counted["items_without_result"]) == (0, 6, 0)  # ParallelRunStep's count


STAGED = """
$schema: https://azuremlschemas.azureedge.net/latest/pipelineJob.schema.json
type: pipeline
display_name: staged
inputs:
  raw: {type: uri_folder, path: raw}
jobs:
  prepare:
    type: command
    code: src
    inputs: {raw: "${{parent.inputs.raw}}"}
    outputs: {clean: {type: uri_folder}}
    command: >-
      python prepare.py --raw ${{inputs.raw}} --clean ${{outputs.clean}}
  score:
    type: parallel
    inputs: {rows: {type: uri_folder, path: "${{parent.jobs.prepare.outputs.clean}}"}}
    outputs: {scores: {type: uri_file}}
    input_data: ${{inputs.rows}}
    mini_batch_size: "1"
    retry_settings: {max_retries: 0}
    mini_batch_error_threshold: 0
    task:
      code: src
      entry_script: score.py
      append_row_to: ${{outputs.scores}}
"""

PREPARE = """
import argparse, os, shutil
parser = argparse.ArgumentParser()
parser.add_argument("--raw")
parser.add_argument("--clean")
args = parser.parse_args()
open("prepared.txt", "w").write("written in the working folder")  # Azure runs a snapshot of code:
for name in sorted(os.listdir(args.raw)):
    if open(os.path.join(args.raw, name)).read() == "bad":
        raise SystemExit(f"{name} is bad")  # after the files before it were copied: a half-written output
    shutil.copy(os.path.join(args.raw, name), args.clean)
"""

STAGED_SCORE = """
import os

def run(mini_batch):
    values = [open(path).read() for path in mini_batch]
    if "3" in values and os.path.exists("fail.flag"):  # in the folder the step runs from
        raise ValueError("failing on purpose")
    return values
"""


@pytest.fixture
def staged(tmp_path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "prepare.py").write_text(textwrap.dedent(PREPARE))
    (tmp_path / "src" / "score.py").write_text(textwrap.dedent(STAGED_SCORE))
    (tmp_path / "raw").mkdir()
    for name, value in [("a.txt", "1"), ("b.txt", "bad"), ("c.txt", "3")]:
        (tmp_path / "raw" / name).write_text(value)
    path = tmp_path / "staged.yml"
    path.write_text(STAGED)
    return path


def test_a_failed_pipeline_fixed_then_run_fresh_starts_a_new_run_with_every_output_whole(staged, tmp_path):
    failed = cli("run", staged, "--set", "process_count_per_node=1", cwd=tmp_path)
    assert failed.returncode == 1
    assert "prepare: Failed (command) exited with 1: b.txt is bad" in failed.stdout
    assert f"resume:     parallel-steps run {staged}" in failed.stdout
    assert f"start over: parallel-steps run {staged} --fresh" in failed.stdout
    assert not (tmp_path / "src" / "prepared.txt").exists()  # the command ran in a snapshot of code:

    (tmp_path / "raw" / "b.txt").write_text("2")  # the fix
    code, fresh = cli_json("run", staged, "--fresh", "--set", "process_count_per_node=1", cwd=tmp_path)
    assert code == 0, fresh["status_reason"]
    records = [json.loads(p.read_text()) for p in Path(fresh["run_dir"]).parent.glob("*/pipeline.json")]
    assert sorted(record["status"] for record in records) == ["Failed", "Succeeded"]  # a new run beside the failed one
    clean = Path(fresh["jobs"]["prepare"]["outputs"]["clean"])
    assert sorted(p.name for p in clean.iterdir()) == ["a.txt", "b.txt", "c.txt"]
    assert sorted(Path(fresh["jobs"]["score"]["outputs"]["scores"]).read_text().split()) == ["1", "2", "3"]


def test_a_job_run_again_in_the_same_run_starts_from_nothing_its_failed_attempt_left(staged, tmp_path):
    """The resumed command reruns whole on an empty output; a parallel job given `allow_reuse: false` runs every
    mini-batch again, not only those its failed attempt did not finish."""
    (tmp_path / "raw" / "b.txt").write_text("2")
    (tmp_path / "fail.flag").write_text("")
    code, failed = cli_json("run", staged, "--set", "process_count_per_node=1", cwd=tmp_path)
    assert (code, failed["jobs"]["score"]["status"]) == (1, "Failed")
    clean = Path(failed["jobs"]["prepare"]["outputs"]["clean"])
    (clean / "stale.txt").write_text("left by hand")  # in the run's own output folder

    (tmp_path / "fail.flag").unlink()  # the fix
    staged.write_text(
        STAGED.replace('    mini_batch_size: "1"\n', '    mini_batch_size: "1"\n    allow_reuse: false\n')
    )
    code, again = cli_json("run", staged, "--set", "process_count_per_node=1", cwd=tmp_path)
    assert code == 0, again["status_reason"]
    assert again["run_dir"] == failed["run_dir"]  # resumed
    assert again["jobs"]["prepare"]["status"] == "Reused"  # succeeded in this run, kept as it was
    step = json.loads((Path(again["jobs"]["score"]["step"]["run_dir"]) / "run.json").read_text())
    assert (step["mini_batches_run"], step["mini_batches_reused"]) == (4, 0)  # the stale file counts too: it is there

    (tmp_path / "raw" / "a.txt").write_text("9")  # prepare's inputs changed: it runs again, whole
    code, third = cli_json("run", staged, "--set", "process_count_per_node=1", cwd=tmp_path)
    assert code == 0, third["status_reason"]
    assert sorted(p.name for p in Path(third["jobs"]["prepare"]["outputs"]["clean"]).iterdir()) == [
        "a.txt",
        "b.txt",
        "c.txt",
    ]


def test_two_pipeline_files_with_one_display_name_are_two_pipelines(staged, tmp_path):
    (tmp_path / "raw" / "b.txt").write_text("2")
    other = tmp_path / "copy" / "staged.yml"
    other.parent.mkdir()
    other.write_text(
        STAGED.replace("path: raw", f"path: {tmp_path / 'raw'}").replace("code: src", f"code: {tmp_path / 'src'}")
    )
    (tmp_path / "fail.flag").write_text("")
    code, failed = cli_json("run", staged, "--set", "process_count_per_node=1", cwd=tmp_path)
    assert code == 1

    code, second = cli_json("run", other, "--set", "process_count_per_node=1", cwd=tmp_path)
    assert second["run_dir"] != failed["run_dir"]  # not the other file's failed run, resumed
    records = {json.loads((Path(s["run_dir"]) / "pipeline.json").read_text())["pipeline"] for s in (failed, second)}
    assert records == {str(staged), str(other)}

    listing = cli("runs", cwd=tmp_path).stdout
    assert f"staged ({staged})" in listing
    assert f"staged ({other})" in listing


BROKEN = """
type: pipeline
display_name: broken
inputs:
  table: {type: uri_file, path: sales.csv}
  nodes: two
jobs:
  no_script:
    type: parallel
    inputs: {rows: "${{parent.inputs.table}}"}
    input_data: ${{inputs.rows}}
    task: {code: src, entry_script: missing.py}
  unknown_field:
    type: parallel
    component: ./component.yml
    inputs: {rows: "${{parent.inputs.table}}"}
  bad_count:
    type: parallel
    inputs: {rows: {type: uri_folder, path: "${{parent.jobs.no_script.outputs.out}}"}}
    input_data: ${{inputs.rows}}
    resources: {instance_count: "${{parent.inputs.nodes}}"}
    task: {code: src, entry_script: score.py}
  bad_partition:
    type: parallel
    inputs: {rows: {type: mltable, path: table}}
    input_data: ${{inputs.rows}}
    partition_keys: [Region]
    task: {code: src, entry_script: score.py}
"""

COMPONENT_UNKNOWN = """
type: parallel
inputs: {rows: {type: uri_file}}
input_data: ${{inputs.rows}}
mini_batch_sizes: "10"
task: {code: src, entry_script: score.py}
"""


def test_plan_lists_every_problem_of_a_pipeline_with_file_job_and_field_and_run_refuses_it_first(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "score.py").write_text("def run(mini_batch):\n    return mini_batch\n")
    (tmp_path / "sales.csv").write_text("Store,Brand\n1,a\n")
    (tmp_path / "table").mkdir()
    (tmp_path / "table" / "MLTable").write_text(
        "paths:\n  - file: ./sales.csv\ntransformations:\n  - read_delimited: {}\n"
    )
    (tmp_path / "table" / "sales.csv").write_text("Store,Brand\n1,a\n")
    (tmp_path / "component.yml").write_text(COMPONENT_UNKNOWN)
    pipeline = tmp_path / "broken.yml"
    pipeline.write_text(BROKEN.replace("${{parent.jobs.no_script.outputs.out}}", "table"))

    planned = cli("plan", pipeline, cwd=tmp_path)
    assert planned.returncode == 2
    problems = planned.stderr.splitlines()
    assert len(problems) == 4, planned.stderr
    assert all(line.startswith(str(pipeline)) for line in problems)
    no_script, unknown, bad_count, bad_partition = problems
    assert "jobs.no_script.entry_script: " in no_script
    assert "missing.py not found" in no_script
    assert (
        f"(component {tmp_path / 'component.yml'}): jobs.unknown_field.mini_batch_sizes: has no meaning here" in unknown
    )
    assert ": jobs.bad_count.resources.instance_count: 'two' is not valid" in bad_count
    assert ": jobs.bad_partition.partition_keys: 'Region' is not a column of " in bad_partition

    refused = cli("run", pipeline, cwd=tmp_path)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr.strip().endswith(f"(3 more: parallel-steps plan {pipeline} lists them)")
    assert not (tmp_path / "runs" / "pipelines").exists()  # nothing ran, no folder left


@pytest.mark.parametrize("sample", ["oj_sales/pipeline.yml", "iris/pipeline.yml", "iris/pipeline_with_component.yml"])
def test_plan_passes_the_samples_as_written(azure_examples, tmp_path, sample):
    mapped = ("--set", f"datastores.workspaceblobstore={tmp_path / 'blob'}")
    planned = cli("plan", azure_examples / "pipelines" / sample, *mapped, cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    assert planned.stderr == ""
