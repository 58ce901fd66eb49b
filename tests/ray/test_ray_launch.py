"""`parallel-steps node`: the same command on every node of a multi-node job, here three processes on loopback."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import psutil
import pytest
from support import (
    CLI,
    environ,
    folders,
    free_port,
    make_inputs,
    markers,
    processes_in,
    read_json_stdout,
    write_entry_script,
)


def _step(tmp_path: Path, body: str, **fields: str) -> Path:
    write_entry_script(tmp_path, body)
    env = folders(tmp_path)
    lines = [
        "name: multi-node",
        "entry_script: score.py",
        "inputs: [{type: files, path: data}]",
        "output: out",
        "run_root: runs",
        "mini_batch_size: 1",
        "process_count_per_node: 1",
        "allow_reuse: false",
        f"environment_variables: {{MARKERS: '{env['MARKERS']}', FLAGS: '{env['FLAGS']}'}}",
        *(f"{k}: {v}" for k, v in fields.items()),
    ]
    step = tmp_path / "step.yaml"
    step.write_text("\n".join(lines) + "\n")
    return step


def _aws_batch(index: int, nodes: int, main_ip: str | None) -> dict[str, str]:
    """The variables AWS Batch sets on one node of a multi-node parallel job (the main node has no main IP)."""
    env = dict(
        AWS_BATCH_JOB_NODE_INDEX=str(index),
        AWS_BATCH_JOB_NUM_NODES=str(nodes),
        AWS_BATCH_JOB_MAIN_NODE_INDEX="0",
        AWS_BATCH_JOB_ID="job-1",
    )
    if main_ip:
        env["AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"] = main_ip
    return env


def _node(step: Path, port: int, index: int, nodes: int = 3) -> subprocess.Popen:
    """One node of the job; each gets its own agent ports since all three share this machine."""
    ray_args = (
        f"--num-cpus 1 --num-gpus 0 --object-store-memory {100 * 2**20} --min-worker-port 0 "
        f"--max-worker-port 0 --dashboard-agent-listen-port {free_port()}"
    )
    if index == 0:
        ray_args += f" --ray-client-server-port {free_port()}"
    command = [
        CLI,
        "node",
        str(step),
        "--port",
        str(port),
        "--node-address",
        "127.0.0.1",
        "--json",
        "--wait-nodes",
        "180",
        "--join-timeout",
        "180",
        "--ray-start-args",
        ray_args,
    ]
    env = environ(**_aws_batch(index, nodes, None if index == 0 else "127.0.0.1"))
    return subprocess.Popen(
        command, cwd=step.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _finish(processes: list[subprocess.Popen]) -> list[tuple[int, str, str]]:
    results = []
    try:
        for process in processes:
            stdout, stderr = process.communicate(timeout=300)
            results.append((process.returncode, stdout, stderr))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    return results


def _left_behind(folder: Path, within_s: float = 10.0) -> list[str]:
    """Processes of the node commands run in `folder` (Ray's daemons and agents keep it as their working
    directory) still alive `within_s` after the commands ended (a bound, not a speed)."""
    deadline = time.monotonic() + within_s
    while (left := processes_in(folder)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [_title(process) for process in left]


def _title(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())[:200]
    except psutil.Error:
        return f"{process.pid} (exited)"


SUCCEEDS = """
    def init():
        _write_marker()

    def run(mini_batch):
        _wait_for_markers(3)  # a worker on each of the three nodes
        return [os.path.basename(p) for p in mini_batch]
"""

FAILS = """
    def run(mini_batch):
        raise RuntimeError("this step always fails")
"""


@pytest.mark.parametrize(("script", "expected"), [(SUCCEEDS, 0), (FAILS, 1)], ids=["step-succeeds", "step-fails"])
def test_three_nodes_with_aws_batch_variables_form_one_job_whose_status_is_the_steps(tmp_path, script, expected):
    names = make_inputs(tmp_path / "data", [f"f{i:02d}.txt" for i in range(9)])
    step = _step(tmp_path, script, run_max_try="1", mini_batch_error_threshold="0")
    port = free_port()
    main = _node(step, port, 0)
    children = [_node(step, port, index) for index in (1, 2)]

    (main_code, main_out, main_err), *others = _finish([main, *children])
    assert not _left_behind(tmp_path)  # the node commands stop their Ray, agents included

    assert main_code == expected, [main_err[-3000:]] + [err[-2000:] for _, _, err in others]
    assert [code for code, _, _ in others] == [0, 0], [err[-2000:] for _, _, err in others]
    assert main_out.strip(), main_err[-3000:]  # the summary, not an error before the run
    summary = read_json_stdout(main_out)
    assert summary["config"]["node_count"] == 3
    assert summary["config"]["backend"] == "ray"
    if expected:
        assert summary["status"] == "Failed"
        assert "mini_batch_error_threshold" in summary["status_reason"]
        return
    assert Path(summary["output_file"]).read_text().splitlines() == names
    seen = markers(tmp_path / "markers")
    assert sorted(seen) == ["node0-process000", "node1-process000", "node2-process000"]
    assert len({m["ray_node"] for m in seen.values()}) == 3
    assert len({m["env"]["PARALLEL_STEPS_MAIN_NODE_ADDRESS"] for m in seen.values()} - {""}) == 1
    assert {m["env"]["PARALLEL_STEPS_NUM_NODES"] for m in seen.values()} == {"3"}


def _node_alone(tmp_path: Path, env: dict[str, str], *options: str) -> subprocess.CompletedProcess:
    step = _step(tmp_path, FAILS)
    return subprocess.run(
        [CLI, "node", str(step), *options], env=environ(**env), capture_output=True, text=True, timeout=120
    )


def test_a_worker_node_finds_the_main_node_from_slurm_and_gives_up_after_the_join_timeout(tmp_path):
    port = free_port()  # nothing listens there
    done = _node_alone(
        tmp_path,
        dict(SLURM_NODEID="1", SLURM_JOB_NUM_NODES="2", SLURM_JOB_NODELIST="127.0.0.[1-2]"),
        "--port",
        str(port),
        "--join-timeout",
        "1",
    )
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"parallel-steps node: the main node's Ray head at 127.0.0.1:{port} was not "
        f"reachable within 1 s (see --join-timeout)"
    )


def test_a_kubernetes_worker_node_without_a_main_address_is_a_usage_error(tmp_path):
    done = _node_alone(tmp_path, dict(JOB_COMPLETION_INDEX="2"))
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "parallel-steps node: --main-address: node 2 is not the main node and knows no "
        "main address (pass --main-address or set PARALLEL_STEPS_MAIN_ADDRESS)"
    )


def test_the_main_node_with_an_invalid_step_file_exits_2_before_starting_ray(tmp_path):
    step = _step(tmp_path, FAILS, mini_batch_size="'10XB'")
    done = subprocess.run(
        [CLI, "node", str(step)], env=environ(**_aws_batch(0, 3, None)), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert done.stderr.strip().startswith("parallel-steps node: mini_batch_size: '10XB'")
