"""Reuse and resume: whole-step reuse, per-mini-batch reuse keyed on inputs, resume after any failure."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from parallel_steps import ParallelRunConfig, StepFailed
from parallel_steps.run.step import reuse_key, run_step

from .conftest import output_lines

COUNTING = """
import os, sys, time
from pathlib import Path
SLEEP = float(os.environ.get("SLEEP", "0"))
BLOCK_FROM = int(os.environ.get("BLOCK_FROM", "-1"))  # files fNNNN from this one on never finish
def run(mini_batch):
    first = Path(mini_batch[0]).name
    with open(Path("calls") / first, "a") as calls:
        calls.write("x")
    time.sleep(SLEEP)
    if 0 <= BLOCK_FROM <= int(first[1:5]):
        time.sleep(600)  # until the driver is killed: the worker's watchdog then ends it
    tag = sys.argv[1] if len(sys.argv) > 1 else ""
    return [tag + Path(p).read_text().strip() for p in mini_batch]
"""


@pytest.fixture
def counting(tmp_path, make_files, write_script):
    make_files(50)
    write_script(COUNTING)
    (tmp_path / "calls").mkdir()
    return tmp_path


def calls(folder: Path) -> dict[str, int]:
    return {p.name: len(p.read_text()) for p in (folder / "calls").iterdir()}


def reset_calls(folder: Path) -> None:
    for path in (folder / "calls").iterdir():
        path.unlink()


def config(**fields):
    fields = {
        "entry_script": "score.py",
        "inputs": ["data"],
        "mini_batch_size": 5,
        "process_count_per_node": 2,
        "output": "out",
        **fields,
    }
    return ParallelRunConfig(**fields)


class TestWholeStepReuse:
    def test_identical_rerun_is_reused_without_starting_a_worker(self, counting):
        first = run_step(config())
        before = Path(first["output_file"]).read_bytes()
        reset_calls(counting)
        again = run_step(config())
        assert again["reused"] is True
        assert again["run_id"] == first["run_id"]
        assert (again["workers_started"], again["mini_batches_run"], again["mini_batches_reused"]) == (0, 0, 10)
        assert calls(counting) == {}
        assert Path(again["output_file"]).read_bytes() == before
        assert len([p for p in Path("runs").iterdir() if p.name.startswith("parallel-run")]) == 1

    def test_reuse_restores_the_output_into_another_folder(self, counting):
        first = run_step(config())
        again = run_step(config(output="elsewhere"))
        assert again["reused"]
        assert Path("elsewhere/parallel_run_step.txt").read_bytes() == Path(first["output_file"]).read_bytes()

    def test_reuse_with_the_default_output_folder_points_at_the_earlier_output(self, counting):
        first = run_step(config(output=None))
        again = run_step(config(output=None))
        assert again["reused"]
        assert again["output_file"] == first["output_file"]
        assert len([p for p in Path("runs").iterdir() if p.name.startswith("parallel-run")]) == 1

    def test_reuse_into_a_run_folder_the_caller_chose_keeps_output_and_summary_there(self, counting):
        first = run_step(config(output=None), run_dir="task-1")
        again = run_step(config(output=None), run_dir="task-2")
        assert again["reused"]
        assert again["output_file"] == str(Path("task-2/output/parallel_run_step.txt").absolute())
        assert Path(again["output_file"]).read_text() == Path(first["output_file"]).read_text()
        assert json.loads(Path("task-2/run.json").read_text())["reused"] is True

    def test_a_stricter_threshold_is_not_satisfied_by_an_earlier_looser_run(self, counting):
        (counting / "score.py").write_text(
            COUNTING.replace(
                "    return [tag",
                "    mini_batch = mini_batch[1:] if first == 'f0000.txt' else mini_batch\n    return [tag",
            )
        )
        loose = run_step(config())  # error_threshold -1: the item without a result is no failure
        assert (loose["items_failed"], loose["items_without_result"]) == (0, 1)
        with pytest.raises(StepFailed, match="error_threshold 0 exceeded: 1 items failed"):
            run_step(config(error_threshold=0))

    def test_allow_reuse_false_always_runs(self, counting):
        run_step(config())
        reset_calls(counting)
        again = run_step(config(allow_reuse=False))
        assert again["reused"] is False
        assert len(calls(counting)) == 10

    @pytest.mark.parametrize(
        "change",
        [
            dict(process_count_per_node=1),
            dict(run_invocation_timeout=5),
            dict(logging_level="DEBUG"),
            dict(node_count=2),
        ],
    )
    def test_speed_only_fields_keep_the_key(self, counting, change):
        assert reuse_key(config()) == reuse_key(config(**change))
        run_step(config())
        assert run_step(config(**change))["reused"] is True


class TestPerMiniBatchReuse:
    def test_changing_one_file_reruns_only_its_mini_batch(self, counting):
        run_step(config())
        reset_calls(counting)
        (counting / "data" / "f0023.txt").write_text("changed\n")
        partial = run_step(config())
        assert calls(counting) == {"f0020.txt": 1}
        assert (partial["mini_batches_reused"], partial["mini_batches_run"], partial["reused"]) == (9, 1, False)
        fresh = run_step(config(allow_reuse=False, output="fresh"))
        assert Path(partial["output_file"]).read_bytes() == Path(fresh["output_file"]).read_bytes()
        assert "changed" in output_lines(partial)

    @pytest.mark.parametrize("change", ["script", "argument", "side_input", "mini_batch_size"])
    def test_result_affecting_changes_rerun_everything(self, counting, change):
        (counting / "model").mkdir()
        (counting / "model" / "weights.txt").write_text("v1")
        base = dict(side_inputs={"model": "model"})
        run_step(config(**base))
        reset_calls(counting)
        fields = dict(base)
        if change == "script":
            (counting / "score.py").write_text(COUNTING + "\n# edited\n")
        elif change == "argument":
            fields["arguments"] = ["v2:"]
        elif change == "side_input":
            (counting / "model" / "weights.txt").write_text("v2 weights")
        else:
            fields["mini_batch_size"] = 10
        summary = run_step(config(**fields))
        assert summary["mini_batches_reused"] == 0
        assert summary["reused"] is False
        assert sum(calls(counting).values()) == summary["mini_batches_total"]

    def test_content_fingerprints_ignore_touching_files(self, counting):
        run_step(config(reuse_fingerprint="content"))
        os.utime(counting / "data" / "f0001.txt", (1, 1))
        assert run_step(config(reuse_fingerprint="content"))["reused"] is True
        os.utime(counting / "data" / "f0001.txt", (2, 2))
        assert run_step(config())["reused"] is False, "stat fingerprints see the new mtime"


class TestResume:
    def test_failed_threshold_run_reruns_only_failed_mini_batches_after_the_fix(self, counting):
        bad = counting / "data" / "f0012.txt"
        bad.write_text("oops\n")
        (counting / "score.py").write_text(
            COUNTING.replace(
                "    tag = ",
                "    if any(Path(p).read_text().startswith('oops') for p in mini_batch):\n"
                "        raise ValueError('bad input')\n    tag = ",
            )
        )
        with pytest.raises(StepFailed) as failed:
            run_step(config(error_threshold=0, run_max_try=1, process_count_per_node=1))
        done = failed.value.summary["mini_batches_succeeded"]
        assert failed.value.summary["mini_batches_failed"] == 1
        reset_calls(counting)
        bad.write_text("12\n")
        summary = run_step(config(error_threshold=0, run_max_try=1))
        assert summary["mini_batches_reused"] == done
        assert summary["mini_batches_run"] == 10 - done
        assert "f0010.txt" in calls(counting)
        assert sum(calls(counting).values()) == 10 - done
        assert sorted(output_lines(summary), key=int) == [str(i) for i in range(50)]

    def test_rerun_in_the_same_run_dir_resumes(self, counting, monkeypatch):
        monkeypatch.setenv("SLEEP", "0.05")
        cancel = threading.Event()

        def cancel_mid_run() -> None:  # once ten mini-batches have started: the run is well under way
            _wait_for(lambda: sum(calls(counting).values()) >= 10)
            cancel.set()

        threading.Thread(target=cancel_mid_run, daemon=True).start()
        with pytest.raises(StepFailed) as canceled:
            run_step(config(allow_reuse=False, mini_batch_size=1), run_dir="task-run", cancel=cancel)
        assert canceled.value.summary["status"] == "Canceled"
        done = canceled.value.summary["mini_batches_succeeded"]
        reset_calls(counting)
        summary = run_step(config(allow_reuse=False, mini_batch_size=1), run_dir="task-run")
        assert summary["run_id"] == canceled.value.summary["run_id"]
        assert sum(calls(counting).values()) == 50 - done  # only the rest ran
        # The counts are the whole run's: its own earlier results are not "reused" from another run.
        assert (summary["mini_batches_reused"], summary["mini_batches_run"]) == (0, 50)
        assert summary["workers_started"] == canceled.value.summary["workers_started"] + 2
        assert sorted(output_lines(summary), key=int) == [str(i) for i in range(50)]


@pytest.mark.parametrize("committed", [None, 0, 1, 25, 49], ids=["starting", "0", "1", "25", "49"])
def test_driver_sigkilled_after_the_nth_committed_mini_batch(counting, tmp_path, committed):
    """Killed with `committed` mini-batches in the ledger and the next ones in run() on both workers (they
    never finish), or while starting (as soon as its run folder exists): the rerun reuses exactly what was
    committed and recomputes exactly what was in flight, every row once."""
    home = tmp_path / "home"
    in_run = None if committed is None else min(2, 50 - committed)  # at most one per worker in any case

    def ready() -> bool:
        if committed is None:
            return any(home.glob("parallel-run*"))
        return len(calls(counting)) == committed + in_run and _committed(home) == committed

    # 10 ms each: not "quick" (whose results may wait for the next), so each result is sent as it is done.
    env = {**os.environ, "PARALLEL_STEPS_HOME": str(home), "SLEEP": "0.01", "BLOCK_FROM": str(committed or 0)}
    command = [
        sys.executable,
        "-m",
        "parallel_steps.cli",
        "run",
        "--entry-script",
        "score.py",
        "--input",
        "data",
        "--mini-batch-size",
        "1",
        "--process-count-per-node",
        "2",
        "--output",
        "out",
        "--json",
    ]
    driver = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(ready)
        workers = psutil.Process(driver.pid).children(recursive=True)
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    _wait_for(lambda: not any(_alive(worker) for worker in workers))  # their watchdogs end them
    in_flight = set(calls(counting)) - set(_committed_names(home))
    assert len(in_flight) == in_run or (in_run is None and len(in_flight) <= 2)
    assert _committed(home) == (committed or 0)

    rerun = subprocess.run(command, env={**env, "BLOCK_FROM": "-1"}, capture_output=True, text=True, timeout=120)

    assert rerun.returncode == 0, rerun.stderr
    summary = json.loads(rerun.stdout)
    assert sorted(output_lines(summary), key=int) == [str(i) for i in range(50)]
    assert summary["mini_batches_reused"] == (committed or 0)
    assert {name for name, count in calls(counting).items() if count > 1} == in_flight
    assert sum(calls(counting).values()) == 50 + len(in_flight)  # each mini-batch once, those in flight twice


def _wait_for(condition, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the run never got there"
        time.sleep(0.02)


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _committed(home: Path) -> int:
    return len(_committed_names(home))


def _committed_names(home: Path) -> list[str]:
    """The mini-batches the ledger of the one run under `home` holds as succeeded (none before it exists,
    or before it has its tables)."""
    from parallel_steps.store.ledger import Ledger

    paths = list(home.glob("parallel-run*/ledger.sqlite"))
    ledger = Ledger.open_readonly(paths[0]) if paths else None
    if ledger is None:
        return []
    try:
        return [Path(row["source"]).name for row in ledger.rows() if row["state"] == "succeeded"]
    finally:
        ledger.close()


def test_an_earlier_ledger_of_another_layout_is_skipped_not_fatal(tmp_path, make_files, write_script):
    """A run root kept across an upgrade: an earlier run's ledger with other columns is not a source."""
    import sqlite3

    make_files(4)
    write_script("def run(mini_batch):\n    return mini_batch\n")
    config = ParallelRunConfig(entry_script="score.py", inputs=["data"], mini_batch_size=2, output="out")
    first = run_step(config)
    db = sqlite3.connect(Path(first["run_dir"]) / "ledger.sqlite")
    db.execute("ALTER TABLE mini_batches DROP COLUMN part_offset")
    db.execute("PRAGMA user_version=0")  # as the layout before versioning
    db.commit()
    db.close()

    second = run_step(config)

    assert second["status"] == "Succeeded"
    assert second["mini_batches_run"] == 2
    assert output_lines(second) == [f"data/f{i:04d}.txt" for i in range(4)]
