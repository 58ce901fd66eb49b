"""A pipeline file's flow puts every job under the run root it is given: the parallel job's run directory, its
run index and its locks, not only the pipeline's own folder."""

import textwrap
from pathlib import Path

from parallel_steps.prefect import flow_from_azure_pipeline

PIPELINE = """
type: pipeline
display_name: rooted
inputs:
  data: {type: uri_folder, path: data}
jobs:
  score:
    type: parallel
    inputs: {rows: "${{parent.inputs.data}}"}
    outputs: {scores: {type: uri_file}}
    input_data: ${{inputs.rows}}
    task:
      code: src
      entry_script: score.py
      append_row_to: ${{outputs.scores}}
"""


def test_a_pipeline_flow_puts_its_parallel_job_under_the_run_root_it_is_given(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "score.py").write_text("def run(mini_batch):\n    return mini_batch\n")
    (tmp_path / "data").mkdir()
    for i in range(3):
        (tmp_path / "data" / f"{i}.txt").write_text(str(i))
    (tmp_path / "pipeline.yml").write_text(textwrap.dedent(PIPELINE))
    root = tmp_path / "elsewhere"

    flow = flow_from_azure_pipeline(tmp_path / "pipeline.yml", run_root=str(root), fields={"process_count_per_node": 1})
    state = flow(return_state=True)

    assert state.is_completed(), state.message
    score = state.result()["score"]
    assert Path(score["run_dir"]).is_relative_to(root)
    assert (root / "index.sqlite").is_file()  # the job's run is in that root's index
    assert len(Path(score["output_file"]).read_text().splitlines()) == 3
