"""Score iris rows with an MLflow model folder, in the shape of Azure's iris parallel pipeline: the folder
comes as --model, run() gets a DataFrame and returns the rows with their predicted variety. The folder's
MLmodel file names the pickled model (with mlflow installed, `mlflow.sklearn.load_model` reads it the same)."""

import argparse
import os
import pickle

import yaml


def init():
    parser = argparse.ArgumentParser(allow_abbrev=False, description="ParallelRunStep Agent")
    parser.add_argument("--model", type=str, default=0)
    args, _ = parser.parse_known_args()

    global iris_model

    with open(os.path.join(args.model, "MLmodel")) as file:
        flavor = yaml.safe_load(file)["flavors"]["sklearn"]
    with open(os.path.join(args.model, flavor["pickled_model"]), "rb") as file:
        iris_model = pickle.load(file)


def run(input_data):
    pred = iris_model.predict(input_data.iloc[:, :4])

    # cleanup output
    result = input_data.drop(input_data.columns[4:], axis=1)
    result["variety"] = pred

    return result
