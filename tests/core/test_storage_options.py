"""`storage_options` and URLs' credentials as a user meets them: which prefix opens which URL, what the
summary shows, one line for a mistake; and which storage errors are retried. No server needed."""

import errno
from pathlib import Path

import pytest

from parallel_steps import ParallelRunConfig
from parallel_steps.config.secrets import public_config, secret_fields, storage_settings
from parallel_steps.config.trust import trigger_overrides
from parallel_steps.errors import ConfigError, InputError
from parallel_steps.masking import mask_urls
from parallel_steps.run.step import run_step
from parallel_steps.storage.retry import Backoff, is_transient


def _settings(options):
    return storage_settings(ParallelRunConfig(inputs=["s3://bucket/in"], storage_options=options))


def test_the_longest_prefix_of_a_url_gives_its_options():
    settings = _settings(
        {
            "s3://": {"key": "any"},
            "s3://bucket": {"key": "bucket"},
            "s3://bucket/in/images": {"key": "images"},
            "abfs://": {"account_name": "acct"},
        }
    )
    assert settings.options_for("s3://bucket/in/images/a.png") == {"key": "images"}
    assert settings.options_for("s3://bucket/in/imagesets/a.png") == {"key": "bucket"}  # a prefix ends at a /
    assert settings.options_for("s3://bucketeer/x") == {"key": "any"}
    assert settings.options_for("abfs://c/x") == {"account_name": "acct"}
    assert settings.options_for("gs://b/x") == {}


def test_the_summary_shows_storage_options_and_urls_masked():
    config = ParallelRunConfig(
        inputs=["https://acct.blob.core.windows.net/c/data.csv?sv=2024&sig=s1gnature"],
        output="sftp://bob:hunter2@host/out",
        storage_options={"s3://": {"key": "AKIA123", "secret": "${env:AWS_SECRET}", "anon": False}},
    )
    shown = public_config(config)
    assert shown["storage_options"] == {"s3://": {"key": "***", "secret": "${env:AWS_SECRET}", "anon": False}}
    assert shown["output"] == "sftp://bob:***@host/out"
    assert shown["inputs"][0]["path"] == ["https://acct.blob.core.windows.net/c/data.csv?sv=***&sig=***"]
    for secret in ("AKIA123", "hunter2", "s1gnature"):
        assert secret not in repr(shown)
    rebuilt = ParallelRunConfig.model_validate({**shown, **secret_fields(config)})  # a detached driver's config
    assert rebuilt == config


def test_a_storage_option_from_an_unset_variable_is_one_line(monkeypatch):
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    with pytest.raises(ConfigError) as error:
        _settings({"s3://bucket": {"secret": "${env:NOT_SET_ANYWHERE}"}})
    assert str(error.value) == (
        "storage_options: s3://bucket: ${env:NOT_SET_ANYWHERE} is not set in the environment of the process "
        "that runs the step"
    )


def test_a_storage_option_names_a_url_prefix():
    with pytest.raises(ConfigError, match=r"storage_options: 'bucket' is not a URL prefix"):
        ParallelRunConfig(storage_options={"bucket": {"key": "k"}})
    with pytest.raises(ConfigError, match=r"storage_options: s3://b: the options are a mapping"):
        ParallelRunConfig(storage_options={"s3://b": "key=k"})


def test_input_errors_mask_the_url_they_name():
    error = InputError("https://u:pw@host/x.csv?sig=abc", "no such file or folder")
    assert str(error) == "https://u:***@host/x.csv?sig=***: no such file or folder"
    assert mask_urls("abfs://container@account.dfs.core.windows.net/in") == (
        "abfs://container@account.dfs.core.windows.net/in"  # a user name alone is no secret
    )


class _ClientError(Exception):
    def __init__(self, status):
        super().__init__(f"HTTP {status}")
        self.status = status


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (OSError(errno.EBUSY, "Please reduce your request rate"), True),  # s3fs's 503 SlowDown
        (ConnectionRefusedError(errno.ECONNREFUSED, "refused"), True),
        (TimeoutError(), True),
        (_ClientError(503), True),
        (_ClientError(429), True),
        (_ClientError(403), False),
        (FileNotFoundError(errno.ENOENT, "no such key"), False),
        (PermissionError(errno.EACCES, "access denied"), False),
        (ValueError("a bug"), False),
    ],
)
def test_only_transient_storage_errors_are_retried(error, transient):
    assert is_transient(error) is transient


def test_retries_stop_when_the_window_is_over():
    backoff = Backoff(seconds=0)
    with pytest.raises(ConnectionResetError):
        backoff.pause(ConnectionResetError())
    waits = Backoff(seconds=60)
    pauses = [waits.pause(ConnectionResetError()) for _ in range(8)]
    assert pauses[0] <= 0.1
    assert max(pauses) <= 5.0


def test_a_url_with_a_token_is_masked_in_the_run_log_and_summary(tmp_path, make_files, write_script):
    make_files(2)
    write_script("def run(mini_batch):\n    return mini_batch\n")
    output = f"file://{tmp_path}/scores?sig=s3cr3t-token"
    summary = run_step(ParallelRunConfig(entry_script="score.py", inputs=["data"], output=output))

    assert summary["output"] == f"file://{tmp_path}/scores?sig=***"
    run_dir = Path(summary["run_dir"])
    assert "uploaded to " + summary["output"] in (run_dir / "logs" / "sys" / "master_role.txt").read_text()
    for path in [path for path in run_dir.rglob("*") if path.is_file()]:
        assert b"s3cr3t-token" not in path.read_bytes(), path


def test_trigger_time_input_cannot_choose_storage_credentials():
    with pytest.raises(ConfigError, match="storage_options: may not be set by trigger-time input"):
        trigger_overrides({"storage_options": {"s3://": {"key": "theirs"}}}, True, "params_override={field!r}")
