"""A local worker takes the temporary folder its driver resolved, rather than resolving it again: tempfile's
first question for the folder writes a probe file in it, and a worker killed at that moment (a run ended
while its workers start) left that file behind. A step that sets TMPDIR for its workers has them resolve it."""

import tempfile

import pytest

from parallel_steps import ParallelRunConfig, run_step

from .conftest import output_lines

TEMPORARY = """
import tempfile

def run(mini_batch):
    return [str(tempfile.tempdir) for _ in mini_batch]
"""


@pytest.fixture
def folders(tmp_path, monkeypatch):
    resolved, environment = tmp_path / "resolved", tmp_path / "environment"
    resolved.mkdir()
    environment.mkdir()
    monkeypatch.setenv("TMPDIR", str(environment))
    monkeypatch.setattr(tempfile, "tempdir", str(resolved))  # what this process resolved
    return resolved, environment


def test_workers_take_the_folder_the_driver_resolved(folders, make_files, write_script):
    resolved, _ = folders
    config = ParallelRunConfig(entry_script=str(write_script(TEMPORARY)), inputs=[str(make_files(3))])
    assert set(output_lines(run_step(config))) == {str(resolved)}


def test_a_step_that_sets_tmpdir_has_its_workers_resolve_it(folders, tmp_path, make_files, write_script):
    own = tmp_path / "own"
    own.mkdir()
    config = ParallelRunConfig(
        entry_script=str(write_script(TEMPORARY)),
        inputs=[str(make_files(3))],
        environment_variables={"TMPDIR": str(own)},
    )
    assert set(output_lines(run_step(config))) == {str(own)}


KILLED_WITH_COPIES = """
import os, signal
from pathlib import Path

def run(mini_batch):  # the copies of its objects are on disk: the first worker is killed with them
    if not Path("killed").exists():
        Path("killed").touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return [os.path.basename(path) for path in mini_batch]
"""


def test_a_worker_killed_with_copies_of_objects_leaves_nothing_in_the_temporary_folder(folders, tmp_path, write_script):
    resolved, _ = folders
    objects = tmp_path / "objects"
    objects.mkdir()
    names = [f"f{i}.txt" for i in range(6)]
    for name in names:
        (objects / name).write_text(name)
    config = ParallelRunConfig(
        entry_script=str(write_script(KILLED_WITH_COPIES)),
        inputs=[f"file://{objects}"],
        mini_batch_size=3,
        process_count_per_node=1,
    )
    summary = run_step(config)
    assert summary["attempts_retried"] == 1
    assert sorted(output_lines(summary)) == names
    assert list(resolved.iterdir()) == []  # the pool removed the killed worker's copies
