"""Fault tolerance and observability: hangs, fault policies, same-error stops, OOM, restarts, perf, profiles."""

import json
import pstats
import re
from pathlib import Path

import pandas as pd
import pytest

from parallel_steps import ParallelRunConfig, StepFailed
from parallel_steps.pool.base import tree_rss
from parallel_steps.pool.local import watchdog as local_watchdog
from parallel_steps.run.step import run_step

from .conftest import cli_json, output_lines


def config(**fields):
    fields = {"entry_script": "score.py", "inputs": ["data"], "process_count_per_node": 1, **fields}
    return ParallelRunConfig(**fields)


def master_role(summary) -> str:
    return (Path(summary["run_dir"]) / "logs/sys/master_role.txt").read_text()


def test_hung_run_is_killed_after_the_timeout_with_its_stack_dumped(make_files, write_script):
    make_files(1)
    script = write_script(
        "import threading\n\n\ndef run(mini_batch):\n    threading.Event().wait()\n    return mini_batch\n"
    )
    summary = run_step(config(run_invocation_timeout=1, run_max_try=1))
    assert summary["mini_batches_failed"] == 1
    dump = (Path(summary["run_dir"]) / "logs/user/error/node0/process000.txt").read_text()
    assert "run() exceeded 1 s on mini-batch 0; stacks of every thread:" in dump
    assert f'File "{script}", line 5 in run' in dump
    assert "hung at score.py line 5 in run (innermost: threading.py" in master_role(summary)


def test_a_hung_worker_with_a_full_socket_is_still_timed_out(tmp_path, write_script):
    """While one worker hangs, the other's quick results deepen every queue: the hung worker's
    refills (long paths, hundreds of kilobytes) no longer fit its socket. The driver must not
    wait on that socket, or the timeout that frees the worker never fires."""
    folder = tmp_path / "data" / ("deep" * 50)
    folder.mkdir(parents=True)
    for i in range(5000):
        (folder / f"f{i:05d}.txt").touch()
    write_script(
        "import time\nfrom pathlib import Path\n\n\ndef run(mini_batch):\n"
        "    if mini_batch[0].endswith('f00000.txt') and not Path('hung').exists():\n"
        "        Path('hung').touch()\n"
        "        time.sleep(600)\n"
        "    return mini_batch\n"
    )
    code, summary = cli_json(
        "run",
        "--entry-script",
        "score.py",
        "--input",
        "data",
        "--mini-batch-size",
        "10",
        "--process-count-per-node",
        "2",
        "--run-invocation-timeout",
        "3",
        timeout=120,
    )
    assert (code, summary["status"], summary["attempts_retried"]) == (0, "Succeeded", 1)
    assert sorted(output_lines(summary)) == sorted(f"data/{folder.name}/{p.name}" for p in folder.iterdir())


class TestFaultPolicies:
    SCRIPT = """
from pathlib import Path
def run(mini_batch):
    kind = Path(mini_batch[0]).read_text().strip()
    marks = Path("marks") / Path(mini_batch[0]).name
    if not marks.exists():
        marks.touch()
        if kind == "0":
            raise ConnectionError("connection reset by peer")
        if kind == "1":
            raise KeyError("label_17")
    return mini_batch
"""

    @pytest.fixture
    def two_kinds(self, tmp_path, make_files, write_script):
        (tmp_path / "data").mkdir()
        for name, kind in [("a", "0"), ("b", "1"), ("c", "2")]:
            (tmp_path / "data" / name).write_text(kind)
        (tmp_path / "marks").mkdir()
        write_script(self.SCRIPT)

    def test_exit_code_and_error_msg_retries_only_retryable_errors(self, two_kinds):
        summary = run_step(
            config(
                mini_batch_size=1, fault_tolerant_policy="ExitCodeAndErrorMsg", retryable_errors=["connection reset"]
            )
        )
        assert summary["attempts_retried"] == 1, "the connection reset is retried"
        assert summary["mini_batches_failed"] == 1, "the KeyError is not"
        assert output_lines(summary) == ["data/a", "data/c"]

    def test_on_failure_retries_everything_and_never_retries_nothing(self, two_kinds, tmp_path):
        assert run_step(config(mini_batch_size=1))["attempts_retried"] == 2
        for mark in (tmp_path / "marks").iterdir():
            mark.unlink()
        never = run_step(config(mini_batch_size=1, fault_tolerant_policy="Never", allow_reuse=False))
        assert (never["attempts_retried"], never["mini_batches_failed"]) == (0, 2)

    def test_built_in_patterns_cover_transient_errors(self, make_files, write_script, tmp_path):
        make_files(1)
        (tmp_path / "marks").mkdir()
        write_script(
            "from pathlib import Path\ndef run(mb):\n    if not Path('marks/x').exists():\n"
            "        Path('marks/x').touch()\n        raise RuntimeError('CUDA out of memory. Tried to "
            "allocate 2.00 GiB')\n    return mb\n"
        )
        summary = run_step(config(fault_tolerant_policy="ExitCodeAndErrorMsg"))
        assert (summary["attempts_retried"], summary["mini_batches_failed"]) == (1, 0)


def test_max_same_error_stops_a_deterministic_bug_early(tmp_path, make_files, write_script):
    make_files(1000)
    write_script("def run(mini_batch):\n    raise ValueError(f'cannot parse {mini_batch[0]} at byte 17')\n")
    with pytest.raises(StepFailed) as failed:
        run_step(config(mini_batch_size=1, max_same_error=5, process_count_per_node=2))
    summary = failed.value.summary
    assert summary["status_reason"].startswith(
        "max_same_error 5 reached: the same error failed 5 mini-batches: ValueError: cannot parse data/f0"
    )
    done = summary["mini_batches_failed"] + summary["mini_batches_succeeded"]
    assert done <= 10, "stops after about 5 failed mini-batches, not after 1,000"


def test_max_tolerated_failure_rate(tmp_path, make_files, write_script):
    make_files(40)
    write_script("def run(mb):\n    if int(open(mb[0]).read()) % 2:\n        raise OSError('disk')\n    return mb\n")
    with pytest.raises(StepFailed, match=r"max_tolerated_failure_rate 0.3 exceeded: \d+ of \d+ finished"):
        run_step(config(mini_batch_size=1, run_max_try=1, max_tolerated_failure_rate=0.3))


class TestMemory:
    def test_worker_above_the_limit_is_stopped_and_the_retry_succeeds(self, tmp_path, make_files, write_script):
        make_files(1)
        write_script(
            "import time\nfrom pathlib import Path\ndef run(mb):\n    if not Path('hog').exists():\n"
            "        Path('hog').touch()\n        data = b'x' * (400 << 20)\n        time.sleep(30)\n"
            "    return mb\n"
        )
        summary = run_step(config(worker_memory_limit="200MB"))
        assert summary["attempts_retried"] == 1
        assert output_lines(summary) == ["data/f0000.txt"]
        attempts = pd.read_csv(Path(summary["run_dir"]) / "logs/sys/job_report/processed_mini-batches.csv")
        assert attempts["outcome"].tolist() == ["out_of_memory", "succeeded"]
        assert re.match(r"OutOfMemory: worker used \d+ MB, above worker_memory_limit 200 MB", attempts["error"][0])

    def test_sigkill_with_high_memory_is_reported_as_likely_out_of_memory(
        self, make_files, write_script, tmp_path, monkeypatch
    ):
        """The worker is killed once the pool has sampled its full allocation (a file says so), as the kernel would."""
        sampled = tmp_path / "sampled"

        def rss(pid):
            value = tree_rss(pid)
            if value >= 1200 << 20:
                sampled.touch()
            return value

        monkeypatch.setattr(local_watchdog, "tree_rss", rss)
        make_files(1)
        write_script(
            "import os, signal, time\ndef run(mb):\n    data = b'x' * (1200 << 20)\n"
            f"    while not os.path.exists({str(sampled)!r}):\n        time.sleep(0.05)\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n"
        )
        summary = run_step(config(run_max_try=1))
        reported = re.search(r"SIGKILL\(-9\): likely out of memory .*last RSS (\d+) MB", master_role(summary))
        assert reported, master_role(summary)
        assert 1200 <= int(reported[1]) < 1500


CRASH_ONCE = """
import os, time
from pathlib import Path
def run(mb):
    time.sleep(0.05)
    if mb[0].endswith("0005.txt") and not Path("crashed").exists():
        Path("crashed").touch()
        os._exit(1)
    return mb
"""


@pytest.fixture
def replacement_fails_once(monkeypatch):
    """The driver's own system error: starting a replacement worker fails once (say, out of file descriptors)."""
    from parallel_steps.pool.local.pool import LocalWorkerPool

    original, failures = LocalWorkerPool.replace, []

    def replace(self, worker):
        if not failures:
            failures.append(worker)
            raise OSError(24, "Too many open files")
        return original(self, worker)

    monkeypatch.setattr(LocalWorkerPool, "replace", replace)


def test_driver_restarts_after_a_system_error_and_resumes(make_files, write_script, replacement_fails_once):
    make_files(30)
    write_script(CRASH_ONCE)
    events = []
    summary = run_step(config(mini_batch_size=1, max_job_restarts=2, process_count_per_node=2), on_event=events.append)
    assert summary["status"] == "Succeeded"
    assert [r["reason"] for r in summary["restarts"]] == ["OSError: [Errno 24] Too many open files"]
    assert json.loads((Path(summary["run_dir"]) / "run.json").read_text())["restarts"] == summary["restarts"]
    assert "restart 1 of 2 after a system error: OSError: [Errno 24] Too many open files" in master_role(summary)
    assert sorted(output_lines(summary)) == [f"data/f{i:04d}.txt" for i in range(30)]
    assert summary["items_succeeded"] == 30
    assert summary["mini_batches_succeeded"] == 30
    assert "restart" in [e["type"] for e in events]
    # The counts are the whole run's: two workers, then two more after the restart; what the run
    # committed before it is its own result, not "reused".
    assert summary["workers_started"] == 4
    assert (summary["mini_batches_reused"], summary["mini_batches_run"]) == (0, 30)


def test_system_error_without_restarts_fails_the_run(make_files, write_script, replacement_fails_once):
    make_files(10)
    write_script(CRASH_ONCE)
    with pytest.raises(StepFailed, match=r"system error: OSError: \[Errno 24\] Too many open files"):
        run_step(config(mini_batch_size=1))


def test_a_broken_progress_callback_does_not_break_the_run(make_files, write_script):
    make_files(3)
    write_script("def run(mb):\n    return mb\n")

    def broken(snapshot):
        raise OSError("boom")

    summary = run_step(config(), on_progress=broken)
    assert summary["status"] == "Succeeded"
    assert "on_progress callback failed" in master_role(summary)


class TestJobLevelTimeouts:
    def test_no_progress_fails_the_job(self, make_files, write_script):
        make_files(2)
        write_script("import time\ndef run(mb):\n    time.sleep(30)\n    return mb\n")
        with pytest.raises(StepFailed, match=r"no mini-batch completed for 2 s \(progress_update_timeout\)"):
            run_step(config(progress_update_timeout=2))

    def test_hang_detection_off_and_entry_script_hang_timeout(self, make_files, write_script):
        make_files(2)
        write_script(
            "import time\nfrom parallel_steps import EntryScript\ndef run(mb):\n"
            "    with EntryScript().hang_timeout(20):\n        time.sleep(2.5)\n    return mb\n"
        )
        summary = run_step(config(mini_batch_size=1, run_invocation_timeout=1, progress_update_timeout=1))
        assert summary["mini_batches_succeeded"] == 2
        assert summary["attempts_retried"] == 0
        assert "set the run() timeout of its current mini-batch to 20 s" in master_role(summary)
        write_script("import time\ndef run(mb):\n    time.sleep(2)\n    return mb\n")
        summary = run_step(config(progress_update_timeout=1, hang_detection=False))
        assert summary["status"] == "Succeeded"

    def test_first_task_creation_timeout(self, make_files, write_script):
        make_files(2)
        write_script("import time\ndef init():\n    time.sleep(30)\ndef run(mb):\n    return mb\n")
        with pytest.raises(StepFailed, match="within first_task_creation_timeout 1 s"):
            run_step(config(first_task_creation_timeout=1))


SAMPLED = """
import time
from pathlib import Path
from parallel_steps import EntryScript
def run(mb):
    logs = Path(EntryScript().log_dir).parents[2]  # logs/user/entry_script_log/<node>
    usage = logs / "perf" / EntryScript().node_id / "node_resource_usage.csv"
    while not usage.exists() or len(usage.read_text().splitlines()) < 1 + 3:  # the header and three samples
        time.sleep(0.02)
    return mb
"""


def test_perf_files_sampled_at_the_interval_and_profiles_load(make_files, write_script):
    """The monitor samples while run() goes (run() returns once it has seen three samples)."""
    make_files(2)
    write_script(SAMPLED)
    summary = run_step(config(mini_batch_size=1, resource_monitor_interval=0.1, profiling_module="cProfile"))
    assert summary["mini_batches_succeeded"] == 2
    perf = Path(summary["run_dir"]) / "logs/perf/node0"
    node = pd.read_csv(perf / "node_resource_usage.csv")
    assert len(node) >= 3
    assert {"cpu_percent", "memory_used_mb"} <= set(node.columns)
    processes = pd.read_csv(perf / "processes_resource_usage.csv")
    assert set(processes["process_name"]) == {"process000"}
    assert processes["rss_mb"].dropna().gt(0).all()
    assert len(pd.read_csv(perf / "node_disk_usage.csv")) == len(node)
    stats = pstats.Stats(str(Path(summary["run_dir"]) / "logs/sys/node/node0/process000.profile"))
    assert any(name == "run" for _, _, name in stats.stats)


def test_events_reach_the_callback(make_files, write_script):
    make_files(4)
    write_script(
        "import os\ndef run(mb):\n    if mb[0].endswith('2.txt'):\n        os._exit(3)\n"
        "    if mb[0].endswith('1.txt'):\n        raise ValueError('x')\n    return mb\n"
    )
    events = []
    with pytest.raises(StepFailed):
        run_step(config(mini_batch_size=1, run_max_try=1, error_threshold=1), on_event=events.append)
    kinds = [e["type"] for e in events]
    assert kinds[0] == "job_started"
    assert kinds[-1] == "job_finished"
    assert {"mini_batch_failed", "worker_replaced", "threshold_exceeded"} <= set(kinds)
