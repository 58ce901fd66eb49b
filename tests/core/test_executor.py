"""The core executor on the local backend: exactly-once output under faults, thresholds, GPUs, logs."""

import gzip
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest

from parallel_steps import ParallelRunConfig, ParallelRunStep, StepFailed, TabularDataset
from parallel_steps.run.step import run_step

from .conftest import cli, cli_json, output_lines

ECHO = """
def run(mini_batch):
    return [open(p).read().strip() for p in mini_batch]
"""

# Each fault strikes on the first attempt of its mini-batches only (a marker file remembers).
FAULTS = """
import os, signal, time
from pathlib import Path

MARKS = Path(os.environ["MARKS"])

def run(mini_batch):
    first = int(Path(mini_batch[0]).read_text())
    mark = MARKS / str(first)
    if not mark.exists():
        mark.touch()
        kind = {0: "raise", 10: "exit", 20: "sigkill", 30: "hang"}.get(first % 40)
        if kind == "raise":
            raise ValueError(f"bad batch {first}")
        if kind == "exit":
            os._exit(1)
        if kind == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        if kind == "hang":
            time.sleep(60)
    return [Path(p).read_text().strip() for p in mini_batch]
"""


def step(**fields):
    fields.setdefault("entry_script", "score.py")
    fields.setdefault("inputs", ["data"])
    fields.setdefault("process_count_per_node", 2)
    return ParallelRunConfig(**fields)


class TestExactlyOnce:
    def test_raise_exit_sigkill_and_hang_are_retried_and_every_row_appears_once(
        self, tmp_path, make_files, write_script, monkeypatch
    ):
        make_files(160)
        write_script(FAULTS)
        (tmp_path / "marks").mkdir()
        config = step(
            mini_batch_size=10, run_invocation_timeout=3, environment_variables={"MARKS": str(tmp_path / "marks")}
        )
        summary = run_step(config)
        assert summary["status"] == "Succeeded"
        assert sorted(output_lines(summary), key=int) == [str(i) for i in range(160)]
        # batches starting at 0, 10, 20, 30 (mod 40) each fail once: 4 kinds x 4 = 16 minus the clean 12 ...
        faulted = [first for first in range(0, 160, 10) if first % 40 in (0, 10, 20, 30)]
        assert summary["attempts_retried"] == len(faulted)
        assert summary["mini_batches_failed"] == 0
        assert summary["items_failed"] == 0
        attempts = pd.read_csv(Path(summary["run_dir"]) / "logs/sys/job_report/processed_mini-batches.csv")
        outcomes = attempts.groupby("outcome").size().to_dict()
        assert outcomes == {"succeeded": 16, "failed": 4, "crashed": 8, "timed_out": 4}

    def test_rows_keep_mini_batch_order(self, make_files, write_script):
        make_files(95)
        write_script(
            "import random, time\ndef run(mb):\n    time.sleep(random.random() / 50)\n"
            "    return [open(p).read().strip() for p in mb]\n"
        )
        summary = run_step(step(mini_batch_size=5))
        assert output_lines(summary) == [str(i) for i in range(95)]


class TestThresholds:
    SCRIPT = """
def run(mini_batch):
    if any(open(p).read().strip() in BAD for p in mini_batch):
        raise RuntimeError("bad item in " + mini_batch[0])
    return [open(p).read().strip() for p in mini_batch]
BAD = set(open("bad.txt").read().split())
"""

    def test_failure_beyond_run_max_try_counts_the_items_as_failed(self, tmp_path, make_files, write_script):
        make_files(20)
        write_script(self.SCRIPT)
        (tmp_path / "bad.txt").write_text("3")
        summary = run_step(step(mini_batch_size=2, run_max_try=2))
        assert summary["status"] == "Succeeded"
        assert (summary["items_failed"], summary["mini_batches_failed"], summary["attempts_retried"]) == (2, 1, 1)
        assert len(output_lines(summary)) == 18

    @pytest.mark.parametrize(
        ("threshold", "bad", "fails"), [(2, "1 5", False), (2, "1 5 9", True), (-1, "1 3 5 7 9", False)]
    )
    def test_error_threshold_fails_on_item_n_plus_1(self, tmp_path, make_files, write_script, threshold, bad, fails):
        make_files(10)
        write_script(self.SCRIPT)
        (tmp_path / "bad.txt").write_text(bad)
        config = step(mini_batch_size=1, run_max_try=1, error_threshold=threshold)
        if not fails:
            assert run_step(config)["items_failed"] == len(bad.split())
            return
        with pytest.raises(StepFailed) as failed:
            run_step(config)
        summary = failed.value.summary
        assert summary["status"] == "Failed"
        assert summary["status_reason"].startswith("error_threshold 2 exceeded: 3 items failed")
        assert "RuntimeError: bad item in data/f000" in summary["status_reason"]
        assert summary["output_file"] is None
        result = Path(summary["job_result"]).read_text()
        assert "error_threshold 2 exceeded" in result
        assert "logs/user/error.txt" in result

    def test_short_return_counts_missing_items(self, make_files, write_script):
        make_files(10)
        write_script("def run(mb):\n    return [p for p in mb][:-1]\n")
        with pytest.raises(StepFailed) as failed:
            run_step(step(mini_batch_size=5, error_threshold=1))
        assert failed.value.summary["items_failed"] == 2
        summary = run_step(step(mini_batch_size=5, error_threshold=2))
        assert (summary["items_failed"], summary["items_succeeded"], summary["mini_batches_failed"]) == (2, 8, 0)

    def test_mini_batch_error_threshold_and_allowed_failed_percent(self, tmp_path, make_files, write_script):
        make_files(10)
        write_script(self.SCRIPT)
        (tmp_path / "bad.txt").write_text("1 2")
        with pytest.raises(StepFailed, match="mini_batch_error_threshold 1 exceeded"):
            run_step(step(mini_batch_size=1, run_max_try=1, mini_batch_error_threshold=1))
        with pytest.raises(StepFailed, match="allowed_failed_percent 10 exceeded: 2 of 10"):
            run_step(step(mini_batch_size=1, run_max_try=1, allowed_failed_percent=10, allow_reuse=False))

    def test_allowed_failed_percent_is_judged_on_the_whole_plan_while_it_streams(
        self, tmp_path, make_files, write_script
    ):
        """The first mini-batches run while the rest is still being planned: a failure among them is
        a share of every mini-batch, not of those planned so far."""
        from parallel_steps.run import plan

        assert plan._CHUNK < 150, "the plan must still be streaming when the first failures come"
        make_files(150)
        write_script(
            self.SCRIPT.replace("    return [", "    time.sleep(0.02)\n    return [").replace(
                "def run", "import time\ndef run", 1
            )
        )
        (tmp_path / "bad.txt").write_text("0")
        config = step(mini_batch_size=1, run_max_try=1, allowed_failed_percent=0.8, allow_reuse=False)
        summary = run_step(config)  # 1 of 150 is 0.67 %; 1 of the first 100 planned would be 1 %
        assert (summary["status"], summary["mini_batches_failed"]) == ("Succeeded", 1)
        (tmp_path / "bad.txt").write_text("0 1")
        with pytest.raises(StepFailed, match=r"allowed_failed_percent 0.8 exceeded: 2 of 150 mini-batches failed"):
            run_step(config)


class TestWorkers:
    def test_gpu_pinning_and_a_replacement_takes_the_freed_index(self, tmp_path, make_files, write_script, monkeypatch):
        monkeypatch.setenv("PARALLEL_STEPS_GPU_COUNT", "2")
        make_files(40)
        write_script("""
import os, signal, time
from pathlib import Path
from parallel_steps import EntryScript
def init():
    Path("seen", EntryScript().agent_name).write_text(os.environ["CUDA_VISIBLE_DEVICES"])
    time.sleep(0.5)
def run(mb):
    if os.environ["CUDA_VISIBLE_DEVICES"] == "0" and not os.path.exists("killed"):
        open("killed", "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    deadline = time.time() + 20  # hold the work until the replacement has started
    while not Path("seen", "process004").exists() and time.time() < deadline:
        time.sleep(0.05)
    return mb
""")
        (tmp_path / "seen").mkdir()
        summary = run_step(step(mini_batch_size=1, process_count_per_node=4))
        seen = {p.name: p.read_text() for p in (tmp_path / "seen").iterdir()}
        assert seen == {"process000": "0", "process001": "1", "process002": "", "process003": "", "process004": "0"}
        assert summary["workers_started"] == 5
        assert summary["attempts_retried"] == 1

    def test_default_process_count_is_the_gpu_count_on_a_gpu_machine(self, make_files, write_script, monkeypatch):
        monkeypatch.setenv("PARALLEL_STEPS_GPU_COUNT", "3")
        make_files(3)
        write_script(ECHO)
        assert run_step(step(process_count_per_node=None))["workers_started"] == 3

    def test_init_that_always_fails_fails_the_job_with_its_error(self, make_files, write_script):
        make_files(4)
        write_script(
            "def init():\n    raise ImportError('no module named torchvision_x')\ndef run(mb):\n    return mb\n"
        )
        with pytest.raises(StepFailed) as failed:
            run_step(step())
        summary = failed.value.summary
        assert re.match(
            r"init\(\) failed [67] times on every node; no worker could start. "
            r"Last error: ImportError: no module named torchvision_x$",
            summary["status_reason"],
        )
        # the node stops after 3 x process_count_per_node failures (a replacement may be starting then)
        assert 6 <= summary["workers_started"] <= 7

    def test_simulated_nodes_have_their_own_ids_and_environment(self, make_files, write_script):
        make_files(40)
        write_script("""
import os
from parallel_steps import EntryScript
def run(mb):
    e = EntryScript()
    return [f"{e.node_id} {os.environ['PARALLEL_STEPS_NODE_INDEX']} {os.environ['PARALLEL_STEPS_NUM_NODES']} "
            f"{os.environ['PARALLEL_STEPS_PROCESS_NAME']} {e.agent_name}" for _ in mb]
""")
        summary = run_step(step(node_count=2, process_count_per_node=1, mini_batch_size=1))
        rows = {tuple(line.split()) for line in output_lines(summary)}
        assert rows <= {
            ("node0", "0", "2", "process000", "process000"),
            ("node1", "1", "2", "process000", "process000"),
        }
        for node in ("node0", "node1"):
            assert (Path(summary["run_dir"]) / f"logs/user/stdout/{node}/process000.stdout.txt").exists()


AZURE_SCRIPT = """
import argparse, os
from azureml_user.parallel_run import EntryScript

def init():
    global labels
    parser = argparse.ArgumentParser()
    parser.add_argument("--labels_dir", dest="labels_dir", required=True)
    args, _ = parser.parse_known_args()
    labels = open(os.path.join(args.labels_dir, "labels.txt")).read().split()
    EntryScript().logger.info("labels loaded from %s", args.labels_dir)

def run(mini_batch):
    entry_script = EntryScript()
    entry_script.logger.info("%s: %d files", entry_script.agent_name, len(mini_batch))
    print("printed to stdout")
    import logging; logging.getLogger("score").info("root logger line")
    return [f"{os.path.basename(p)}: {labels[int(open(p).read())]}" for p in mini_batch]
"""


class TestParallelRunStepCompatibility:
    def test_unmodified_azure_script_runs_and_logs_where_azure_users_look(self, tmp_path, make_files, write_script):
        make_files(6)
        write_script(AZURE_SCRIPT)
        (tmp_path / "labels").mkdir()
        (tmp_path / "labels" / "labels.txt").write_text("zero one two three four five")
        summary = ParallelRunStep(
            name="azure-compat",
            entry_script="score.py",
            inputs=["data"],
            output="out",
            side_inputs=["labels"],
            arguments=["--labels_dir", "labels"],
            process_count_per_node=1,
        ).run()
        assert output_lines(summary)[:2] == ["f0000.txt: zero", "f0001.txt: one"]
        logs = Path(summary["run_dir"]) / "logs"
        entry_log = (logs / "user/entry_script_log/node0/process000.log.txt").read_text()
        assert "labels loaded from " + str(tmp_path / "labels") in entry_log
        assert "process000: 6 files" in entry_log
        stdout = (logs / "user/stdout/node0/process000.stdout.txt").read_text()
        assert "printed to stdout" in stdout
        assert "root logger line" in stdout

    @pytest.mark.parametrize("name", ["score", "score.txt"])
    def test_an_entry_script_runs_whatever_its_file_name_ends_with(self, make_files, write_script, name):
        make_files(3)
        write_script(ECHO, name=name)
        summary = run_step(step(entry_script=name, process_count_per_node=1))
        assert summary["status"] == "Succeeded"
        assert output_lines(summary) == ["0", "1", "2"]

    def test_a_file_the_entry_script_leaves_open_is_written_when_its_worker_exits(
        self, tmp_path, make_files, write_script, monkeypatch
    ):
        """Never closed and held in a reference cycle, the file is finalized only at the worker's exit, which
        flushes what it buffered. A worker skips the interpreter's teardown (a second with torch loaded) but
        closes the files left open, wrappers first: a gzip file left open is whole too."""
        make_files(2)
        monkeypatch.setenv("LEFT_OPEN", str(tmp_path))
        write_script(
            "import os\n"
            "class Holder:\n"
            "    def __init__(self, path):\n"
            "        self.file, self.me = open(path, 'w'), self\n"
            "import gzip\n"
            "def init():\n"
            "    global holder, zipped\n"
            "    holder = Holder(os.path.join(os.environ['LEFT_OPEN'], f'left-open-{os.getpid()}.txt'))\n"
            "    zipped = gzip.open(os.path.join(os.environ['LEFT_OPEN'], 'left-open.gz'), 'wt')\n"
            "def run(mini_batch):\n"
            "    holder.file.write(''.join(open(p).read() for p in mini_batch))\n"
            "    zipped.write(''.join(open(p).read() for p in mini_batch))\n"
            "    return mini_batch\n"
        )
        summary = run_step(step(process_count_per_node=1))
        assert summary["status"] == "Succeeded"
        [left_open] = tmp_path.glob("left-open-*.txt")
        assert left_open.read_text().split() == ["0", "1"]
        with gzip.open(tmp_path / "left-open.gz", "rt") as zipped:
            assert zipped.read().split() == ["0", "1"]

    def test_the_resource_usage_counts_the_processes_a_worker_started(self, make_files, write_script):
        make_files(2)
        write_script(
            "import subprocess\n"
            "def init():\n"
            "    global child\n"
            "    child = subprocess.Popen(['sleep', '60'])\n"
            "def run(mini_batch):\n"
            "    return mini_batch\n"
            "def shutdown():\n"
            "    child.kill()\n"
            "    child.wait()\n"
        )
        summary = run_step(step(process_count_per_node=1))
        usage = Path(summary["run_dir"]) / "logs/perf/node0/processes_resource_usage.csv"
        rows = pd.read_csv(usage)
        assert rows["children"].iloc[-1] == 1  # the last sample, taken while the workers still run

    def test_the_resource_usage_shows_a_busy_worker_using_cpu(self, make_files, write_script):
        make_files(1)
        write_script(
            "import time\n"
            "def run(mini_batch):\n"
            "    end = time.process_time() + 1.5\n"
            "    while time.process_time() < end:\n"
            "        pass\n"
            "    return mini_batch\n"
        )
        summary = run_step(step(process_count_per_node=1, resource_monitor_interval=0.2))
        rows = pd.read_csv(Path(summary["run_dir"]) / "logs/perf/node0/processes_resource_usage.csv")
        assert rows["cpu_percent"].max() > 10  # each sample counts from the one before (psutil's first is 0.0)

    def test_every_file_of_the_log_layout_exists(self, make_files, write_script):
        make_files(3)
        write_script(ECHO)
        summary = run_step(step(process_count_per_node=1))
        logs = Path(summary["run_dir"]) / "logs"
        for name in [
            "job_progress_overview.txt",
            "job_result.txt",
            "sys/master_role.txt",
            "sys/node/node0/process000.txt",
            "sys/job_report/processed_mini-batches.csv",
            "user/entry_script_log/node0/process000.log.txt",
            "user/stdout/node0/process000.stdout.txt",
            "user/stderr/node0/process000.stderr.txt",
            "user/error.txt",
            "user/error/node0/process000.txt",
            "perf/node0/node_resource_usage.csv",
            "perf/node0/processes_resource_usage.csv",
            "perf/node0/node_disk_usage.csv",
        ]:
            assert (logs / name).exists(), name
        snapshots = list((logs / "perf/node0/os").glob("*/processes_*"))
        assert snapshots, "ps snapshots"
        table = snapshots[-1].read_text().splitlines()
        assert table[0].split() == ["PID", "PPID", "RSS_MB", "CPU_S", "COMMAND"]
        mine = [line for line in table[1:] if line.split()[0] == str(os.getpid())]
        assert len(mine) == 1, "this process"
        assert psutil.Process().cmdline()[0] in mine[0], "with its command line"
        assert (
            "mini_batch=0 attempt=1 items=3 succeeded=3 failed=0"
            in (logs / "sys/node/node0/process000.txt").read_text()
        )
        assert json.loads((Path(summary["run_dir"]) / "run.json").read_text())["status"] == "Succeeded"

    def test_the_process_snapshot_shows_a_command_line_with_a_newline_on_one_line(self, make_files, write_script):
        make_files(1)
        write_script(ECHO)
        script = "import time\ntime.sleep(60)"  # a `python -c` script, as schedulers and tests start them
        with subprocess.Popen([sys.executable, "-c", script]) as other:
            try:
                summary = run_step(step(process_count_per_node=1))
            finally:
                other.kill()
        snapshot = next((Path(summary["run_dir"]) / "logs/perf/node0/os").glob("*/processes_*")).read_text()
        rows = [line.split() for line in snapshot.splitlines()[1:]]
        assert all(row and row[0].isdigit() for row in rows), "every line is a process"
        assert [row[4:] for row in rows if row[0] == str(other.pid)] == [
            [sys.executable, "-c", "import", "time?time.sleep(60)"]
        ]


class TestOutput:
    @pytest.mark.parametrize(
        ("name", "fmt"),
        [("out.txt", None), ("out.csv", "csv"), ("out.jsonl", "jsonl"), ("out.parquet", None), ("out.bin", "parquet")],
    )
    def test_formats_chosen_by_append_row_format(self, tmp_path, write_script, name, fmt):
        frame = pd.DataFrame({"id": range(300), "x": [i / 3 for i in range(300)]})
        frame.to_csv(tmp_path / "t.csv", index=False)
        write_script("def run(df):\n    df['y'] = df['x'] * 2\n    return df\n")
        config = step(inputs=[TabularDataset("t.csv")], mini_batch_size=1000, append_row_file_name=name)
        summary = run_step(config.with_overrides(append_row_format=fmt) if fmt else config)
        path = Path(summary["output_file"])
        assert path.name == name
        if name.endswith(".txt"):
            assert summary["append_row_format"] == "text"
            assert path.read_text().splitlines()[1] == "1 0.3333333333333333 0.6666666666666666"
            return
        assert summary["append_row_format"] == (fmt or "parquet")
        back = {"csv": pd.read_csv, "jsonl": lambda p: pd.read_json(p, lines=True), "parquet": pd.read_parquet}[
            summary["append_row_format"]
        ](path)
        assert back["id"].tolist() == list(range(300))
        assert back["y"].tolist() == pytest.approx([2 * i / 3 for i in range(300)])

    def test_summary_only_counts_without_an_output_file(self, make_files, write_script):
        make_files(5)
        write_script(ECHO)
        summary = run_step(step(output_action="summary_only", output="out"))
        assert summary["items_succeeded"] == 5
        assert summary["output_file"] is None
        assert not Path("out/parallel_run_step.txt").exists()

    def test_entry_script_output_dir(self, make_files, write_script):
        make_files(2)
        write_script(
            "from pathlib import Path\nfrom parallel_steps import EntryScript\n"
            "def run(mb):\n    (Path(EntryScript().output_dir) / 'extra.txt').write_text('hi')\n    return mb\n"
        )
        run_step(step(output="out", process_count_per_node=1))
        assert Path("out/extra.txt").read_text() == "hi"


SLOW = """
import os, time
from pathlib import Path
def init():
    Path("pids", str(os.getpid())).touch()
def run(mb):
    time.sleep(30)
    return mb
"""


def start_cli_run(tmp_path) -> subprocess.Popen:
    (tmp_path / "pids").mkdir()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "parallel_steps.cli",
            "run",
            "--entry-script",
            "score.py",
            "--input",
            "data",
            "--process-count-per-node",
            "2",
            "--mini-batch-size",
            "1",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while len(list((tmp_path / "pids").iterdir())) < 2:
        assert process.poll() is None, process.stderr.read()
        assert time.monotonic() < deadline
        time.sleep(0.1)
    return process


def worker_pids(tmp_path) -> list[int]:
    return [int(p.name) for p in (tmp_path / "pids").iterdir()]


def wait_gone(pids, seconds=10.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while (
        alive := [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    ) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive


class TestStopping:
    def test_sigterm_cancels_cleanly(self, tmp_path, make_files, write_script):
        make_files(4)
        write_script(SLOW)
        process = start_cli_run(tmp_path)
        process.send_signal(signal.SIGTERM)
        stdout, _ = process.communicate(timeout=30)
        assert process.returncode == 1
        summary = json.loads(stdout)
        assert summary["status"] == "Canceled"
        assert summary["status_reason"] == "canceled by the user (SIGTERM)"
        assert wait_gone(worker_pids(tmp_path), 0.5) == []

    def test_workers_exit_by_themselves_when_the_driver_is_sigkilled(self, tmp_path, make_files, write_script):
        make_files(4)
        write_script(SLOW)
        process = start_cli_run(tmp_path)
        process.kill()
        process.wait()
        assert wait_gone(worker_pids(tmp_path), 10) == []


def test_cli_run_prints_summary_and_exit_status(make_files, write_script):
    make_files(12)
    write_script(ECHO)
    code, summary = cli_json(
        "run",
        "--entry-script",
        "score.py",
        "--input",
        "data",
        "--mini-batch-size",
        "5",
        "--set",
        "process_count_per_node=2",
    )
    assert code == 0
    assert (summary["mini_batches_total"], summary["items_succeeded"], summary["status"]) == (3, 12, "Succeeded")
    assert Path(summary["run_dir"], "run.json").exists()
    write_script("def run(mb):\n    raise KeyError('boom')\n")
    code, summary = cli_json(
        "run", "--entry-script", "score.py", "--input", "data", "--error-threshold", "0", "--run-max-try", "1"
    )
    assert code == 1
    assert summary["status"] == "Failed"
    status = cli("status", summary["run_id"])
    assert status.returncode == 0
    assert "Failed (error_threshold 0 exceeded" in status.stdout
