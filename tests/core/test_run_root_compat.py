"""Run roots written by an earlier release: a rerun reuses a completed run and resumes a killed one.

The fixture (tests/core/fixtures/run_root_before_layout/, made by its make_fixture.py with the release before
the package was laid out in folders) holds two steps and their run roots: `completed/`, one Succeeded run,
and `interrupted/`, a run whose driver was killed with three of its six mini-batches committed and the
other three pending (their pickled `MiniBatch` descriptors in its ledger). The runs name absolute paths
(their folders, the inputs; each mini-batch's fingerprint hashes the input paths with their sizes and
mtimes), so each test puts the fixture back where it was made, /tmp/parallel-steps-fixture/, with the inputs'
recorded mtimes, and reruns the steps with the command line of the code under test.
"""

import collections
import fcntl
import json
import os
import pickle
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from .conftest import cli_json, output_lines

FIXTURE = Path(__file__).parent / "fixtures" / "run_root_before_layout"
MANIFEST = json.loads((FIXTURE / "manifest.json").read_text())
ROOT = Path(MANIFEST["root"])  # /tmp/parallel-steps-fixture: where the runs were made, and what they name


@pytest.fixture
def old_runs(tmp_path):
    """The fixture at the path it was made at, with its inputs' mtimes; one test at a time holds that path
    (pytest-xdist runs tests side by side)."""
    with open(f"{ROOT}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        shutil.rmtree(ROOT, ignore_errors=True)
        shutil.copytree(FIXTURE / "root", ROOT)
        for name, mtime_ns in MANIFEST["mtimes_ns"].items():
            os.utime(ROOT / name, ns=(mtime_ns, mtime_ns))
        try:
            yield ROOT
        finally:
            shutil.rmtree(ROOT, ignore_errors=True)


@pytest.fixture
def same_version():
    """Reuse and resume hold within one version: the version is part of the reuse key, so a new version runs
    every step afresh once (CHANGELOG.md). What this suite checks is that a change of the code's layout
    alone, within a version, keeps the runs written before it."""
    import parallel_steps

    assert parallel_steps.__version__ == MANIFEST["version"], (
        f"parallel-steps {parallel_steps.__version__} reruns the fixture's runs of {MANIFEST['version']} afresh "
        "by design (the version is part of the reuse key): this fixture checks a layout change within a version"
    )


@pytest.fixture
def calls(tmp_path) -> Path:
    """Where the fixture's entry script notes each run() call (FIXTURE_CALLS): one line of file names each."""
    folder = tmp_path / "calls"
    folder.mkdir()
    return folder


def called(folder: Path) -> list[str]:
    """The files run() was called with, in order (each call's line)."""
    path = folder / "calls.txt"
    return path.read_text().split() if path.exists() else []


def run_dirs(run_root: Path) -> list[str]:
    return sorted(path.name for path in run_root.iterdir() if path.name.startswith("fixture-"))


@pytest.mark.usefixtures("same_version")
def test_a_completed_run_of_the_earlier_release_is_reused_without_running_the_entry_script(old_runs, calls):
    earlier = MANIFEST["completed"]
    run_dir = old_runs / earlier["run_dir"]

    code, summary = cli_json("run", old_runs / "completed" / "step.yaml", env={"FIXTURE_CALLS": str(calls)})

    assert code == 0, summary
    assert summary["status"] == "Succeeded"
    assert summary["reused"] is True
    assert summary["run_id"] == earlier["run_id"]
    assert (summary["workers_started"], summary["mini_batches_run"], summary["mini_batches_reused"]) == (0, 0, 2)
    assert called(calls) == [], "no worker ran the entry script"
    assert summary["output_file"] == str(run_dir / "output" / "parallel_run_step.txt")
    assert output_lines(summary) == earlier["rows"]  # every row once, in plan order
    assert run_dirs(old_runs / "completed" / "runs") == [earlier["run_id"]]


@pytest.mark.usefixtures("same_version")
def test_a_killed_run_of_the_earlier_release_resumes_in_its_run_directory(old_runs, calls):
    earlier = MANIFEST["interrupted"]
    run_dir = old_runs / earlier["run_dir"]

    code, summary = cli_json(
        "run", old_runs / "interrupted" / "step.yaml", "--run-dir", run_dir, env={"FIXTURE_CALLS": str(calls)}
    )

    assert code == 0, summary
    assert summary["status"] == "Succeeded"
    assert summary["run_id"] == earlier["run_id"]
    assert summary["run_dir"] == str(run_dir)
    assert summary["mini_batches_total"] == summary["mini_batches_succeeded"] == earlier["mini_batches"]
    assert called(calls) == earlier["pending"], "only the mini-batches the killed driver had not committed ran"
    assert output_lines(summary) == earlier["rows"]
    assert collections.Counter(output_lines(summary)) == collections.Counter(earlier["rows"])  # each once
    assert run_dirs(old_runs / "interrupted" / "runs") == [earlier["run_id"]]


@pytest.mark.usefixtures("same_version")
def test_a_rerun_over_the_earlier_release_run_root_reuses_what_the_killed_run_committed(old_runs, calls):
    earlier = MANIFEST["interrupted"]

    code, summary = cli_json("run", old_runs / "interrupted" / "step.yaml", env={"FIXTURE_CALLS": str(calls)})

    assert code == 0, summary
    assert summary["status"] == "Succeeded"
    assert summary["run_id"] != earlier["run_id"]  # a new run, taking the killed run's committed results
    assert (summary["mini_batches_reused"], summary["mini_batches_run"]) == (3, 3)
    assert called(calls) == earlier["pending"]
    assert output_lines(summary) == earlier["rows"]


def test_status_reads_the_earlier_release_runs(old_runs):
    completed, interrupted = MANIFEST["completed"], MANIFEST["interrupted"]

    code, summary = cli_json("status", completed["run_id"], "--run-root", old_runs / "completed" / "runs")
    assert code == 0, summary
    assert (summary["status"], summary["mini_batches_succeeded"]) == ("Succeeded", 2)

    # Its status is Failed (the driver is gone) on a machine of the name in its run.json, Running (it cannot
    # tell) on another: the ledger's states say the same on both.
    code, summary = cli_json("status", old_runs / interrupted["run_dir"], "--mini-batches")
    assert code == 0, summary
    assert summary["run_id"] == interrupted["run_id"]
    assert summary["mini_batches_pending"] == 3
    assert [(Path(row["source"]).name, row["state"]) for row in summary["mini_batches"]] == [
        *((name, "succeeded") for name in interrupted["succeeded"]),
        *((name, "pending") for name in interrupted["pending"]),
    ]


def test_the_mini_batches_pickled_in_the_earlier_release_ledger_still_load(old_runs):
    """The killed run's ledger holds its pending mini-batches as pickled `MiniBatch` descriptors (written when
    its driver restarted after a system error), under parallel_steps.inputs.minibatch.MiniBatch."""
    from parallel_steps.inputs.minibatch import MiniBatch

    interrupted = MANIFEST["interrupted"]
    ledger = old_runs / interrupted["run_dir"] / "ledger.sqlite"
    with closing(sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)) as db:
        rows = db.execute("SELECT idx, descriptor FROM mini_batches WHERE state=0 ORDER BY idx").fetchall()

    loaded = [pickle.loads(descriptor) for _, descriptor in rows]

    assert all(isinstance(mini_batch, MiniBatch) for mini_batch in loaded)
    assert [mini_batch.index for mini_batch in loaded] == [idx for idx, _ in rows] == [3, 4, 5]
    assert [mini_batch.kind for mini_batch in loaded] == ["files"] * 3
    assert [mini_batch.paths for mini_batch in loaded] == [
        (str(old_runs / "interrupted" / "data" / name),) for name in interrupted["pending"]
    ]
    assert [mini_batch.describe() for mini_batch in loaded] == [
        str(old_runs / "interrupted" / "data" / name) for name in interrupted["pending"]
    ]
