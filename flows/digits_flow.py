"""Batch-score the digits images (examples/digits) with a parallel step in a Prefect flow.

    pip install -e ".[prefect,examples]"
    python flows/digits_flow.py                          # prepares the example on first use
    python flows/digits_flow.py --mini-batch-size 5      # 90 mini-batches instead of 45

The step is examples/digits/step.yaml (the same one `parallel-steps run` uses);
flow parameters override its fields.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from types import ModuleType

from parallel_steps.prefect import parallel_run
from prefect import flow, task

DIGITS = Path(__file__).resolve().parent.parent / "examples" / "digits"


def _example_module(name: str) -> ModuleType:
    """Load examples/digits/NAME.py, which is a script folder, not a package."""
    spec = importlib.util.spec_from_file_location(f"digits_{name}", DIGITS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@task
def prepare() -> None:
    """Write the images, labels and model of the example unless they exist (unchanged inputs keep reuse)."""
    _example_module("prepare").main()


@task
def accuracy(predictions_file: str) -> float:
    return _example_module("accuracy").accuracy(Path(predictions_file))


@flow(name="score-digits")
def score_digits(
    mini_batch_size: int | None = None,
    process_count_per_node: int | None = None,
    error_threshold: int | None = None,
    output: str | None = None,
) -> dict:
    """Score the digits images; parameters left at None keep the step file's values.

    Args:
        mini_batch_size: images per mini-batch (step file: 10).
        process_count_per_node: worker processes (step file: 2).
        error_threshold: images allowed to fail (step file: 5).
        output: output folder (step file: examples/digits/out).
    """
    prepare()
    summary = parallel_run(
        DIGITS / "step.yaml",
        mini_batch_size=mini_batch_size,
        process_count_per_node=process_count_per_node,
        error_threshold=error_threshold,
        output=output,
    )
    summary["accuracy"] = accuracy(summary["output_file"])
    return summary


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mini-batch-size", type=int)
    parser.add_argument("--process-count-per-node", type=int)
    parser.add_argument("--error-threshold", type=int)
    parser.add_argument("--output")
    result = score_digits(**vars(parser.parse_args()))
    print(
        f"{result['status']}: {result['mini_batches_total']} mini-batches, accuracy {result['accuracy']:.3f} "
        f"-> {result['output_file']}"
    )
