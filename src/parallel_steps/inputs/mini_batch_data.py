"""A mini-batch's data as an Azure ML entry script reads it (`mini_batch_context.dataset`): its files
(`to_path()`) or its rows (`to_pandas_dataframe()`).

The dataset models stay pure descriptions (datasets.py); the reading is the loaders'. This module,
above both, gives the entry script datasets that are also readers, as Azure ML's are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import PrivateAttr

from .datasets import FileDataset, TabularDataset
from .loaders import load
from .minibatch import MiniBatch

if TYPE_CHECKING:
    import pandas as pd


class MiniBatchFiles(FileDataset):
    """The files of one mini-batch."""

    def to_path(self) -> list[str]:
        """The mini-batch's files, in plan order (as Azure ML's `to_path`)."""
        return list(self.path)


class MiniBatchRows(TabularDataset):
    """The rows of one mini-batch."""

    _mini_batch: MiniBatch = PrivateAttr()

    def to_pandas_dataframe(self) -> pd.DataFrame:
        """The mini-batch's rows as one pandas DataFrame (as Azure ML's `to_pandas_dataframe`), path columns last."""
        rows: pd.DataFrame = load(self._mini_batch)
        return rows


def mini_batch_dataset(mini_batch: MiniBatch) -> MiniBatchFiles | MiniBatchRows:
    """The dataset of one mini-batch: its files, or its rows (read when asked for)."""
    if mini_batch.kind == "files":
        return MiniBatchFiles(path=list(mini_batch.paths), partition_format=None)
    read = mini_batch.read or {}
    paths = list(dict.fromkeys(mini_batch.paths))
    rows = MiniBatchRows(path=paths, format=None, read_options=read.get("options", {}), partition_format=None)
    rows._mini_batch = mini_batch
    return rows
