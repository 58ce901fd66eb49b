"""Write the data and models of the four Azure ML sample shapes, small and generated here.

    python examples/azure/prepare.py [FOLDER]      (default: this folder)

- data/mnist/*.png: 8x8 digit images (scikit-learn's digits), data/mnist_labels.csv;
  models/mnist/centroids.npy: a folder model (one mean image per digit).
- data/iris/iris_{0,1,2}.csv: 150 flowers, four measurements each;
  models/iris/iris_model.pkl: a single-file model (logistic regression naming the variety).
- data/dataset_partition_test/<user>/<season>/<genre>.wav: six small files laid out as in
  Azure's file-dataset-partition-per-folder sample.
- data/oj_sales/oj_sales.csv: orange juice sales by week, store and brand (the OJ sample's
  columns); data/oj_sales_partitioned/Store=*/Brand=*/part-0.parquet: the same rows written
  by key (hive folders, what `partition_by` and Spark write).
- pipelines/iris/neural-iris-mltable/iris.csv and pipelines/iris/iris-model/ (an MLflow model folder:
  MLmodel and model.pkl): the data and model of Azure's iris parallel pipeline.
- pipelines/oj_sales/oj_sales_data/oj_sales_data.csv: weekly sales by store and brand, the columns of
  Azure's oj-sales parallel pipeline, for its partitioning and training jobs.
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds

HERE = Path(__file__).resolve().parent
IRIS_COLUMNS = ["sepal.length", "sepal.width", "petal.length", "petal.width"]
#: (user, season, genre, size in bytes): the layout of Azure's partition-per-folder sample.
MUSIC = [
    ("user1", "winter", "disco", 3000),
    ("user1", "fall", "orchestra", 5000),
    ("user2", "summer", "piano", 2000),
    ("user3", "fall", "spirituality", 4000),
    ("user4", "spring", "piano", 2000),
    ("user4", "fall", "piano", 2000),
]
STORES, BRANDS, WEEKS = (2, 5, 8), ("dominicks", "minute.maid", "tropicana"), 8


def main(root: Path = HERE) -> None:
    if (root / "data" / "oj_sales_partitioned").exists():
        print(f"the Azure samples' data is already in {root}")  # unchanged inputs let reruns reuse results
        return
    rng = np.random.default_rng(0)
    digits(root)
    iris(root)
    music(root, rng)
    oj_sales(root, rng)
    pipelines(root, rng)
    print(f"wrote the Azure samples' data and models to {root / 'data'} and {root / 'models'}")


def digits(root: Path) -> None:
    from PIL import Image
    from sklearn.datasets import load_digits

    images, labels = load_digits(return_X_y=True)
    train, test = slice(0, 1500), slice(1500, 1540)
    centroids = np.stack([images[train][labels[train] == digit].mean(axis=0) for digit in range(10)])
    (root / "models" / "mnist").mkdir(parents=True)
    np.save(root / "models" / "mnist" / "centroids.npy", centroids)
    folder = root / "data" / "mnist"
    folder.mkdir(parents=True)
    names = []
    for index, (image, label) in enumerate(zip(images[test], labels[test])):
        names.append((f"{index}.png", int(label)))
        Image.fromarray(image.reshape(8, 8).astype(np.uint8)).save(folder / names[-1][0])
    pd.DataFrame(names, columns=["Filename", "Label"]).to_csv(root / "data" / "mnist_labels.csv", index=False)


def iris(root: Path) -> None:
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    data = load_iris()
    frame = pd.DataFrame(data.data, columns=IRIS_COLUMNS)
    variety = np.array(["Setosa", "Versicolor", "Virginica"])[data.target]
    model = LogisticRegression(max_iter=1000).fit(frame, variety)
    (root / "models" / "iris").mkdir(parents=True)
    (root / "models" / "iris" / "iris_model.pkl").write_bytes(pickle.dumps(model))
    (root / "data" / "iris").mkdir(parents=True)
    for part in range(3):
        frame.iloc[part::3].to_csv(root / "data" / "iris" / f"iris_{part}.csv", index=False)


def music(root: Path, rng: np.random.Generator) -> None:
    for user, season, genre, size in MUSIC:
        folder = root / "data" / "dataset_partition_test" / user / season
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{genre}.wav").write_bytes(rng.integers(0, 256, size, dtype=np.uint8).tobytes())


def oj_sales(root: Path, rng: np.random.Generator) -> None:
    keys = pd.MultiIndex.from_product([range(WEEKS), STORES, BRANDS], names=["week", "Store", "Brand"]).to_frame()
    rows = len(keys)
    frame = pd.DataFrame(
        {
            "WeekStarting": (pd.Timestamp("1990-06-14") + pd.to_timedelta(7 * keys["week"], unit="D")).dt.date,
            "Store": keys["Store"],
            "Brand": keys["Brand"],
            "Quantity": rng.integers(2000, 20000, rows),
            "logQuantity": 0.0,
            "Advert": rng.integers(0, 2, rows),
            "Price": rng.uniform(1.5, 3.5, rows).round(2),
            "Age60": rng.uniform(0.1, 0.3, rows).round(6),
            "COLLEGE": rng.uniform(0.1, 0.4, rows).round(6),
            "INCOME": rng.uniform(10.3, 11.0, rows).round(6),
            "Hincome150": rng.uniform(1.5, 6.0, rows).round(6),
            "Large HH": rng.uniform(0.05, 0.2, rows).round(6),
            "Minorities": rng.uniform(0.02, 0.4, rows).round(6),
            "WorkingWoman": rng.uniform(0.2, 0.5, rows).round(6),
            "SSTRDIST": rng.uniform(1.0, 10.0, rows).round(6),
            "SSTRVOL": rng.uniform(0.5, 2.0, rows).round(6),
            "CPDIST5": rng.uniform(0.5, 2.0, rows).round(6),
            "CPWVOL5": rng.uniform(0.1, 0.6, rows).round(6),
        }
    ).reset_index(drop=True)
    frame["logQuantity"] = np.log(frame["Quantity"]).round(6)
    (root / "data" / "oj_sales").mkdir(parents=True)
    frame.to_csv(root / "data" / "oj_sales" / "oj_sales.csv", index=False)
    ds.write_dataset(
        pa.Table.from_pandas(frame, preserve_index=False),
        root / "data" / "oj_sales_partitioned",
        format="parquet",
        partitioning=["Store", "Brand"],
        partitioning_flavor="hive",
    )


def pipelines(root: Path, rng: np.random.Generator) -> None:
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    iris_folder = root / "pipelines" / "iris"
    data = load_iris()
    frame = pd.DataFrame(data.data, columns=["sepal_length", "sepal_width", "petal_length", "petal_width"])
    frame.to_csv(iris_folder / "neural-iris-mltable" / "iris.csv", index=False)
    model = LogisticRegression(max_iter=1000).fit(
        frame.values, np.array(["Setosa", "Versicolor", "Virginica"])[data.target]
    )
    (iris_folder / "iris-model").mkdir(exist_ok=True)
    (iris_folder / "iris-model" / "model.pkl").write_bytes(pickle.dumps(model))
    (iris_folder / "iris-model" / "MLmodel").write_text(
        "flavors:\n  python_function:\n    loader_module: mlflow.sklearn\n    model_path: model.pkl\n"
        "  sklearn:\n    pickled_model: model.pkl\n    serialization_format: pickle\n"
    )
    keys = pd.MultiIndex.from_product(
        [range(30), (1000, 1001, 1002), BRANDS], names=["week", "Store", "Brand"]
    ).to_frame()
    sales = pd.DataFrame(
        {
            "WeekStarting": (pd.Timestamp("1990-06-14") + pd.to_timedelta(7 * keys["week"], unit="D")).dt.date,
            "Store": keys["Store"],
            "Brand": keys["Brand"],
            "Quantity": rng.integers(2000, 20000, len(keys)),
            "Advert": rng.integers(0, 2, len(keys)),
            "Price": rng.uniform(1.5, 3.5, len(keys)).round(2),
        }
    ).reset_index(drop=True)
    sales["Revenue"] = (sales["Quantity"] * sales["Price"]).round(2)
    folder = root / "pipelines" / "oj_sales" / "oj_sales_data"
    folder.mkdir(exist_ok=True)
    sales.to_csv(folder / "oj_sales_data.csv", index=False)


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else HERE)
