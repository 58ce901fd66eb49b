"""The example flows in flows/, run for real: flow parameters override the step."""

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from prefect.client.orchestration import get_client
from prefect.events.filters import EventFilter, EventNameFilter, EventResourceFilter
from prefect_helpers import artifacts, flow_run_id, summary_table, task_states, wait_for

from parallel_steps.prefect import ParallelRunFailed

STEP = "score-transactions"
ROWS, INVALID = 4 * 4 * 500, 4  # the example data: 4 files x 4 row groups x 500 rows, 1 invalid row per file


@pytest.fixture
def tabular(example_flows):
    import tabular_flow

    return tabular_flow


def run(tabular, tmp_path, **parameters):
    """Run the transactions flow on example data in this test's folder; returns its final state."""
    parameters = {
        "input_path": str(tmp_path / "transactions"),
        "output": str(tmp_path / "out"),
        "process_count_per_node": 2,
        **parameters,
    }
    return tabular.score_transactions(**parameters, return_state=True)


def scored_ids(summary: dict) -> list[int]:
    return sorted(pq.read_table(summary["output_file"], columns=["id"]).column("id").to_pylist())


class TestTabularFlow:
    def test_a_rerun_with_overridden_parameters_changes_mini_batches_and_output(self, tabular, tmp_path):
        first = run(tabular, tmp_path)
        summary = first.result()
        assert (summary["status"], summary["mini_batches_total"]) == ("Succeeded", 4)  # one per file
        assert (summary["items_succeeded"], summary["items_failed"]) == (ROWS - INVALID, INVALID)
        assert len(scored_ids(summary)) == ROWS - INVALID

        second = run(tabular, tmp_path, mini_batch_size=5, process_count_per_node=1)
        resized = second.result()
        assert resized["mini_batches_total"] == 16  # one per row group
        assert resized["config"]["process_count_per_node"] == 1
        shown = summary_table(flow_run_id(second), STEP)
        assert (shown["mini_batches_total"], shown["config.mini_batch_size"]) == (16, 5)
        assert scored_ids(resized) == scored_ids(summary)

        one_file = str(tmp_path / "transactions" / "part-002.parquet")
        third = run(tabular, tmp_path, input_path=one_file, output=str(tmp_path / "out-one-file"))
        narrowed = third.result()
        assert narrowed["mini_batches_total"] == 1
        assert scored_ids(narrowed) == sorted(set(range(2 * 2000, 3 * 2000)) & set(scored_ids(summary)))
        assert summary_table(flow_run_id(third), STEP)["items_total"] == 2000

    def test_error_threshold_zero_fails_the_flow_with_the_threshold_reason(self, tabular, tmp_path):
        state = run(tabular, tmp_path, error_threshold=0)
        assert state.is_failed()
        with pytest.raises(ParallelRunFailed, match="error_threshold 0 exceeded"):
            state.result()
        run_id = flow_run_id(state)
        assert task_states(run_id)[STEP] == "Failed"
        assert "error_threshold 0 exceeded" in summary_table(run_id, STEP)["status_reason"]
        assert artifacts(run_id, f"{STEP}-failed-mini-batches") == []  # items failed, no mini-batch did

    def test_an_unchanged_rerun_is_cached(self, tabular, tmp_path):
        first = run(tabular, tmp_path)
        again = run(tabular, tmp_path)
        assert task_states(flow_run_id(first))[STEP] == "Completed"
        assert task_states(flow_run_id(again))[STEP] == "Cached"
        assert again.result() == first.result()


class TestDigitsFlow:
    def test_digits_flow_scores_and_a_rerun_with_mini_batch_size_5_doubles_the_mini_batches(
        self, example_flows, tmp_path
    ):
        import digits_flow

        first = digits_flow.score_digits(output=str(tmp_path / "out"), return_state=True).result()
        assert (first["status"], first["mini_batches_total"]) == ("Succeeded", 45)
        assert first["accuracy"] > 0.9
        second = digits_flow.score_digits(mini_batch_size=5, output=str(tmp_path / "out5"), return_state=True)
        resized = second.result()
        assert resized["mini_batches_total"] == 90
        assert summary_table(flow_run_id(second), "score-digits")["mini_batches_total"] == 90
        assert sorted(Path(resized["output_file"]).read_text().splitlines()) == sorted(
            Path(first["output_file"]).read_text().splitlines()
        )


def test_the_daily_flow_runs_only_the_new_days_files(example_flows, tmp_path):
    import daily_flow

    incoming = str(tmp_path / "incoming")
    day1 = daily_flow.score_daily("2026-11-29", incoming=incoming, output=str(tmp_path / "out1"))
    assert (day1["mini_batches_total"], day1["inputs_new"], day1["mini_batches_reused"]) == (3, 25, 0)
    day2 = daily_flow.score_daily("2026-11-30", incoming=incoming, output=str(tmp_path / "out2"))
    assert day2["run_dir"] != day1["run_dir"]
    assert (day2["mini_batches_total"], day2["mini_batches_reused"], day2["mini_batches_run"]) == (6, 3, 3)
    assert (day2["inputs_new"], day2["inputs_changed"], day2["inputs_deleted"]) == (25, 0, 0)
    rows = Path(day2["output_file"]).read_text().splitlines()
    assert len({row.split(":")[0] for row in rows}) == len(rows) == 50


def test_the_assets_flows_the_second_totals_what_the_first_materialized(example_flows, tmp_path):
    import assets_flow

    output = tmp_path / "word-counts"
    counted = assets_flow.count_words(documents=str(tmp_path / "documents"), output=str(output))
    assert (counted["status"], counted["rows_written"]) == ("Succeeded", 40)

    def materialized() -> bool:
        with get_client(sync_client=True) as client:
            return bool(
                client.read_events(
                    filter=EventFilter(
                        event=EventNameFilter(name=[assets_flow.MATERIALIZED]),
                        resource=EventResourceFilter(id=[output.as_uri()]),
                    ),
                    limit=1,
                ).events
            )

    wait_for(materialized, 60, "the materialization event")
    totals = assets_flow.word_totals(asset=output.as_uri())
    assert totals == {"run_id": counted["run_id"], "documents": 40, "words": sum(range(1, 41))}
