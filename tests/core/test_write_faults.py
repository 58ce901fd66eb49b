"""The fault matrix (issue 47): every write site of a run (store/space.py's `WRITE_SITES`) refused in turn, as a
full disk (ENOSPC), an I/O error (EIO) and a read-only folder (EROFS), through the failpoint
`PARALLEL_STEPS_FAULT=<site>:<ERRNO>[:<nth>]`, on `parallel-steps run` as a user runs it. Each case asserts
one contract:

- the command ends with one line naming the path, the cause and what to do, with exit status 1 (0 where the
  site is bookkeeping only), and no traceback;
- the ledger stays whole, and nothing partial is left where the output goes;
- once the fault is gone, a rerun in the same run directory resumes and ends with every row exactly once;
- at a bookkeeping site (the run index, the report) the run ends as it would have and says the bookkeeping
  failed; the next command that reads the index (`runs`) mends the index from the run directory.

A site without a case here, a `write_site` call that names no registered site, a registered site that no code
calls, and a site without a row in docs/reliability.md's table each fail `test_every_write_site_has_a_case`.
"""

import ast
import errno
import json
import os
import re
import sqlite3
from pathlib import Path
from typing import NamedTuple

import pytest

from parallel_steps.store.space import WRITE_SITES, write_cause

from .conftest import cli

ROOT = Path(__file__).resolve().parents[2]
FILES = 6
FAULTS = ("ENOSPC", "EIO", "EROFS")
SCRIPT = "import os\n\n\ndef run(mini_batch):\n    return [os.path.basename(path) for path in mini_batch]\n"


class Case(NamedTuple):
    """One write refused: the site's `nth` write and every one after; `ends` how the command ends ("stops":
    before the run has a summary; "fails": the run ends Failed; "bookkeeping": the run ends as it would have);
    `where` the path the line names, relative to the test's folder (a folder: the line names a file in it). The
    line begins with it, but for a side input's copy: that line says first that no worker could start."""

    site: str
    nth: int
    ends: str
    where: str
    options: tuple[str, ...] = ()


SIDE_INPUT = ("--side-inputs", '{"lut": "file://SIDE"}')
CASES = {
    "run_index-open": Case("run_index", 1, "stops", "runs/index.sqlite"),
    "run_index-register": Case("run_index", 2, "stops", "runs/index.sqlite"),
    "run_index-end": Case("run_index", 3, "bookkeeping", "runs/index.sqlite"),  # with the run's step key
    "key_lock": Case("key_lock", 1, "stops", "runs/locks/"),
    "driver_lock": Case("driver_lock", 1, "stops", "run/driver.lock"),
    "ledger": Case("ledger", 1, "fails", "run/ledger.sqlite"),
    "spool": Case("spool", 3, "fails", "run/parts/node0-process000.text.deflate"),  # after two results
    "driver_logs": Case("driver_logs", 1, "fails", "run/logs/sys/job_report/processed_mini-batches.csv"),
    "progress": Case("progress", 1, "fails", "run/logs/job_progress_overview.txt"),
    "error_summary": Case("error_summary", 1, "fails", "run/logs/user/error.txt"),
    "run_summary-start": Case("run_summary", 1, "stops", "run/run.json"),
    "run_summary-end": Case("run_summary", 2, "fails", "run/run.json"),
    "report": Case("report", 1, "bookkeeping", "run/logs/report.html"),
    "job_result": Case("job_result", 1, "fails", "run/logs/job_result.txt"),
    "output": Case("output", 1, "fails", "run/output/parallel_run_step.txt"),
    "upload": Case("upload", 1, "fails", "file://TMP/uploaded", ("--output", "file://TMP/uploaded")),
    "side_input_copy": Case("side_input_copy", 1, "fails", "tmp/parallel_steps/side_inputs/", SIDE_INPUT),
    "detached": Case("detached", 1, "stops", "run/step.json", ("--detach",)),
}


def params():
    for name, case in CASES.items():
        for fault in FAULTS:
            yield pytest.param(case, fault, id=f"{name}-{fault}")


@pytest.fixture
def step(tmp_path, make_files, write_script):
    """`step(case, fault=None)`: `parallel-steps run` on FILES files, one worker, in the run directory `run`."""
    make_files(FILES)
    write_script(SCRIPT)
    (tmp_path / "side.txt").write_text("a side input\n")
    (tmp_path / "tmp").mkdir()

    def run(case: Case, fault: str | None = None):
        options = [o.replace("SIDE", str(tmp_path / "side.txt")).replace("TMP", str(tmp_path)) for o in case.options]
        env = {"TMPDIR": str(tmp_path / "tmp")}
        if fault:
            env["PARALLEL_STEPS_FAULT"] = f"{case.site}:{fault}:{case.nth}"
        return cli(
            "run", "--entry-script", "score.py", "--input", "data", "--mini-batch-size", "1",
            "--process-count-per-node", "1", "--run-dir", "run", *options, cwd=tmp_path, env=env, timeout=120,
        )  # fmt: skip

    return run


@pytest.mark.parametrize(("case", "fault"), params())
def test_a_refused_write_ends_in_one_line_and_a_rerun_resumes(tmp_path, step, case, fault):
    done = step(case, fault)
    told = done.stdout + done.stderr
    assert "Traceback" not in told, told
    where = case.where.replace("TMP", str(tmp_path)) if "://" in case.where else str(tmp_path / case.where)
    cause = write_cause(OSError(getattr(errno, fault), ""))
    if case.ends == "bookkeeping":
        assert done.returncode == 0, told
        assert done.stdout.startswith("Succeeded: "), told
        [warning] = [line for line in done.stderr.splitlines() if line.startswith(where)]
        assert warning.startswith(f"{where}: {cause}; "), warning
    else:
        assert done.returncode == 1, told
        line = done.stderr.splitlines()[-1] if case.ends == "stops" else done.stdout.splitlines()[0]
        line = line.removeprefix("parallel-steps: ").removeprefix("Failed: ")
        told_as = rf"{re.escape(where)}\S*: {cause} \(.+, then rerun the step in the same run directory: it resumes\)$"
        assert re.match(told_as, line) or (case.site == "side_input_copy" and re.search(told_as, line)), line
    ledger_whole(tmp_path / "run")
    output = tmp_path / "run" / "output"
    written = sorted(os.listdir(output)) if output.exists() else []
    assert written in ([], ["parallel_run_step.txt"]), written  # no partial file beside it
    if written:
        assert_every_row_once(output / "parallel_run_step.txt")  # delivered whole before the fault, or not at all
    if case.site == "run_index" and case.ends == "bookkeeping":
        listed = json.loads(cli("runs", "--json", cwd=tmp_path).stdout)
        assert [run["status"] for run in listed] == ["Succeeded"]  # mended from the run directory
        assert index_status(tmp_path / "runs") == "Succeeded"  # and written back

    rerun = step(case)
    if "--detach" in case.options:
        rerun = cli("wait", str(tmp_path / "run"), cwd=tmp_path, timeout=120)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert_every_row_once(output / "parallel_run_step.txt")


PIPELINE = """
type: pipeline
inputs:
  data: {type: uri_folder, path: data}
jobs:
  score:
    type: parallel
    inputs: {data: "${{parent.inputs.data}}"}
    outputs: {scores: {type: uri_file}}
    input_data: ${{inputs.data}}
    mini_batch_size: "1"
    task: {code: ., entry_script: score.py, append_row_to: "${{outputs.scores}}"}
"""


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("nth", [1, 2], ids=["at-the-start", "after-its-job"])
def test_a_refused_pipeline_record_ends_in_one_line_and_a_rerun_resumes(tmp_path, make_files, write_script, nth, fault):
    """The `pipeline` site: a pipeline run's record, refused when the run starts or once its job has run."""
    make_files(FILES)
    write_script(SCRIPT)
    (tmp_path / "pipeline.yml").write_text(PIPELINE)
    run = ("run", "pipeline.yml", "--set", "process_count_per_node=1")
    done = cli(*run, cwd=tmp_path, env={"PARALLEL_STEPS_FAULT": f"pipeline:{fault}:{nth}"})
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    [line] = [line for line in done.stderr.splitlines() if line.startswith("parallel-steps:")]  # past the progress
    cause = write_cause(OSError(getattr(errno, fault), ""))
    assert re.match(rf"parallel-steps: {tmp_path}/runs/pipelines/pipeline/\S+/pipeline.json: {cause} \(", line), line

    rerun = cli(*run, "--json", cwd=tmp_path)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert_every_row_once(Path(json.loads(rerun.stdout)["jobs"]["score"]["outputs"]["scores"]))


def ledger_whole(run_dir: Path) -> None:
    if not (run_dir / "ledger.sqlite").exists():
        return
    ledger = sqlite3.connect(run_dir / "ledger.sqlite")
    try:
        assert ledger.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        ledger.close()


def index_status(root: Path) -> str:
    index = sqlite3.connect(root / "index.sqlite")
    try:
        return str(index.execute("SELECT status FROM runs").fetchone()[0])
    finally:
        index.close()


def assert_every_row_once(output_file: Path) -> None:
    assert sorted(output_file.read_text().splitlines()) == [f"f{i:04d}.txt" for i in range(FILES)]


def sites_called() -> set[str]:
    """The site names of every `write_site("...")` call under src/."""
    found = set()
    for path in (ROOT / "src" / "parallel_steps").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "write_site" and node.args:
                name = node.args[0]
                assert isinstance(name, ast.Constant), f"{path}:{node.lineno}: write_site needs its name as a literal"
                found.add(name.value)
    return found


#: Sites refused by a test of their own, here or in another suite (`file::test`), as the matrix refuses the others.
ELSEWHERE = {
    "pipeline": "tests/core/test_write_faults.py::test_a_refused_pipeline_record_ends_in_one_line_and_a_rerun_resumes",
    "ray_job": "tests/ray/test_ray_job.py::test_a_refused_ray_job_file_ends_in_one_line_and_a_rerun_resumes",
}


def test_every_write_site_has_a_case():
    assert sites_called() == set(WRITE_SITES)
    assert {case.site for case in CASES.values()} | set(ELSEWHERE) == set(WRITE_SITES)
    for test in ELSEWHERE.values():  # each names a test that exists
        file, name = test.split("::")
        tree = ast.parse((ROOT / file).read_text())
        assert name in {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}, test
    text = (ROOT / "docs" / "reliability.md").read_text()
    table = text.split("## Where a run writes", 1)[1].split("\n## ", 1)[0]
    assert [site for site in WRITE_SITES if f"\n| `{site}` |" not in table] == []
