"""`mini_batch_context`: what ParallelRunStep passes as run()'s second argument.

A worker checks run()'s signature once (`wants_context`) and, when it takes two
positional parameters, builds one small context per mini-batch. The dataset is
built only when the script asks for it, so a worker that never looks pays nothing.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..inputs.mini_batch_data import MiniBatchFiles, MiniBatchRows

from ..inputs.minibatch import MiniBatch


def wants_context(run: Callable[..., Any]) -> bool:
    """Whether run() takes a second positional parameter: `run(mini_batch, mini_batch_context)`."""
    try:
        parameters = list(inspect.signature(run).parameters.values())
    except (TypeError, ValueError):  # a builtin or C function: called with the mini-batch only
        return False
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in parameters)


class MiniBatchContext:
    """The mini-batch's description, as ParallelRunStep gives it to `run(mini_batch, mini_batch_context)`.

    Attributes:
        partition_key_value: key -> value of the mini-batch's partition (`partition_keys`), `{}` otherwise.
        minibatch_index: the mini-batch's id (its place in the plan, as in the run's logs).
        dataset: the mini-batch's data as a dataset of this project: a `FileDataset` of its files
            (`to_path()`), or a `TabularDataset` whose `to_pandas_dataframe()` is its rows.
    """

    __slots__ = ("_mini_batch", "minibatch_index", "partition_key_value")

    def __init__(self, mini_batch: MiniBatch):
        self._mini_batch = mini_batch
        self.minibatch_index = mini_batch.index
        self.partition_key_value = mini_batch.key_values()

    @property
    def dataset(self) -> MiniBatchFiles | MiniBatchRows:
        from ..inputs.mini_batch_data import mini_batch_dataset

        return mini_batch_dataset(self._mini_batch)

    def __repr__(self) -> str:
        return (
            f"MiniBatchContext(minibatch_index={self.minibatch_index}, "
            f"partition_key_value={self.partition_key_value!r})"
        )
