"""The Ray backend through the step API: placement on nodes, GPU pinning, logs, faults and node loss."""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path

import pytest
from support import (
    NODE_ARGS,
    folders,
    make_inputs,
    markers,
    outcomes_by_mini_batch,
    output_lines,
    processed,
    write_entry_script,
)

from parallel_steps import ParallelRunConfig
from parallel_steps.errors import ConfigError
from parallel_steps.pool.ray.nodes import RayNodes
from parallel_steps.run.step import run_step
from parallel_steps.worker.side_inputs import side_inputs_dir


def _config(tmp_path: Path, names: list[str], **fields) -> ParallelRunConfig:
    base = dict(
        name="ray-test",
        entry_script=str(tmp_path / "score.py"),
        inputs=[str(tmp_path / "data")],
        output=str(tmp_path / "out"),
        run_root=str(tmp_path / "runs"),
        backend="ray",
        allow_reuse=False,
        mini_batch_size=1,
        environment_variables=folders(tmp_path),
    )
    base.update(fields)
    base["environment_variables"] = {**folders(tmp_path), **fields.get("environment_variables", {})}
    return ParallelRunConfig(**base)


@pytest.fixture(params=["the driver's machine", "another machine"])
def worker_machine(request, monkeypatch) -> str:
    """Where the pool takes its workers to be: on another machine than the driver's, an actor notes the end of
    its calls in the mailbox rather than in a file (pool/ray/ends.py)."""
    if request.param == "another machine":
        assign = RayNodes.assign

        def elsewhere(nodes: RayNodes, wanted: int, wait_s: float) -> None:
            assign(nodes, wanted, wait_s)
            nodes.here = set()

        monkeypatch.setattr(RayNodes, "assign", elsewhere)
    return request.param


def test_workers_spread_over_nodes_with_worker_environment_side_inputs_and_logs(ray_cluster, tmp_path):
    """node_count=2 x process_count_per_node=2: two workers on each of two Ray nodes, every row once."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "weights.txt").write_text("w42\n")
    (tmp_path / "labels.txt").write_text("cat\n")  # a side input named by an fsspec URL
    write_entry_script(
        tmp_path,
        """
        import argparse, subprocess
        from azureml_user.parallel_run import EntryScript

        weights = None

        def init():
            global weights
            parser = argparse.ArgumentParser()
            parser.add_argument("--model")
            args, _ = parser.parse_known_args()
            weights = open(os.path.join(args.model, "weights.txt")).read().strip()
            labels = EntryScript().get_side_input("labels")
            _write_marker(model_arg=args.model, side_input=EntryScript().get_side_input("model"),
                          user_var=os.environ["USER_VAR"], labels=labels, label=open(labels).read().strip())
            print("init says hello", flush=True)
            subprocess.run(["echo", "a child process says hello"], check=True)
            EntryScript().logger.info("init logged")

        def run(mini_batch):
            _wait_for_runs(4)
            return [f"{os.path.basename(p)} {weights}" for p in mini_batch]
    """,
    )
    names = make_inputs(tmp_path / "data", [f"f{i:02d}.txt" for i in range(16)])
    config = _config(
        tmp_path,
        names,
        node_count=2,
        process_count_per_node=2,
        side_inputs={"model": str(model), "labels": f"file://{tmp_path / 'labels.txt'}"},
        arguments=["--model", "${side_inputs.model}"],
        environment_variables={"USER_VAR": "yes"},
    )

    summary = run_step(config)

    assert output_lines(summary) == [f"{n} w42" for n in names]
    seen = markers(tmp_path / "markers")
    assert sorted(seen) == ["node0-process000", "node0-process001", "node1-process000", "node1-process001"]
    by_node = {i: {m["ray_node"] for k, m in seen.items() if k.startswith(f"node{i}-")} for i in (0, 1)}
    assert len(by_node[0]) == len(by_node[1]) == 1
    assert by_node[0] != by_node[1]
    main_address = {m["env"]["PARALLEL_STEPS_MAIN_NODE_ADDRESS"] for m in seen.values()}
    assert len(main_address) == 1
    assert main_address != {""}
    for key, marker in seen.items():
        env = marker["env"]
        assert (env["PARALLEL_STEPS_NUM_NODES"], env["PARALLEL_STEPS_MAIN_NODE_INDEX"]) == ("2", "0")
        assert f"node{env['PARALLEL_STEPS_NODE_INDEX']}-{env['PARALLEL_STEPS_PROCESS_NAME']}" == key
        assert marker["user_var"] == "yes"
        # The script gets a node-local copy of the side input, in its arguments and from EntryScript.
        assert marker["side_input"] == marker["model_arg"]
        assert marker["side_input"].startswith(str(side_inputs_dir()))
        assert Path(marker["side_input"]).name == "model"
        assert marker["labels"].startswith(str(side_inputs_dir()))
        assert marker["label"] == "cat"
    assert not (side_inputs_dir() / Path(summary["run_dir"]).name).exists()  # removed from the nodes after the run
    logs = Path(summary["run_dir"]) / "logs"
    for key in seen:
        node, process = key.split("-")
        stdout = (logs / "user" / "stdout" / node / f"{process}.stdout.txt").read_text()
        assert "init says hello" in stdout
        assert "a child process says hello" in stdout
        assert "init logged" in (logs / "user" / "entry_script_log" / node / f"{process}.log.txt").read_text()
    journal = "".join(p.read_text() for p in (logs / "sys" / "node").glob("node*/process*.txt"))
    assert journal.count(" ok ") == len(names)
    assert Counter(row["node_id"] for row in processed(summary)).keys() == {"node0", "node1"}


def test_logical_gpus_are_pinned_one_per_worker_and_a_replacement_takes_the_freed_one(ray_cluster, tmp_path):
    """2 GPUs per node and 3 workers per node: "0" and "1" for two of them, "" for the third; the worker
    that replaces a crashed GPU worker gets that GPU."""
    write_entry_script(
        tmp_path,
        """
        def init():
            _write_marker()

        def run(mini_batch):
            node, gpu = os.environ["PARALLEL_STEPS_NODE_INDEX"], os.environ["CUDA_VISIBLE_DEVICES"]
            if node == "0" and gpu == "0" and _first_time("crash-gpu0"):
                os._exit(1)
            _wait_for_markers(7)  # the six first workers and the replacement
            return [os.path.basename(p) for p in mini_batch]
    """,
    )
    names = make_inputs(tmp_path / "data", [f"f{i:02d}.txt" for i in range(24)])
    summary = run_step(_config(tmp_path, names, node_count=2, process_count_per_node=3))

    assert output_lines(summary) == names
    seen = markers(tmp_path / "markers")
    first = {k: m["env"]["CUDA_VISIBLE_DEVICES"] for k, m in seen.items() if not k.endswith("process003")}
    assert sorted(v for k, v in first.items() if k.startswith("node0")) == ["", "0", "1"]
    assert sorted(v for k, v in first.items() if k.startswith("node1")) == ["", "0", "1"]
    assert seen["node0-process003"]["env"]["CUDA_VISIBLE_DEVICES"] == "0"
    assert summary["attempts_retried"] == 1
    assert summary["workers_started"] == 7


def test_workers_per_gpu_puts_that_many_workers_on_each_logical_gpu(ray_cluster, tmp_path):
    """2 GPUs per node, 4 workers per node, 2 per GPU: each GPU of each node is seen by two workers, and each
    worker sees only its own (Ray's num_gpus=0.5)."""
    write_entry_script(
        tmp_path,
        """
        def init():
            _write_marker()

        def run(mini_batch):
            _wait_for_markers(8)
            return [os.path.basename(p) for p in mini_batch]
    """,
    )
    names = make_inputs(tmp_path / "data", [f"f{i:02d}.txt" for i in range(16)])
    summary = run_step(_config(tmp_path, names, node_count=2, process_count_per_node=4, workers_per_gpu=2))

    assert output_lines(summary) == names
    seen = markers(tmp_path / "markers")
    for node in ("node0", "node1"):
        gpus = sorted(m["env"]["CUDA_VISIBLE_DEVICES"] for k, m in seen.items() if k.startswith(node))
        assert gpus == ["0", "0", "1", "1"]


def test_crashes_timeouts_errors_and_memory_are_retried_with_every_row_once(ray_cluster, worker_machine, tmp_path):
    """The fault table on Ray: each planned fault fails the first attempt only; the output is exactly once."""
    write_entry_script(
        tmp_path,
        """
        from azureml_user.parallel_run import EntryScript

        def init():
            _write_marker()

        def run(mini_batch):
            name = os.path.basename(mini_batch[0])
            kind = name.split("-")[0]
            if kind != "slow" and kind != "ok" and _first_time(name):
                if kind == "crash":
                    os._exit(3)
                if kind == "hang":
                    time.sleep(600)
                if kind == "raise":
                    raise RuntimeError(f"planned failure on {name}")
                if kind == "hog":
                    # Only the memory limit may end it: under load its sample can come after a 4 s timeout.
                    with EntryScript().hang_timeout(None):
                        block = b"x" * (600 * 2**20)
                        time.sleep(600)
            if kind == "slow":
                with EntryScript().hang_timeout(None):  # longer than run_invocation_timeout, on purpose
                    time.sleep(6)
            return [name]
    """,
    )
    faults = ["crash-1.txt", "hang-1.txt", "hog-1.txt", "raise-1.txt", "slow-1.txt"]
    names = make_inputs(tmp_path / "data", faults + [f"ok-{i:02d}.txt" for i in range(8)])
    summary = run_step(
        _config(
            tmp_path,
            names,
            node_count=2,
            process_count_per_node=2,
            run_invocation_timeout=4,
            worker_memory_limit="300MB",
        )
    )

    assert output_lines(summary) == names
    outcomes = outcomes_by_mini_batch(summary)
    assert outcomes[names.index("crash-1.txt")] == ["crashed", "succeeded"]
    assert outcomes[names.index("hang-1.txt")] == ["timed_out", "succeeded"]
    assert outcomes[names.index("hog-1.txt")] == ["out_of_memory", "succeeded"]
    assert outcomes[names.index("raise-1.txt")] == ["failed", "succeeded"]
    assert outcomes[names.index("slow-1.txt")] == ["succeeded"]
    assert summary["attempts_retried"] == 4
    assert summary["items_failed"] == 0
    errors = "".join(p.read_text() for p in (Path(summary["run_dir"]) / "logs" / "user" / "error").glob("*/*.txt"))
    assert "run() exceeded 4 s on mini-batch" in errors
    assert "most recent call first" in errors
    assert "in run" in errors
    assert "RuntimeError: planned failure on raise-1.txt" in errors


def test_a_node_that_leaves_mid_run_is_survived_with_every_row_once(ray_cluster, tmp_path):
    """Three nodes; one is removed while it runs mini-batches; the job finishes on the other two."""
    extra = ray_cluster.add_node(**NODE_ARGS)
    ray_cluster.wait_for_nodes()
    write_entry_script(
        tmp_path,
        """
        def init():
            _write_marker()

        def run(mini_batch):
            import ray
            _wait_for_markers(3)
            with open(os.path.join(os.environ["FLAGS"], f"ran-{ray.get_runtime_context().get_node_id()}"), "a") as f:
                f.write(mini_batch[0] + "\\n")
            time.sleep(0.3)
            return [os.path.basename(p) for p in mini_batch]
    """,
    )
    names = make_inputs(tmp_path / "data", [f"f{i:02d}.txt" for i in range(40)])
    ran_on_extra = tmp_path / "flags" / f"ran-{extra.node_id}"
    removed = threading.Event()

    def remove_once_it_works() -> None:
        while not ran_on_extra.exists():
            if done.is_set():
                return
            done.wait(0.05)
        ray_cluster.remove_node(extra)
        removed.set()

    done = threading.Event()
    remover = threading.Thread(target=remove_once_it_works)
    remover.start()
    try:
        summary = run_step(_config(tmp_path, names, node_count=3, process_count_per_node=1))
    finally:
        done.set()
        remover.join()

    assert removed.is_set()
    assert output_lines(summary) == names
    master = (Path(summary["run_dir"]) / "logs" / "sys" / "master_role.txt").read_text()
    assert "left the Ray cluster" in master
    assert {row["node_id"] for row in processed(summary) if row["outcome"] == "succeeded"} >= {"node0"}


def test_too_few_nodes_fail_the_step_with_a_clear_message(ray_cluster, tmp_path):
    write_entry_script(
        tmp_path,
        """
        def run(mini_batch):
            return mini_batch
    """,
    )
    names = make_inputs(tmp_path / "data", ["a.txt"])
    with pytest.raises(ConfigError) as error:
        run_step(_config(tmp_path, names, node_count=5, process_count_per_node=1, first_task_creation_timeout=2))
    assert str(error.value) == (
        "node_count: 5 nodes asked for, but the Ray cluster has 2 alive node(s) that can take "
        "workers after waiting 2 s (start more nodes, or lower node_count)"
    )


# Several mini-batches per actor call -------------------------------------------------------------------


def _replacements(summary: dict) -> list[str]:
    """The details of the worker_replaced events of a run (why each lost worker was replaced)."""
    lines = (Path(summary["run_dir"]) / "logs" / "sys" / "events.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    return [event["detail"] for event in events if event["type"] == "worker_replaced"]


def test_a_worker_killed_among_the_quick_mini_batches_of_a_call_blames_only_the_one_that_killed_it(
    ray_cluster, worker_machine, tmp_path
):
    """One worker, 300 quick mini-batches: the actor's calls carry many each. f200 SIGKILLs its worker the
    first two times it runs. A loss among the quick mini-batches of a call names none of them and counts no
    attempt; they run again one per call, where f200's loss is named and counted. Every row comes once, and
    no mini-batch that succeeded has an attempt counted against it, wherever the worker noted its calls'
    ends."""
    write_entry_script(
        tmp_path,
        """
        import signal

        def run(mini_batch):
            name = os.path.basename(mini_batch[0])
            if name == "f200.txt" and (_first_time("kill-1") or _first_time("kill-2")):
                os.kill(os.getpid(), signal.SIGKILL)
            return [name]
    """,
    )
    names = make_inputs(tmp_path / "data", [f"f{i:03d}.txt" for i in range(300)])
    summary = run_step(_config(tmp_path, names, process_count_per_node=1))

    assert output_lines(summary) == names
    outcomes = outcomes_by_mini_batch(summary)
    culprit = outcomes.pop(names.index("f200.txt"))
    assert all(o == ["succeeded"] for o in outcomes.values())
    assert culprit[-1] == "succeeded"
    named = culprit[:-1]
    assert set(named) <= {"crashed"}
    unnamed = [detail for detail in _replacements(summary) if "mini-batches it ran caused it is not known" in detail]
    assert len(named) + len(unnamed) == 2  # each of its two kills: named and counted, or naming none
    assert summary["attempts_retried"] == len(named)
    assert summary["workers_started"] == 3
    notes = list((Path(summary["run_dir"]) / "parts").glob("*.ended"))
    assert len(notes) == (3 if worker_machine == "the driver's machine" else 0)  # one file a worker, or the mailbox


def test_a_hang_among_the_quick_mini_batches_of_a_call_is_timed_out_on_that_one(ray_cluster, tmp_path):
    """The actor says which mini-batch of its call runs long, so its deadline counts from its own start and
    the time-out names it; its stacks are in the worker's error log."""
    write_entry_script(
        tmp_path,
        """
        def run(mini_batch):
            name = os.path.basename(mini_batch[0])
            if name == "f200.txt" and _first_time("hang"):
                time.sleep(600)
            return [name]
    """,
    )
    names = make_inputs(tmp_path / "data", [f"f{i:03d}.txt" for i in range(300)])
    summary = run_step(_config(tmp_path, names, process_count_per_node=1, run_invocation_timeout=3))

    assert output_lines(summary) == names
    outcomes = outcomes_by_mini_batch(summary)
    assert outcomes.pop(names.index("f200.txt")) == ["timed_out", "succeeded"]
    assert all(o == ["succeeded"] for o in outcomes.values())
    assert summary["attempts_retried"] == 1
    errors = "".join(p.read_text() for p in (Path(summary["run_dir"]) / "logs" / "user" / "error").glob("*/*.txt"))
    assert "run() exceeded 3 s on mini-batch 200; stacks of every thread:" in errors
    assert "in run" in errors
