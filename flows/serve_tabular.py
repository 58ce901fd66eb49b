"""Serve the transactions flow as a deployment; each run can override the step through its parameters.

    python flows/serve_tabular.py                # keeps running; Ctrl-C stops it
    # from another shell (or the UI's "Custom run"):
    prefect deployment run score-transactions/score-transactions-served -p mini_batch_size=5
    python -c "from prefect.deployments import run_deployment; \\
        run_deployment('score-transactions/score-transactions-served', parameters={'error_threshold': 0})"

Runs execute in a subprocess each; cancelling one from the UI or API stops its workers.
"""

from __future__ import annotations

from tabular_flow import score_transactions

DEPLOYMENT = "score-transactions-served"

if __name__ == "__main__":
    score_transactions.serve(
        name=DEPLOYMENT,
        description="Score transactions stored as Parquet; parameters override the parallel step's fields.",
    )
