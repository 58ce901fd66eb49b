"""Batch image scoring: the digits main job as Airflow DAGs.

prepare -> score_digits -> accuracy

- prepare runs examples/digits/prepare.py (PNG images, labels and a model; skipped when done).
- score_digits is a `ParallelRunOperator` built from examples/digits/step.yaml: the entry
  script score.py loads the model in init() and scores a mini-batch of PNG files in run().
  Its output goes to the task's run directory; the run summary is its XCom.
- accuracy reads the output file named in that summary.

Two DAGs, one step:

- parallel_run_digits runs the step's driver and workers in the Airflow task.
- parallel_run_digits_ray_job runs them on a Ray cluster: the driver as a Ray job, the workers
  as Ray actors. The task submits the job and defers; the triggerer follows the run and the task
  resumes with the summary, so no worker slot is held meanwhile. The cluster's address comes
  from the Airflow Variable `ray_address` (else RAY_ADDRESS); the run root (PARALLEL_STEPS_HOME)
  and examples/digits must be on storage the Airflow workers, the triggerer and the Ray nodes
  share (docs/multinode.md).

Rerun with other settings (a trigger conf key named like a config field overrides it):

    airflow dags test parallel_run_digits -c '{"mini_batch_size": 5}'

Needs the `examples` extra (scikit-learn, pillow) next to `airflow` (and `ray` for the Ray DAG).
"""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Param, task

from parallel_steps import ParallelRunConfig
from parallel_steps.airflow import ParallelRunOperator

DIGITS = Path(__file__).resolve().parents[1] / "examples" / "digits"


def digits_dag(dag_id: str, **score_fields: Any) -> None:
    """The digits DAG; `score_fields` say where the step runs."""
    with DAG(
        dag_id=dag_id,
        schedule=None,
        catchup=False,
        tags=["parallel-steps", "example"],
        doc_md=__doc__,
        params={"mini_batch_size": Param(10, type="integer", minimum=1, description="Images per mini-batch.")},
    ):

        @task
        def prepare() -> str:
            """Set up the example's images and model once; later runs find them and reuse results."""
            try:
                import PIL  # noqa: F401 - score.py needs them in the workers too
                import sklearn  # noqa: F401
            except ImportError as exc:
                raise RuntimeError(
                    f"the digits example needs the examples extra ({exc.name} is missing): "
                    "pip install 'parallel-steps[airflow,examples]'"
                ) from None
            runpy.run_path(str(DIGITS / "prepare.py"), run_name="__main__")
            return str(DIGITS / "data" / "images")

        score_digits = ParallelRunOperator(
            task_id="score_digits",
            # The step file of the main job; output=None keeps the output in the run directory.
            parallel_run_config=ParallelRunConfig.from_yaml(DIGITS / "step.yaml", output=None),
            inputs=prepare(),  # an XComArg: rendered when the task runs, and sets the dependency
            **score_fields,
        )

        @task
        def accuracy(summary: dict) -> float:
            """Compare the predictions in the step's output file with the labels."""
            check = runpy.run_path(str(DIGITS / "accuracy.py"))["accuracy"]
            value = check(Path(summary["output_file"]))
            print(
                f"accuracy {value:.3f} over {summary['items_succeeded']} images "
                f"in {summary['mini_batches_total']} mini-batches (reused: {summary['reused']})"
            )
            return value

        accuracy(score_digits.output)


digits_dag("parallel_run_digits")
digits_dag(
    "parallel_run_digits_ray_job",
    backend="ray",
    submit_to="ray_job",
    ray_address="{{ var.value.get('ray_address', '') }}",  # empty: RAY_ADDRESS
    deferrable=True,
)
