"""Score iris flowers in a table, as Azure's iris ParallelRunStep sample does: the model's name comes
as an argument and is resolved with azureml.core's Model.get_model_path; run() gets a DataFrame."""

import argparse
import pickle

from azureml.core.model import Model
from azureml_user.parallel_run import EntryScript


def init():
    global iris_model

    logger = EntryScript().logger
    logger.info("init() is called.")

    parser = argparse.ArgumentParser(description="Iris model serving")
    parser.add_argument("--model_name", dest="model_name", required=True)
    args, _unknown_args = parser.parse_known_args()

    model_path = Model.get_model_path(args.model_name)
    with open(model_path, "rb") as model_file:
        iris_model = pickle.load(model_file)


def run(input_data):
    logger = EntryScript().logger
    logger.info(f"run() is called with: {input_data}.")

    # make inference (one variety per row)
    pred = iris_model.predict(input_data)

    # cleanup output
    result = input_data.drop(input_data.columns[4:], axis=1)
    result["variety"] = pred

    return result
