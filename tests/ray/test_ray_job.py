"""`submit_to: ray_job`: the driver runs on a Ray cluster (started with `ray start --head`) as a Ray job,
followed and canceled from another shell with the CLI, and through the Python handle; a second submit of
the same run attaches to its running job. The cluster runs from a virtualenv that is not activated, so the
job finds its Python itself; one without the dependencies fails the run in one line.

The entry script holds every run() at a gate (a file the test creates), so a run is provably still
running while the test looks at it from outside.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from support import CLI, environ

from parallel_steps import ParallelRunConfig
from parallel_steps.jobs import submit
from ray_head import GATED_NAMES, jobs_client, ray_head_as_client, write_gated_step

SECRET = "hush-7f3a"
STORAGE_SECRET = "hush-storage-91c2"


@pytest.fixture(scope="module")
def cluster():
    with ray_head_as_client() as head:
        yield head


@pytest.fixture
def step(tmp_path: Path) -> Path:
    """A step file: 6 files in 3 mini-batches on 2 workers, the script in its own code folder."""
    write_gated_step(tmp_path, row='os.path.basename(p) + " " + os.environ["SECRET"]')
    environment = dict(SECRET=SECRET, GATE=str(tmp_path / "gate"), STARTED=str(tmp_path / "started"))
    lines = [
        "name: gated",
        "entry_script: code/score.py",
        "inputs: [data]",
        "mini_batch_size: 2",
        "process_count_per_node: 2",
        "run_root: runs",
        "run_invocation_timeout: 600",
        "allow_reuse: false",
        f"environment_variables: {json.dumps(environment)}",
        f'storage_options: {{"s3://unused-bucket": {{"secret": "{STORAGE_SECRET}"}}}}',
    ]
    (tmp_path / "step.yaml").write_text("\n".join(lines) + "\n")
    return tmp_path / "step.yaml"


def cli(cwd: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], cwd=cwd, env=environ(**env), capture_output=True, text=True, timeout=300)


def detach(step: Path, cluster: dict) -> tuple[str, Path]:
    ray_job = ["--set", "backend=ray", "--set", "submit_to=ray_job", "--set", f"ray_address={cluster['address']}"]
    done = cli(step.parent, "run", str(step), *ray_job, "--detach", env=cluster["env"])
    assert done.returncode == 0, done.stderr[-3000:]
    run_id, run_dir = done.stdout.split()
    return run_id, Path(run_dir)


def started_workers(tmp_path: Path, count: int = 2) -> list[int]:
    """The pids of the workers whose run() waits at the gate, once `count` of them do."""
    deadline = time.monotonic() + 180
    while len(pids := [int(p.name) for p in (tmp_path / "started").iterdir()]) < count:
        assert time.monotonic() < deadline, "the workers never started run()"
        time.sleep(0.2)
    return pids


def job_info(cluster: dict, job_id: str):
    """The Ray job once it has ended (a driver exits a moment after it wrote the run's end)."""
    client, deadline = jobs_client(cluster), time.monotonic() + 60
    while (info := client.get_job_info(job_id)).status in ("PENDING", "RUNNING") and time.monotonic() < deadline:
        time.sleep(0.2)
    return info


def runs_of(cluster: dict, job_id: str) -> list[str]:
    """Every job of the run that `job_id` belongs to (the same id up to the attempt number)."""
    base = job_id.rsplit("-", 1)[0]
    return [job.submission_id for job in jobs_client(cluster).list_jobs() if job.submission_id.startswith(base)]


def output(summary: dict) -> list[str]:
    return Path(summary["output_file"]).read_text().splitlines()


def test_a_detached_ray_job_run_is_followed_from_another_shell(cluster, step, tmp_path):
    run_id, run_dir = detach(step, cluster)
    elsewhere = tmp_path / "elsewhere"  # another shell: another folder, the run found by its id
    elsewhere.mkdir()
    look = ("--run-root", str(tmp_path / "runs"))

    status = json.loads(cli(elsewhere, "status", run_id, *look, "--json", env=cluster["env"]).stdout)
    assert status["status"] in ("Queued", "Running")
    job_id = status["ray_job"]
    started_workers(tmp_path)
    running = json.loads(cli(elsewhere, "status", run_id, *look, "--json", env=cluster["env"]).stdout)
    assert (running["status"], running["ray_job"], running["mini_batches_succeeded"]) == ("Running", job_id, 0)

    follow = subprocess.Popen(
        [CLI, "logs", run_id, *look, "--follow"],
        cwd=elsewhere,
        env=environ(**cluster["env"]),
        stdout=subprocess.PIPE,
        text=True,
    )
    (tmp_path / "gate").touch()
    followed, _ = follow.communicate(timeout=300)
    assert f"run {run_id} of step gated" in followed
    assert followed.rstrip().endswith("Succeeded: every mini-batch succeeded")

    waited = cli(elsewhere, "wait", run_id, *look, "--json", env=cluster["env"])
    assert waited.returncode == 0, waited.stderr
    summary = json.loads(waited.stdout)
    assert (summary["status"], summary["items_succeeded"], summary["ray_job"]) == ("Succeeded", 6, job_id)
    assert summary["config"]["submit_to"] == "ray_job"
    assert output(summary) == [f"{name} {SECRET}" for name in GATED_NAMES]  # the workers had the secret

    info = job_info(cluster, job_id)
    assert info.status == "SUCCEEDED"
    client = jobs_client(cluster)
    shown = [  # what the Jobs API, `ray job list` and the dashboard's job endpoint show of the job, and its logs
        json.dumps(info.dict(), default=str),
        json.dumps([job.dict() for job in client.list_jobs()], default=str),
        client.get_job_logs(job_id),
    ]
    for secret in (SECRET, STORAGE_SECRET):
        assert not [text for text in shown if secret in text]
        for name in ("step.json", "run.json", "ray_job.json"):
            assert secret not in (run_dir / name).read_text()
    assert not (run_dir / "driver_secrets.json").exists()  # the driver's handed secrets, removed once read


def test_cancel_from_another_shell_stops_the_ray_job_and_its_workers(cluster, step, tmp_path):
    run_id, _run_dir = detach(step, cluster)
    workers = started_workers(tmp_path)
    look = ("--run-root", str(tmp_path / "runs"))

    canceled = cli(tmp_path, "cancel", run_id, *look, env=cluster["env"])
    assert canceled.returncode == 0, canceled.stderr
    waited = cli(tmp_path, "wait", run_id, *look, "--json", env=cluster["env"])
    assert waited.returncode == 1
    summary = json.loads(waited.stdout)
    assert (summary["status"], summary["status_reason"]) == ("Canceled", "canceled by the user")
    assert job_info(cluster, summary["ray_job"]).status == "STOPPED"
    deadline = time.monotonic() + 30
    while any(psutil.pid_exists(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(psutil.pid_exists(pid) for pid in workers)


def test_submitting_a_running_run_again_attaches_to_its_job(cluster, step, tmp_path):
    config = ParallelRunConfig.from_yaml(step, backend="ray", submit_to="ray_job", ray_address=cluster["dashboard"])
    run_dir = tmp_path / "runs" / "one-run"
    first = submit(config, run_dir=run_dir)
    started_workers(tmp_path)

    again = submit(config, run_dir=run_dir)
    assert again.run_dir == first.run_dir
    job_id = again.summary()["ray_job"]
    assert job_id == first.summary()["ray_job"]
    assert runs_of(cluster, job_id) == [job_id]

    (tmp_path / "gate").touch()
    summary = again.wait(timeout=300)
    assert summary["status"] == first.status() == "Succeeded"
    assert output(summary) == [f"{name} {SECRET}" for name in GATED_NAMES]
    assert summary["attempts_retried"] == 0
    assert again.logs().count("of step gated in") == 1  # one driver


def test_a_cluster_python_without_the_dependencies_fails_the_run_in_one_line(cluster, tmp_path):
    bare = tmp_path / "bare"  # a Python the cluster could run, without parallel-steps' dependencies
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    python = str(bare / "bin" / "python")
    write_gated_step(tmp_path)
    (tmp_path / "gate").touch()
    config = ParallelRunConfig(
        name="bare",
        entry_script=str(tmp_path / "code" / "score.py"),
        inputs=[str(tmp_path / "data")],
        environment_variables=dict(GATE=str(tmp_path / "gate"), STARTED=str(tmp_path / "started")),
        run_root=str(tmp_path / "runs"),
        backend="ray",
        submit_to="ray_job",
        ray_address=cluster["dashboard"],
        ray_job_python=python,
    )
    summary = submit(config).wait(timeout=300)

    assert summary["status"] == "Failed"
    reason = summary["status_reason"]
    assert "\n" not in reason
    assert f"ray_job_python: {python} (ray_job_python) cannot import ray, pydantic, pyarrow" in reason
    assert f"{python} -m pip install 'parallel-steps[ray]==" in reason
    assert not list((tmp_path / "started").iterdir())  # no worker ever ran


def test_a_refused_ray_job_file_ends_in_one_line_and_a_rerun_resumes(cluster, step, tmp_path):
    """The `ray_job` write site (issue 47): the secrets handed to the job's driver, refused as a full, failing or
    read-only disk would (the failpoint of store/space.py): each time one line naming the file, no job
    submitted, nothing handed left behind; then the rerun in the same run directory (once: the refusals left
    nothing) submits the job and ends with every row once."""
    (tmp_path / "gate").touch()
    ray_job = ["--set", "backend=ray", "--set", "submit_to=ray_job", "--set", f"ray_address={cluster['address']}"]
    run = ("run", str(step), *ray_job, "--run-dir", "runs/refused")
    run_dir = tmp_path / "runs" / "refused"
    for fault in ("ENOSPC", "EIO", "EROFS"):
        done = cli(step.parent, *run, env={**cluster["env"], "PARALLEL_STEPS_FAULT": f"ray_job:{fault}"})
        assert done.returncode == 1, done.stdout + done.stderr[-3000:]
        assert "Traceback" not in done.stdout + done.stderr
        [line] = [line for line in done.stderr.splitlines() if line.startswith("parallel-steps:")]
        assert line.startswith(f"parallel-steps: {run_dir / 'driver_secrets.json'}: "), line
        assert not (run_dir / "driver_secrets.json").exists()
    submitted = [job for job in jobs_client(cluster).list_jobs() if (job.metadata or {}).get("parallel_steps_run_dir")]
    assert str(run_dir) not in [job.metadata["parallel_steps_run_dir"] for job in submitted]

    rerun = cli(step.parent, *run, "--json", env=cluster["env"])
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr[-3000:]
    assert output(json.loads(rerun.stdout)) == [f"{name} {SECRET}" for name in GATED_NAMES]
