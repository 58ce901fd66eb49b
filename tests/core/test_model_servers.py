"""Models behind a server: an `async def run` keeps several mini-batches in flight in one worker, each with its own
timeout and outcome, against a real OpenAI-compatible server on a loopback port (tests/model_server.py); rows that
fail are error lines counted against the item threshold; an OpenAI batch file goes in, `{custom_id, response,
error}` lines come out, and a rerun sends again only the mini-batches that had errors.

The entry script is the example a user copies (examples/openai_batch/score.py), run unchanged."""

import json
import os
import shutil
import signal
import threading
from pathlib import Path

import pandas as pd
import psutil
import pytest

from model_server import ModelServer
from parallel_steps import ConfigError, ParallelRunConfig, StepFailed, run_step

EXAMPLE = Path(__file__).parents[2] / "examples" / "openai_batch"
ROW_BYTES = "64B"  # below one request line: each mini-batch holds one row


def requests_file(folder: Path, texts: list[str]) -> Path:
    """An OpenAI batch file of one chat request per text, `request-<i>`."""
    lines = [
        {
            "custom_id": f"request-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "echo", "messages": [{"role": "user", "content": text}], "max_tokens": 8},
        }
        for i, text in enumerate(texts)
    ]
    path = folder / "requests.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def step(tmp_path: Path, server: ModelServer, texts: list[str], *arguments: str, **fields) -> ParallelRunConfig:
    """The example's step file over a batch file of `texts`, pointed at `server`, in `tmp_path`."""
    folder = tmp_path / "step"
    if not folder.exists():
        shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("out", "requests.jsonl"))
    requests_file(folder, texts)
    fields = {
        "arguments": ["--base-url", server.url, *arguments],
        "mini_batch_size": ROW_BYTES,
        "max_concurrency_per_worker": 4,
        "run_root": str(tmp_path / "runs"),
        **fields,
    }
    return ParallelRunConfig.from_yaml(folder / "step.yaml", **fields)


def results(summary) -> dict[str, dict]:
    """custom_id -> its output line; fails on a custom_id written twice."""
    lines = [json.loads(line) for line in Path(summary["output_file"]).read_text().splitlines()]
    ids = [line["custom_id"] for line in lines]
    assert len(ids) == len(set(ids)), "a custom_id written twice"
    return {line["custom_id"]: line for line in lines}


def texts(count: int, **special: str) -> list[str]:
    """`count` questions; `special` puts a marker in some: {"3": "[fail]"}."""
    return [f"question {i} {special.get(str(i), '')}".strip() for i in range(count)]


def test_one_worker_keeps_four_mini_batches_in_flight_and_gives_every_row_once(tmp_path):
    with ModelServer(latency_s=0.3, max_concurrency=16) as server:
        summary = run_step(step(tmp_path, server, texts(24)))

    assert summary["mini_batches_total"] == 24  # one row each
    assert (summary["workers_started"], server.max_in_flight) == (1, 4)
    assert summary["worker_time"]["run_share"] <= 1  # time with a mini-batch in flight, counted once
    found = results(summary)
    assert set(found) == {f"request-{i}" for i in range(24)}
    assert all(line["error"] is None for line in found.values())
    assert found["request-7"]["response"]["body"]["choices"][0]["message"]["content"] == "echo: question 7"


def test_a_hung_request_times_out_alone_and_runs_again_while_the_others_finish_on_the_same_worker(tmp_path):
    with ModelServer(latency_s=0.2, max_concurrency=16) as server:
        config = step(tmp_path, server, texts(16, **{"5": "[hang]"}), run_invocation_timeout=3, run_max_try=2)
        summary = run_step(config)

    assert summary["status"] == "Succeeded"  # error_threshold -1: a lost row does not fail the run
    assert (summary["workers_started"], summary["attempts_retried"]) == (1, 1)  # the worker stays, the row reruns
    assert "TimeoutError: run() exceeded 3 s on mini-batch 5; cancelled" in summary["status_reason"]
    found = results(summary)
    assert set(found) == {f"request-{i}" for i in range(16)} - {"request-5"}
    attempts = pd.read_csv(Path(summary["run_dir"]) / "logs/sys/job_report/processed_mini-batches.csv")
    timed_out = attempts[attempts["outcome"] == "timed_out"]
    assert (list(timed_out["mini_batch_id"]), list(timed_out["attempt"])) == ([5, 5], [1, 2])
    assert set(attempts["outcome"]) == {"succeeded", "timed_out"}
    events = [json.loads(line) for line in (Path(summary["run_dir"]) / "logs/sys/events.jsonl").open()]
    assert not [e for e in events if e["type"] == "worker_replaced"]
    error_log = (Path(summary["run_dir"]) / "logs/user/error/node0/process000.txt").read_text()
    assert "timed out" in error_log
    assert "await" in error_log  # where the cancelled coroutine waited


def test_a_worker_killed_with_four_in_flight_loses_and_duplicates_nothing(tmp_path):
    """The kill comes while the server holds four of its requests; they run again (each alone, as none can be
    blamed), and every row is in the output once."""
    with ModelServer(latency_s=0.5, max_concurrency=16) as server:
        config = step(tmp_path, server, texts(20))
        outcome: dict = {}
        run = threading.Thread(target=lambda: outcome.update(run_step(config)))
        run.start()
        assert server.wait_for(lambda s: s.in_flight == 4, timeout=60)
        (worker,) = [p for p in psutil.Process().children(recursive=True) if "worker_main" in " ".join(p.cmdline())]
        os.kill(worker.pid, signal.SIGKILL)
        run.join(timeout=120)

    assert outcome["status"] == "Succeeded"
    assert (outcome["workers_started"], outcome["items_failed"]) == (2, 0)
    found = results(outcome)
    assert set(found) == {f"request-{i}" for i in range(20)}
    log = (Path(outcome["run_dir"]) / "logs/sys/master_role.txt").read_text()
    assert "which of the 4 mini-batches it ran caused it is not known: each runs again alone" in log


@pytest.mark.parametrize(("threshold", "status"), [(2, "Succeeded"), (1, "Failed")])
def test_rows_that_fail_are_error_lines_counted_against_the_item_threshold(tmp_path, threshold, status):
    """Two rows the server fails (after the client's retries: none here) are error lines; the mini-batches
    succeed, and the run fails only when the two failed items pass error_threshold."""
    with ModelServer(latency_s=0.05) as server:
        config = step(
            tmp_path,
            server,
            texts(8, **{"2": "[fail]", "6": "[fail]"}),
            "--max-retries",
            "0",
            error_threshold=threshold,
        )
        if status == "Failed":
            with pytest.raises(StepFailed) as failed:
                run_step(config)
            summary = failed.value.summary
            assert "error_threshold" in summary["status_reason"]
            assert not Path(summary["output"], "results.jsonl").exists()  # a failed run writes no output
            return
        summary = run_step(config)

    assert (summary["status"], summary["items_failed"], summary["mini_batches_failed"]) == (status, 2, 0)
    found = results(summary)
    errors = {key: line["error"]["code"] for key, line in found.items() if line["error"]}
    assert errors == {"request-2": "500", "request-6": "500"}
    assert all(found[key]["response"]["status_code"] == 200 for key in set(found) - set(errors))


def test_a_429_is_retried_after_the_servers_retry_after(tmp_path):
    with ModelServer(latency_s=0.05, retry_after_s=1.5) as server:
        summary = run_step(step(tmp_path, server, texts(6, **{"1": "[429]", "4": "[429]"})))

    assert (summary["items_failed"], server.rejected_429) == (0, 2)
    assert len(server.retry_waits) == 2
    assert min(server.retry_waits.values()) >= 1.5  # each came back after the Retry-After it was given
    assert all(line["error"] is None for line in results(summary).values())


def test_a_rerun_sends_only_the_mini_batches_whose_rows_returned_an_error(tmp_path):
    """A rate-limited first run (no retries) leaves two error lines; the rerun of the same step reuses every
    other mini-batch, sends those two rows again, and its output holds every custom_id once, without errors."""
    with ModelServer(latency_s=0.05) as server:
        config = step(tmp_path, server, texts(10, **{"3": "[429]", "8": "[429]"}), "--max-retries", "0")
        first = run_step(config)
        first_errors = {key for key, line in results(first).items() if line["error"]}
        requests_before = server.requests
        second = run_step(config)

    assert first_errors == {"request-3", "request-8"}
    assert (first["items_failed"], first["items_with_errors"]) == (2, 2)
    assert (second["mini_batches_reused"], second["mini_batches_run"], second["items_failed"]) == (8, 2, 0)
    assert server.requests - requests_before == 2
    found = results(second)
    assert set(found) == {f"request-{i}" for i in range(10)}
    assert all(line["error"] is None for line in found.values())


def test_several_mini_batches_in_flight_need_an_async_run(tmp_path, write_script):
    write_script("def run(mini_batch):\n    return mini_batch\n")
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("a")
    config = ParallelRunConfig(entry_script="score.py", inputs=[str(tmp_path / "in")], max_concurrency_per_worker=4)

    with pytest.raises(ConfigError, match=r"^max_concurrency_per_worker: 4 mini-batches in flight need an `async def"):
        run_step(config)


HANG_TIMEOUT = """
import asyncio, os
from parallel_steps import EntryScript

async def run(mini_batch):
    name = os.path.basename(mini_batch[0])
    if name == "f0001.txt":  # a slow one that says so: its limit only moves
        with EntryScript().hang_timeout(30):
            await asyncio.sleep(3)
    elif name == "f0002.txt":  # as slow, and silent
        await asyncio.sleep(3)
    return [name]
"""


def one_async_worker(concurrency: int) -> ParallelRunConfig:
    """score.py over data/, a file per mini-batch, in one worker with `concurrency` in flight, 1 s each, no retry."""
    return ParallelRunConfig(
        entry_script="score.py",
        inputs=["data"],
        mini_batch_size=1,
        process_count_per_node=1,
        max_concurrency_per_worker=concurrency,
        run_invocation_timeout=1,
        run_max_try=1,
    )


def test_hang_timeout_in_an_async_run_moves_the_limit_of_its_own_mini_batch_only(make_files, write_script):
    make_files(4)
    write_script(HANG_TIMEOUT)
    summary = run_step(one_async_worker(concurrency=4))

    assert sorted(Path(summary["output_file"]).read_text().split()) == ["f0000.txt", "f0001.txt", "f0003.txt"]
    assert "TimeoutError: run() exceeded 1 s on mini-batch 2; cancelled" in summary["status_reason"]


BLOCKS_ITS_LOOP = """
import asyncio, os, time

async def run(mini_batch):
    name = os.path.basename(mini_batch[0])
    if name == "f0001.txt":
        time.sleep(60)  # blocks the event loop: nothing can be cancelled in this worker
    await asyncio.sleep(0.1)
    return [name]
"""


def test_an_async_run_that_blocks_its_event_loop_is_ended_by_the_pool_and_blamed_alone(make_files, write_script):
    """The worker cannot cancel anything while its loop is blocked; the pool kills it a few seconds past the
    earliest deadline. That loss names none of those in flight; each runs again alone, and the blocker, killed
    again there, is the one that times out."""
    make_files(3)
    write_script(BLOCKS_ITS_LOOP)
    summary = run_step(one_async_worker(concurrency=3))

    assert sorted(Path(summary["output_file"]).read_text().split()) == ["f0000.txt", "f0002.txt"]
    assert summary["mini_batches_failed"] == 1
    attempts = pd.read_csv(Path(summary["run_dir"]) / "logs/sys/job_report/processed_mini-batches.csv")
    blocked = attempts[attempts["mini_batch_id"] == 1]
    assert list(blocked["outcome"]) == ["timed_out"]  # one attempt counted: the loss while it ran alone
    assert "event loop is blocked" in blocked["error"].iloc[0]
