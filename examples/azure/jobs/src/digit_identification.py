"""Identify digits in image files, as Azure's v2 MNIST parallel job does: the model folder comes as
the --model argument (an input of the job)."""

import argparse
import os

import numpy as np
from PIL import Image


def init():
    global g_centroids

    parser = argparse.ArgumentParser(allow_abbrev=False, description="ParallelRunStep Agent")
    parser.add_argument("--model", type=str, default=0)
    args, _ = parser.parse_known_args()

    model_path = args.model
    g_centroids = np.load(os.path.join(model_path, "centroids.npy"))


def run(mini_batch):
    print(f"run method start: {__file__}, run({mini_batch})")
    resultList = []

    for image in mini_batch:
        # prepare each image
        data = Image.open(image)
        np_im = np.array(data, dtype=np.float64).reshape((1, 64))
        # perform inference: the nearest mean image
        best_result = np.argmin(((g_centroids - np_im) ** 2).sum(axis=1))
        resultList.append(f"{os.path.basename(image)}: {best_result}")

    return resultList
