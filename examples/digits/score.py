"""Entry script in the ParallelRunStep style: init() loads the model, run() scores PNG files."""

import argparse
import os
import pickle

import numpy as np
from azureml_user.parallel_run import EntryScript
from PIL import Image

model = None


def init():
    global model
    parser = argparse.ArgumentParser()
    parser.add_argument("--model_dir", required=True)
    args, _ = parser.parse_known_args()
    with open(os.path.join(args.model_dir, "model.pkl"), "rb") as file:
        model = pickle.load(file)
    EntryScript().logger.info("model loaded from %s", args.model_dir)


def run(mini_batch):
    images = [np.asarray(Image.open(path), dtype=np.float64) * 16 / 255 for path in mini_batch]
    predictions = model.predict(np.stack(images).reshape(len(images), -1))
    EntryScript().logger.info("scored %d images", len(mini_batch))
    return [f"{os.path.basename(path)}: {digit}" for path, digit in zip(mini_batch, predictions)]
