"""Score iris flowers, as Azure's v2 iris parallel job does: the model folder comes as the --model
argument, run() gets a DataFrame of rows and returns them with the predicted variety."""

import argparse
import os
import pickle


def init():
    global model

    parser = argparse.ArgumentParser(allow_abbrev=False, description="ParallelRunStep Agent")
    parser.add_argument("--model", type=str, default=0)
    args, _ = parser.parse_known_args()

    with open(os.path.join(args.model, "iris_model.pkl"), "rb") as file:
        model = pickle.load(file)


def run(input_data):
    # returns of every mini-batch are aggregated into the append_row_to output
    result = input_data.drop(input_data.columns[4:], axis=1)
    result["variety"] = model.predict(input_data)
    return result
