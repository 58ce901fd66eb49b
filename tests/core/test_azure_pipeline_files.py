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
