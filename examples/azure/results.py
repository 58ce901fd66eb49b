"""Read the outputs back as the Azure ML notebooks do: the same `pandas.read_csv` calls, the same column labels.

The output file of `append_row` holds one `str()` line per returned element and a DataFrame's
rows as space-separated values, as ParallelRunStep writes it, so these calls work unchanged.
"""

from __future__ import annotations

import pandas as pd

#: shape -> (read_csv keywords, column labels): the notebooks' "View the results" cells.
READERS = {
    "mnist": (dict(delimiter=":", header=None), ["Filename", "Prediction"]),
    "iris": (
        dict(delimiter=" ", header=None),
        ["sepal.length", "sepal.width", "petal.length", "petal.width", "variety"],
    ),
    "file_partitions": (
        dict(delimiter=",", header=None),
        ["File Name", "File Size", "Ratio of Size in Partition", "user", "genres", "Total File Size of Partition"],
    ),
    "oj_sales": (
        dict(delimiter=" ", header=None),
        [
            "WeekStarting",
            "Quantity",
            "logQuantity",
            "Advert",
            "Price",
            "Age60",
            "COLLEGE",
            "INCOME",
            "Hincome150",
            "Large HH",
            "Minorities",
            "WorkingWoman",
            "SSTRDIST",
            "SSTRVOL",
            "CPDIST5",
            "CPWVOL5",
            "Store",
            "Brand",
            "total_income",
        ],
    ),
}


def read_output(shape: str, result_file: str) -> pd.DataFrame:
    """The output of one shape as its notebook reads it (`oj_sales_hive` reads like `oj_sales`)."""
    options, columns = READERS[shape.removesuffix("_hive")]
    df = pd.read_csv(result_file, **options)
    df.columns = columns  # fails, as in the notebook, when the file has another number of columns
    return df
