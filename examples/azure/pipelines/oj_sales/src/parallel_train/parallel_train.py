"""Train one sales model per Store and Brand, in the shape of Azure's oj-sales parallel training: run() gets
one partition's rows (`partition_keys`) and its `mini_batch_context`, adds lagged sales as features, fits
a model and saves it under <model_folder>/<Store>/<Brand>/ (pickled here; Azure's sample uses mlflow)."""

import argparse
import os
import pickle

import pandas as pd
from sklearn.ensemble import GradientBoostingRegressor


def init():
    parser = argparse.ArgumentParser()
    parser.add_argument("--drop_cols", type=str)
    parser.add_argument("--target_col", type=str)
    parser.add_argument("--date_col", type=str)
    parser.add_argument("--lagging_orders", type=str)
    parser.add_argument("--model_folder", type=str)
    args, _ = parser.parse_known_args()

    global target_col, date_col, lagging_orders, model_folder, drop_cols
    target_col, date_col = args.target_col, args.date_col
    lagging_orders = [int(i) for i in args.lagging_orders.split(",")]
    model_folder = args.model_folder
    drop_cols = args.drop_cols.split(",")


def run(input_data, mini_batch_context):
    if not isinstance(input_data, pd.DataFrame):
        raise Exception("Not a valid DataFrame input.")
    if target_col not in input_data.columns:
        raise Exception("No target column found from input tabular data")

    print(f"partition_key_value = {mini_batch_context.partition_key_value}")

    input_data[date_col] = pd.to_datetime(input_data[date_col])
    data = input_data.set_index(date_col).sort_index().drop(columns=drop_cols, errors="ignore")
    for lag in lagging_orders:
        data["lag_" + str(lag)] = data[target_col].shift(lag)
    data = data.dropna()

    features = data.columns.drop(target_col)
    model = GradientBoostingRegressor(random_state=12).fit(data[features].values, data[target_col].values)

    folder = os.path.join(model_folder, *[str(v) for v in mini_batch_context.partition_key_value.values()])
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "model.pkl"), "wb") as file:
        pickle.dump(model, file)

    return []
