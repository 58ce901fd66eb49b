"""User errors: one line naming the field or file, exit status 2, no traceback, nothing written."""

import os

import pytest

from .conftest import cli

GOOD_SCRIPT = "def run(mini_batch):\n    return mini_batch\n"

CASES = {
    "bad size": (["--mini-batch-size", "10XB"], "mini_batch_size: '10XB' is not a size (use 1024, 512KB, 10MB, 1GB)"),
    "negative process count": (["--process-count-per-node", "-1"], "process_count_per_node:"),
    "zero nodes": (["--node-count", "0"], "node_count:"),
    "negative run_max_try": (["--set", "run_max_try=-3"], "run_max_try:"),
    "timeout not a number": (["--run-invocation-timeout", "soon"], "run_invocation_timeout:"),
    "bad step name": (["--name", "Score_Digits"], "name: 'Score_Digits' is not a valid step name"),
    "bad backend": (["--backend", "spark"], "backend: 'spark' is not one of"),
    "bad submit_to": (["--submit-to", "k8s"], "submit_to: 'k8s' is not one of 'local' or 'ray_job'"),
    "ray job without ray": (["--set", "submit_to=ray_job"], "submit_to: 'ray_job' runs the driver on a Ray cluster"),
    "ray job without address": (
        ["--set", "backend=ray", "--set", "submit_to=ray_job"],
        "ray_address: submit_to: ray_job needs the Ray cluster's address",
    ),
    "bad logging level": (["--logging-level", "LOUD"], "logging_level:"),
    "bad policy": (["--fault-tolerant-policy", "Sometimes"], "fault_tolerant_policy:"),
    "bad output file": (["--append-row-file-name", "sub/out.txt"], "append_row_file_name:"),
    "size for file inputs": (["--mini-batch-size", "1MB"], "mini_batch_size: '1MB' is a size but the inputs are files"),
    "keys for file inputs": (["--partition-keys", "a"], "partition_keys: file input 0 has no partition_format"),
    "unknown --set field": (["--set", "mini_batch_sise=3"], "mini_batch_sise: is not a configuration field"),
    "--set without =": (["--set", "mini_batch_size"], "--set: 'mini_batch_size' is not FIELD=VALUE"),
    "missing entry script": (["--entry-script", "missing.py"], "entry_script: missing.py not found"),
    "entry script syntax error": (["--entry-script", "broken.py"], "entry_script: broken.py line 1:"),
    "missing input": (["--input", "nowhere"], "nowhere: no such file or folder"),
    "missing second input": (["--input", "data", "--input", "nowhere"], "nowhere: no such file or folder"),
    "glob matches nothing": (["--input", "data/*.png"], "data/*.png: matches no files"),
    "empty folder": (["--input", "empty"], "empty: folder has no files"),
    "unreadable file": (["--input", "dangling.txt"], "dangling.txt: cannot read"),
    "corrupted parquet": (["--tabular", "--input", "bad.parquet"], "bad.parquet: not a readable Parquet file"),
    "csv without the key column": (["--tabular", "--input", "t.csv", "--partition-keys", "missing"], "t.csv:"),
    "missing side input": (["--set", "side_inputs={model: models/none}"], "models/none: side input 'model' not found"),
    "unknown side input in arguments": (
        ["--", "--model", "${side_inputs.model}"],
        "arguments: ${side_inputs.model} names no side input",
    ),
    "missing step file": (["nostep.yaml"], "nostep.yaml: step file not found"),
    "invalid yaml": (["broken.yaml"], "broken.yaml: not valid YAML at line"),
    "unknown yaml key": (["unknown.yaml"], "colour: is not a configuration field (valid: name, entry_script"),
}


@pytest.fixture
def workspace(tmp_path, make_files):
    make_files(3)
    (tmp_path / "empty").mkdir()
    (tmp_path / "score.py").write_text(GOOD_SCRIPT)
    (tmp_path / "broken.py").write_text("def run(mini_batch)\n    return mini_batch\n")
    os.symlink(tmp_path / "gone.txt", tmp_path / "dangling.txt")
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 garbage")
    (tmp_path / "t.csv").write_text("a,b\n1,2\n")
    (tmp_path / "broken.yaml").write_text("entry_script: score.py\ninputs: [data\n")
    (tmp_path / "unknown.yaml").write_text("entry_script: score.py\ninputs: [data]\ncolour: blue\n")
    return tmp_path


@pytest.mark.parametrize("case", CASES)
def test_user_error(workspace, case):
    extra, expected = CASES[case]
    args = ["run"]
    if not any(a.endswith(".yaml") for a in extra):
        args += ["--entry-script", "score.py", "--output", "out"]
        if "--input" not in extra:
            args += ["--input", "data"]
    result = cli(*args, *extra)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("parallel-steps: "), lines[0]
    assert expected in lines[0], lines[0]
    assert "Traceback" not in result.stderr
    assert not (workspace / "out").exists(), "a user error writes nothing to the output"
    runs = workspace / "runs"
    assert not runs.exists() or not [p for p in runs.iterdir() if p.is_dir() and p.name != "locks"]


def test_plan_needs_no_entry_script_and_reports_errors_the_same_way(workspace):
    assert cli("plan", "--input", "data").returncode == 0
    result = cli("plan", "--input", "data", "--mini-batch-size", "0")
    assert result.returncode == 2
    assert result.stderr.strip() == "parallel-steps: mini_batch_size: 0 must be at least 1"


def test_a_store_without_credentials_is_one_line_naming_the_url(workspace, monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(workspace / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(workspace / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    result = cli("plan", "--input", "s3://no-such-bucket/x")
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        "parallel-steps: s3://no-such-bucket/x: cannot list (NoCredentialsError: Unable to locate credentials)"
    ]
