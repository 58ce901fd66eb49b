"""Entry script in the ParallelRunStep style for tabular input: run() gets a DataFrame of transactions.

Returns one scored row per valid transaction. Rows with a negative amount are
left out, so the step counts them as failed items (see `error_threshold`).
"""

import math

import pandas as pd
from azureml_user.parallel_run import EntryScript

REVIEW_ABOVE = 0.8


def init():
    EntryScript().logger.info("transaction scorer ready")


def run(mini_batch: pd.DataFrame) -> pd.DataFrame:
    valid = mini_batch[mini_batch["amount"] >= 0]
    risk = [
        1 / (1 + math.exp(-(amount / 250 - 2 + items / 10)))
        for amount, items in zip(valid["amount"], valid["n_items"], strict=True)
    ]
    EntryScript().logger.info("scored %d of %d transactions", len(valid), len(mini_batch))
    return pd.DataFrame(
        {"id": valid["id"].to_numpy(), "risk": risk, "review": [score > REVIEW_ABOVE for score in risk]}
    )
