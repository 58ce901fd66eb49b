"""The example DAGs end to end through `dag.test()` (what `airflow dags test` runs) against a migrated SQLite
metadata DB, and the provider registration as `airflow providers list` shows it."""

from pathlib import Path

import pyarrow.parquet as pq


def test_airflow_providers_list_shows_parallel_steps(airflow):
    result = airflow("providers", "list", "--output", "json")
    assert result.returncode == 0, result.stderr
    assert '"package_name": "parallel-steps"' in result.stdout.replace("'", '"')


def test_digits_dag_scores_reruns_with_conf_and_reuses(dag_test):
    first = dag_test("parallel_run_digits")
    assert first.returncode == 0, first.log[-5000:]
    summary = first.xcom("score_digits")
    assert (summary["status"], summary["reused"]) == ("Succeeded", False)
    assert (summary["mini_batches_total"], summary["items_succeeded"]) == (45, 450)
    assert first.xcom("accuracy") > 0.9
    assert "progress: 45/45 mini-batches done" in first.log
    assert f"; report: {summary['report']}" in first.log  # the task log ends with the report and key figures
    assert Path(summary["report"]).is_file()

    smaller = dag_test("parallel_run_digits", {"mini_batch_size": 5})
    assert smaller.returncode == 0, smaller.log[-5000:]
    resized = smaller.xcom("score_digits")
    assert resized["mini_batches_total"] == 90
    assert resized["config"]["mini_batch_size"] == 5
    assert resized["output_file"] != summary["output_file"]
    assert Path(resized["output_file"]).read_text() == Path(summary["output_file"]).read_text()

    again = dag_test("parallel_run_digits")
    assert again.returncode == 0, again.log[-5000:]
    reused = again.xcom("score_digits")
    assert reused["reused"] is True
    assert reused["workers_started"] == 0
    assert Path(reused["output_file"]).read_text() == Path(summary["output_file"]).read_text()
    assert again.xcom("accuracy") == first.xcom("accuracy")


def test_tabular_dag_fails_past_its_error_threshold_and_succeeds_with_its_params(dag_test):
    failed = dag_test("parallel_run_tabular", {"error_threshold": 1, "mini_batch_size": 5})
    assert failed.returncode != 0
    summary = failed.xcom("score", key="parallel_run_summary")
    assert summary["status"] == "Failed"
    assert "error_threshold 1 exceeded" in summary["status_reason"]
    assert summary["mini_batches_total"] == 20  # 5 bytes: one mini-batch per Parquet row group
    assert summary["status_reason"] in failed.log  # the reason and where to look, in the task log
    assert summary["job_result"].endswith("logs/job_result.txt")
    assert summary["job_result"] in failed.log

    default = dag_test("parallel_run_tabular")
    assert default.returncode == 0, default.log[-5000:]
    scored = default.xcom("score")
    assert (scored["status"], scored["items_failed"], scored["mini_batches_total"]) == ("Succeeded", 3, 8)
    assert scored["config"]["error_threshold"] == 5
    assert scored["config"]["process_count_per_node"] == 2
    assert pq.read_metadata(scored["output_file"]).num_rows == 9997
    assert default.xcom("report") == {"rows": 9997, "items_failed": 3}


def test_mapped_dag_runs_one_step_per_folder_each_in_its_own_run_directory(dag_test):
    run = dag_test("parallel_run_mapped")
    assert run.returncode == 0, run.log[-5000:]
    summaries = run.mapped("count_words")
    assert len(summaries) == 3
    assert [Path(s["run_dir"]).name for s in summaries] == ["0", "1", "2"]
    assert len({s["output_file"] for s in summaries}) == 3
    for shard, summary in enumerate(summaries):
        lines = Path(summary["output_file"]).read_text().splitlines()
        assert len(lines) == 12
        assert all(line.startswith(f"shard-{shard}/") for line in lines)
    assert run.xcom("total") == {"steps": 3, "files": 36, "mini_batches": 9}


def test_daily_dag_runs_only_the_new_days_files(dag_test, tmp_path):
    first = dag_test("parallel_run_daily", logical_date="2026-11-29")
    assert first.returncode == 0, first.log[-5000:]
    day1 = first.xcom("score_incoming")
    assert (day1["mini_batches_total"], day1["inputs_new"], day1["mini_batches_reused"]) == (3, 25, 0)

    second = dag_test("parallel_run_daily", logical_date="2026-11-30")
    assert second.returncode == 0, second.log[-5000:]
    day2 = second.xcom("score_incoming")
    assert day2["run_dir"] != day1["run_dir"]  # each DAG run has its own run directory
    assert (day2["mini_batches_total"], day2["mini_batches_reused"], day2["mini_batches_run"]) == (6, 3, 3)
    assert (day2["inputs_new"], day2["inputs_changed"], day2["inputs_deleted"]) == (25, 0, 0)
    rows = Path(day2["output_file"]).read_text().splitlines()
    assert len(rows) == 50
    assert len({row.split(":")[0] for row in rows}) == 50  # every file's row, old and new, once
