"""One step file, two backends: `backend: local` and `backend: ray` give byte-identical output (through the CLI)."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import psutil
from support import CLI, environ, free_port, make_inputs, processes_in, read_json_stdout


def _ray_daemons(folder: Path) -> list[str]:
    """GCS servers and raylets started by the commands run in `folder` (other suites' clusters may run meanwhile)."""
    found = []
    for process in processes_in(folder):
        try:
            if process.name() in ("gcs_server", "raylet"):
                found.append(f"{process.pid} {process.name()}")
        except psutil.NoSuchProcess:
            continue
    return found


def _run(step: Path, *options: str) -> dict:
    done = subprocess.run(
        [CLI, "run", str(step), "--json", *options],
        cwd=step.parent,  # what a run starts works there too: _ray_daemons finds it by that
        capture_output=True,
        text=True,
        timeout=300,
        env=environ(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return read_json_stdout(done.stdout)


def test_local_and_ray_give_byte_identical_output(ray_cluster, tmp_path):
    """The same step file on the local backend, on a running cluster (ray_address) and on a Ray started
    for the run (no address), which is stopped again afterwards."""
    names = make_inputs(tmp_path / "data", [f"doc{i:03d}.txt" for i in range(30)])
    (tmp_path / "score.py").write_text(
        textwrap.dedent("""
        import os

        def run(mini_batch):
            return [f"{os.path.basename(p)}\\t{open(p).read().strip().upper()}" for p in mini_batch]
    """)
    )
    step = tmp_path / "step.yaml"
    step.write_text(
        textwrap.dedent("""
        name: same-output
        entry_script: score.py
        inputs: [{type: files, path: data}]
        mini_batch_size: 4
        node_count: 2
        process_count_per_node: 2
        append_row_file_name: rows.txt
        allow_reuse: false
        run_root: runs
        backend: local
    """)
    )

    local = _run(step, "--output", str(tmp_path / "out-local"))
    on_cluster = _run(
        step,
        "--output",
        str(tmp_path / "out-cluster"),
        "--set",
        "backend=ray",
        "--set",
        f"ray_address={ray_cluster.address}",
    )
    started = _run(step, "--output", str(tmp_path / "out-started"), "--set", "backend=ray", "--set", "node_count=1")

    expected = Path(local["output_file"]).read_bytes()
    assert expected.decode().splitlines() == [f"{n}\tCONTENT OF {n.upper()}" for n in names]
    assert Path(on_cluster["output_file"]).read_bytes() == expected
    assert Path(started["output_file"]).read_bytes() == expected
    assert on_cluster["config"]["backend"] == started["config"]["backend"] == "ray"
    # The run report draws Ray workers like local ones: a row per worker, a bar per attempt.
    page = Path(on_cluster["report"]).read_text()
    data = json.loads(page.split('<script type="application/json" id="report-data">')[1].split("</script>")[0])
    assert set(data["timeline"]["workers"]) <= {f"node{n}/process00{p}" for n in (0, 1) for p in (0, 1)}
    assert sorted(data["timeline"]["bars"]["mini_batch"]) == list(range(8))
    assert not _ray_daemons(tmp_path)  # the Ray started for the run is gone


def test_an_address_where_no_cluster_listens_is_a_configuration_error(tmp_path):
    make_inputs(tmp_path / "data", ["a.txt"])
    (tmp_path / "score.py").write_text("def run(mini_batch):\n    return mini_batch\n")
    port = free_port()
    done = subprocess.run(
        [
            CLI,
            "run",
            "--entry-script",
            str(tmp_path / "score.py"),
            "--input",
            str(tmp_path / "data"),
            "--set",
            "backend=ray",
            "--set",
            f"ray_address=127.0.0.1:{port}",
            "--set",
            f"run_root={tmp_path / 'runs'}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=environ(),
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        f"parallel-steps: ray_address: nothing accepts connections at 127.0.0.1:{port} (Connection refused) "
        f"(start the cluster, or check the address and RAY_ADDRESS)"
    )
    assert not any((tmp_path / "runs").glob("*/run.json"))  # nothing was run
