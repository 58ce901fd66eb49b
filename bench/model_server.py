"""A model behind a server: one async worker against synchronous workers; then a model generating in-process.

    .venvs/bench/bin/python bench/model_server.py [--requests 3000] [--latency 0.1] [--server-concurrency 32]
        [--sync-workers 2] [--concurrency 8] [--rows-per-batch 8] [--repeat 1] [--skip-generate]

Needs the `openai` package (examples/openai_batch/score.py uses it) and, for the second part, torch and
transformers; .venvs/bench has them. Nothing is downloaded: the model is built at random weights here.

Server: tests/model_server.py, a real OpenAI-compatible HTTP server on a loopback port in this process, whose
requests each hold one of `--server-concurrency` slots for `--latency` seconds (the rest wait for a slot), so
its capacity is server-concurrency / latency requests a second (320 by default). The same Batch API file of
`--requests` chat-completion requests goes through it twice, `--rows-per-batch` rows per mini-batch:

  sync   a synchronous run() (written to the temp folder) that sends its rows one after another with the
         blocking `openai.OpenAI` client, in `--sync-workers` workers: each worker has one request in flight,
         so N workers reach at most N / latency requests a second (the sync side takes 150 s at the defaults).
  async  examples/openai_batch/score.py, whose run() is an `async def`, in ONE worker with
         `max_concurrency_per_worker: --concurrency`: up to concurrency x rows-per-batch requests in flight.

Printed for each: the wall of run_step() and the run's own elapsed_s (both include starting the workers and
their init(); "start s" is the slowest worker's start, from the run's events), requests a second over
elapsed_s and its share of the server's capacity, the same over the server's busy window (its first request
to its last answer), the most requests the server held at once, and the CPU seconds the workers used (their
start included): an async worker whose CPU seconds come near the busy window is bound by its core.
Every custom_id must come back exactly once without an error, else the bench stops. With `--repeat`, each
figure is the median of the rounds. Goal (issue 46): one async worker reaches >= 0.9 of the server's capacity
over the busy window; the synchronous workers reach about N / latency.

Generate (unless `--skip-generate`): a real model in init(), generating text in-process. A 2-layer GPT-2 at
random weights (torch.manual_seed(0)) with a word vocabulary of its own is saved to the temp folder and given
to the step as a side input; each worker loads it in init() and greedily generates `--new-tokens` tokens for
every prompt of a `--prompts`-row table, one mini-batch at a time, in 2 workers of 1 thread each. Printed:
rows and tokens a second over elapsed_s (most of it the workers' start: importing torch, loading the model),
and over the workers' time in run().
"""

import argparse
import json
import os
import platform
import random
import resource
import statistics
import sys
import tempfile
import textwrap
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # first: `model_server` is the test server, not this file
sys.path.insert(0, str(ROOT / "src"))

from model_server import ModelServer  # noqa: E402
from parallel_steps import ParallelRunConfig, TabularDataset, run_step  # noqa: E402

ASYNC_SCRIPT = ROOT / "examples" / "openai_batch" / "score.py"
SYNC_SCRIPT = textwrap.dedent('''
    """score.py's run() written synchronously (chat completions only): one request after another, same lines."""
    import argparse
    import json
    import os

    import openai

    _client: openai.OpenAI


    def init():
        parser = argparse.ArgumentParser()
        parser.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL"))
        args, _ = parser.parse_known_args()
        global _client
        _client = openai.OpenAI(base_url=args.base_url, api_key="not-needed", max_retries=5, timeout=120.0)


    def run(mini_batch):
        return [_send(row) for row in mini_batch.to_dict("records")]


    def _send(row):
        try:
            raw = _client.chat.completions.with_raw_response.create(**row["body"])
            body = raw.parse().model_dump(mode="json", exclude_unset=True)
        except openai.APIStatusError as exc:
            return _error_line(row, str(exc.status_code), exc.message)
        except (openai.APIConnectionError, json.JSONDecodeError) as exc:
            return _error_line(row, type(exc).__name__, str(exc))
        response = {"status_code": raw.status_code, "request_id": raw.headers.get("x-request-id"), "body": body}
        return {"custom_id": row["custom_id"], "response": response, "error": None}


    def _error_line(row, code, message):
        return {"custom_id": row["custom_id"], "response": None, "error": {"code": code, "message": message}}
''')
GENERATE_SCRIPT = textwrap.dedent('''
    """A causal LM loaded once per worker in init(); run() generates greedily for the prompts of a mini-batch."""
    import argparse
    import json
    import os

    import torch
    from transformers import GPT2LMHeadModel


    def init():
        parser = argparse.ArgumentParser()
        parser.add_argument("--model", required=True)
        parser.add_argument("--new-tokens", type=int, default=16)
        args, _ = parser.parse_known_args()
        global _model, _vocabulary, _ids, _new_tokens
        _model = GPT2LMHeadModel.from_pretrained(args.model).eval()
        with open(os.path.join(args.model, "vocabulary.json")) as file:
            _vocabulary = json.load(file)
        _ids = {word: i for i, word in enumerate(_vocabulary)}
        _new_tokens = args.new_tokens


    def run(mini_batch):
        prompts = torch.tensor([[_ids[word] for word in prompt.split()] for prompt in mini_batch["prompt"]])
        with torch.inference_mode():
            generated = _model.generate(
                prompts,
                attention_mask=torch.ones_like(prompts),
                max_new_tokens=_new_tokens,
                min_new_tokens=_new_tokens,
                do_sample=False,
            )
        completions = [" ".join(_vocabulary[i] for i in row) for row in generated[:, prompts.shape[1] :].tolist()]
        return [{"id": i, "completion": text} for i, text in zip(mini_batch["id"], completions)]
''')
SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]  # 70: two of them make 4900 words
VOCABULARY = [a + b for a in SYLLABLES for b in SYLLABLES][:1000]  # the model's words, one token each
PROMPT_WORDS = 12
TIMES = ("wall", "elapsed", "start", "busy", "cpu")  # the seconds measured of each request run


# The data ------------------------------------------------------------------------------------------


def write_requests(path: Path, count: int) -> None:
    """A Batch API file of `count` chat-completion requests."""
    with path.open("w") as file:
        for i in range(count):
            messages = [
                {"role": "system", "content": "Answer briefly."},
                {"role": "user", "content": f"What is {i} + {i}?"},
            ]
            body = {"model": "echo", "messages": messages, "max_tokens": 16}
            request = {"custom_id": f"request-{i}", "method": "POST", "url": "/v1/chat/completions", "body": body}
            file.write(json.dumps(request) + "\n")


def write_prompts(path: Path, count: int) -> None:
    """A table of `count` prompts of PROMPT_WORDS words of the model's vocabulary."""
    rng = random.Random(0)
    with path.open("w") as file:
        for i in range(count):
            file.write(json.dumps({"id": i, "prompt": " ".join(rng.choices(VOCABULARY, k=PROMPT_WORDS))}) + "\n")


def batch_bytes(path: Path, rows: int, rows_per_batch: int) -> int:
    """The mini_batch_size in bytes that gives about `rows_per_batch` rows of the JSON lines file."""
    return max(1, path.stat().st_size * rows_per_batch // rows)


def read_lines(path: Path) -> list[dict]:
    with path.open() as file:
        return [json.loads(line) for line in file]


def worker_start_s(run_dir: str) -> float:
    """The longest any worker took to start (its process, its imports and init()), from the run's events."""
    events = read_lines(Path(run_dir) / "logs" / "sys" / "events.jsonl")
    return max(event["starting_s"] for event in events if event["type"] == "worker_started")


# The server side -----------------------------------------------------------------------------------


def serve(server: ModelServer, step: ParallelRunConfig, count: int) -> dict:
    """Run the step against the server; its summary, the wall of run_step() and the server's busy window."""
    server.reset()
    window: list[float] = []

    def watch() -> None:  # when the first request came and when the last of `count` was answered
        for reached in (lambda s: s.requests > 0, lambda s: s.completed >= count):
            if server.wait_for(reached, timeout=3600):
                window.append(time.perf_counter())

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    cpu, start = workers_cpu_s(), time.perf_counter()
    summary = run_step(step)
    wall, cpu = time.perf_counter() - start, workers_cpu_s() - cpu
    watcher.join(timeout=1)
    if summary["status"] != "Succeeded" or len(window) != 2:
        raise SystemExit(f"{step.name}: {summary['status']} ({summary.get('status_reason')}), {summary['run_dir']}")
    return {
        "wall": wall,
        "elapsed": summary["elapsed_s"],
        "start": worker_start_s(summary["run_dir"]),
        "busy": window[1] - window[0],
        "cpu": cpu,
        "max_in_flight": server.max_in_flight,
        "mini_batches": summary["mini_batches_total"],
        "run_dir": summary["run_dir"],
    }


def workers_cpu_s() -> float:
    """CPU seconds of this process's children that ended: a run's workers, reaped by its driver."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return children.ru_utime + children.ru_stime


def check_answers(path: Path, count: int, run_dir: str) -> None:
    """Every custom_id came back exactly once, with a 200 answer and no error; else stop the bench."""
    lines = read_lines(path)
    seen = Counter(line["custom_id"] for line in lines)
    missing = [f"request-{i}" for i in range(count) if f"request-{i}" not in seen]
    twice = [custom_id for custom_id, times in seen.items() if times > 1]
    errors = [line for line in lines if line["error"] or line["response"]["status_code"] != 200]
    if missing or twice or errors or len(seen) != count:
        raise SystemExit(
            f"{path}: {len(missing)} custom_ids missing {missing[:3]}, {len(twice)} twice {twice[:3]}, "
            f"{len(errors)} errors {errors[:1]}, {len(seen)} ids for {count} requests (run dir {run_dir})"
        )


def request_step(
    work: Path, name: str, script: Path, requests: Path, server: ModelServer, args: argparse.Namespace
) -> ParallelRunConfig:
    """The step of one side: `sync` (args.sync_workers workers) or `async` (one worker, args.concurrency)."""
    sync = name == "sync"
    arguments = ["--base-url", server.url]
    if not sync:
        arguments += ["--max-requests", str(args.concurrency * args.rows_per_batch)]
    return ParallelRunConfig(
        name=f"bench-{name}",
        entry_script=str(script),
        source_directory=str(script.parent),
        inputs=[TabularDataset(path=[str(requests)])],
        mini_batch_size=batch_bytes(requests, args.requests, args.rows_per_batch),
        process_count_per_node=args.sync_workers if sync else 1,
        max_concurrency_per_worker=1 if sync else args.concurrency,
        arguments=arguments,
        output=str(work / f"out-{name}"),
        output_action="append_row",
        append_row_format="jsonl",
        append_row_file_name="results.jsonl",
        error_threshold=-1,
        run_root=str(work / "runs"),
        allow_reuse=False,
        report=False,
    )


def compare_requests(work: Path, args: argparse.Namespace) -> None:
    requests = work / "requests.jsonl"
    write_requests(requests, args.requests)
    (work / "sync").mkdir()
    (work / "sync" / "score_sync.py").write_text(SYNC_SCRIPT)
    scripts = {"sync": work / "sync" / "score_sync.py", "async": ASYNC_SCRIPT}
    with ModelServer(latency_s=args.latency, max_concurrency=args.server_concurrency, queue=True) as server:
        rounds: dict[str, list[dict]] = {side: [] for side in scripts}
        for _ in range(args.repeat):
            for side, script in scripts.items():
                step = request_step(work, side, script, requests, server, args)
                result = serve(server, step, args.requests)
                check_answers(Path(step.output) / step.append_row_file_name, args.requests, result["run_dir"])
                rounds[side].append(result)
        report_requests(rounds, server, args)


def report_requests(rounds: dict[str, list[dict]], server: ModelServer, args: argparse.Namespace) -> None:
    capacity = server.capacity_rps
    print(
        f"\n{args.requests} chat requests, server latency {args.latency} s x {args.server_concurrency} slots = "
        f"capacity {capacity:.0f} req/s; ~{args.rows_per_batch} rows per mini-batch; median of {args.repeat}"
    )
    print(
        f"  {'side':30} {'batches':>7} {'wall s':>7} {'run s':>7} {'start s':>7} {'req/s':>7} {'/cap':>5}  "
        f"{'busy s':>7} {'req/s':>7} {'/cap':>5}  {'max in flight':>13} {'CPU s':>6}"
    )
    labels = {
        "sync": f"sync run(), {args.sync_workers} workers",
        "async": f"async run(), 1 worker x {args.concurrency}",
    }
    rates = {}
    for side, results in rounds.items():
        wall, elapsed, start, busy, cpu = (statistics.median(r[key] for r in results) for key in TIMES)
        most = statistics.median(r["max_in_flight"] for r in results)
        rates[side] = args.requests / busy
        print(
            f"  {labels[side]:30} {results[0]['mini_batches']:>7} {wall:7.2f} {elapsed:7.2f} "
            f"{start:7.2f} {args.requests / elapsed:7.1f} {args.requests / elapsed / capacity:5.2f}  "
            f"{busy:7.2f} {rates[side]:7.1f} {rates[side] / capacity:5.2f}  {most:>13.0f} {cpu:6.2f}"
        )
    bound = args.sync_workers / args.latency
    share = rates["async"] / capacity
    print(
        f"  goal: one async worker >= 0.90 of capacity over the busy window: {share:.2f} "
        f"({'met' if share >= 0.9 else 'NOT met'}); async / sync {rates['async'] / rates['sync']:.1f}x\n"
        f"  sync: {args.sync_workers} workers reach {rates['sync']:.1f} req/s = {rates['sync'] / bound:.2f} x their "
        f"latency bound, {args.sync_workers} / {args.latency} s = {bound:.0f} req/s"
    )


# A model generating in-process ---------------------------------------------------------------------


def save_model(folder: Path) -> None:
    """A 2-layer GPT-2 at seeded random weights and its word vocabulary, saved as a model folder."""
    import torch
    import transformers

    transformers.logging.disable_progress_bar()
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2,
        n_head=4,
        n_embd=128,
        vocab_size=len(VOCABULARY),
        n_positions=128,
        bos_token_id=None,
        eos_token_id=None,
    )
    transformers.GPT2LMHeadModel(config).save_pretrained(folder)
    (folder / "vocabulary.json").write_text(json.dumps(VOCABULARY))


def generate(work: Path, args: argparse.Namespace) -> None:
    model, prompts = work / "model", work / "prompts.jsonl"
    save_model(model)
    write_prompts(prompts, args.prompts)
    (work / "generate").mkdir()
    (work / "generate" / "generate.py").write_text(GENERATE_SCRIPT)
    workers = 2
    step = ParallelRunConfig(
        name="bench-generate",
        entry_script=str(work / "generate" / "generate.py"),
        source_directory=str(work / "generate"),
        inputs=[TabularDataset(path=[str(prompts)])],
        mini_batch_size=batch_bytes(prompts, args.prompts, 10),
        side_inputs={"model": str(model)},
        arguments=["--model", "${side_inputs.model}", "--new-tokens", str(args.new_tokens)],
        process_count_per_node=workers,
        threads_per_worker=1,
        output=str(work / "out-generate"),
        output_action="append_row",
        append_row_format="jsonl",
        append_row_file_name="completions.jsonl",
        run_root=str(work / "runs"),
        allow_reuse=False,
        report=False,
    )
    start = time.perf_counter()
    summary = run_step(step)
    wall = time.perf_counter() - start
    lines = read_lines(Path(step.output) / step.append_row_file_name)
    words = {len(line["completion"].split()) for line in lines}
    if summary["status"] != "Succeeded" or len(lines) != args.prompts or words != {args.new_tokens}:
        raise SystemExit(f"generate: {summary['status']}, {len(lines)} rows, {words} tokens ({summary['run_dir']})")
    in_run = sum(w["run_s"] for w in summary["worker_time"]["workers"].values()) / workers
    tokens, elapsed, started = args.prompts * args.new_tokens, summary["elapsed_s"], worker_start_s(summary["run_dir"])
    print(
        f"\ngenerate: GPT-2 of 2 layers x 128 at random weights, {args.prompts} prompts of {PROMPT_WORDS} tokens, "
        f"{args.new_tokens} new tokens each (greedy), {workers} workers x 1 thread, "
        f"{summary['mini_batches_total']} mini-batches\n"
        f"  wall {wall:.2f} s, run {elapsed:.2f} s (workers started in {started:.2f} s): "
        f"{args.prompts / elapsed:.1f} rows/s, {tokens / elapsed:.0f} tokens/s\n"
        f"  in run() ({in_run:.2f} s a worker): {args.prompts / in_run:.1f} rows/s, {tokens / in_run:.0f} tokens/s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--latency", type=float, default=0.1, help="seconds each request holds a server slot")
    parser.add_argument("--server-concurrency", type=int, default=32, help="the server's slots")
    parser.add_argument("--sync-workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=8, help="the async worker's max_concurrency_per_worker")
    parser.add_argument("--rows-per-batch", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--skip-generate", action="store_true")
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--new-tokens", type=int, default=16)
    args = parser.parse_args()
    os.environ["HF_HUB_OFFLINE"] = "1"  # the workers inherit it: nothing may reach a hub
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # workers import openai and torch with caches, as installed
    print(
        f"{time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs, {platform.platform()}, "
        f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.2f}"
    )
    with tempfile.TemporaryDirectory(prefix="bench-model-server-") as folder:
        compare_requests(Path(folder), args)
        if not args.skip_generate:
            generate(Path(folder), args)


if __name__ == "__main__":
    main()
