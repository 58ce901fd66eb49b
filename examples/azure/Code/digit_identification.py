"""Identify digits in image files, as Azure's MNIST ParallelRunStep sample does: the model is loaded
with azureml.core's Model.get_model_path in init(), run() gets a list of image paths."""

import os

import numpy as np
from azureml.core import Model
from PIL import Image


def init():
    global g_centroids

    # pull down model from workspace
    model_path = Model.get_model_path("mnist-prs")
    g_centroids = np.load(os.path.join(model_path, "centroids.npy"))


def run(mini_batch):
    print(f"run method start: {__file__}, run({mini_batch})")
    resultList = []

    for image in mini_batch:
        # prepare each image
        data = Image.open(image)
        np_im = np.array(data, dtype=np.float64).reshape((1, 64))
        # perform inference: the nearest mean image
        distances = ((g_centroids - np_im) ** 2).sum(axis=1)
        best_result = np.argmin(distances)
        resultList.append(f"{os.path.basename(image)}: {best_result}")

    return resultList
