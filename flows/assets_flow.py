"""Prefect assets: one flow counts words with `parallel_run`, another reads what it materialized.

count-words:  parallel_run over documents -> materializes the asset of its output folder (file://...)
word-totals:  the latest materialization of that asset, read from the API -> the total word count

On success, `parallel_run` records its output folder as an asset materialized by the task run, with the
run's facts as the event's metadata (run_id, rows_written, mini_batches_run, mini_batches_reused,
mini_batches_failed, output_file), and its inputs as the assets it read; a failed step records nothing.
Run the flows one after the other, or serve word-totals with a trigger on the materialization, so that
it runs after each successful count-words:

    python flows/assets_flow.py count           # count-words
    python flows/assets_flow.py totals          # word-totals
    python flows/assets_flow.py serve           # word-totals on every materialization (a Prefect server)
"""

from __future__ import annotations

import sys
import urllib.parse
import urllib.request
from pathlib import Path

from prefect.client.orchestration import get_client
from prefect.events import DeploymentEventTrigger
from prefect.events.filters import EventFilter, EventNameFilter, EventResourceFilter

from parallel_steps.prefect import parallel_run
from prefect import flow, task

HERE = Path(__file__).resolve().parent
ENTRY_SCRIPT = HERE.parent / "dags" / "entry_scripts" / "count_words.py"
DATA = HERE / "data"
COUNTS_FOLDER = DATA / "lake" / "word-counts"
WORD_COUNTS = COUNTS_FOLDER.as_uri()  # the asset key parallel_run gives its output folder
MATERIALIZED = "prefect.asset.materialization.succeeded"


@task
def make_documents(folder: str, count: int = 40) -> str:
    """Documents to count (a real flow would find them in storage)."""
    documents = Path(folder)
    documents.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        (documents / f"doc-{index:03d}.txt").write_text(" ".join(["word"] * (index + 1)) + "\n")
    return str(documents)


@flow(name="count-words")
def count_words(documents: str = str(DATA / "documents"), output: str = str(COUNTS_FOLDER)) -> dict:
    """Count the words of each document; the output folder becomes a materialized asset."""
    return parallel_run(
        name="count-words",
        entry_script=str(ENTRY_SCRIPT),
        inputs=make_documents(documents),
        output=output,
        mini_batch_size=10,
        process_count_per_node=2,
    )


@flow(name="word-totals")
def word_totals(asset: str = WORD_COUNTS) -> dict:
    """Total the counts of the asset's latest materialization, as its event's metadata names them."""
    with get_client(sync_client=True) as client:
        events = client.read_events(
            filter=EventFilter(event=EventNameFilter(name=[MATERIALIZED]), resource=EventResourceFilter(id=[asset])),
            limit=1,  # the latest first
        ).events
    if not events:
        raise RuntimeError(f"{asset} has not been materialized yet: run count-words first")
    facts = events[0].payload
    output = Path(urllib.request.url2pathname(urllib.parse.urlsplit(facts["output_file"]).path))
    words = sum(int(line.rsplit(": ", 1)[1]) for line in output.read_text().splitlines())
    print(f"run {facts['run_id']}: {facts['rows_written']} documents, {words} words")
    return {"run_id": facts["run_id"], "documents": facts["rows_written"], "words": words}


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else "count"
    if command == "count":
        count_words()
    elif command == "totals":
        word_totals()
    else:
        on_counts = DeploymentEventTrigger(expect={MATERIALIZED}, match={"prefect.resource.id": WORD_COUNTS})
        word_totals.serve(name="on-word-counts", triggers=[on_counts])
