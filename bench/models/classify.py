"""Entry script: image classification of PNG files with a small convolutional network defined in torch.

The network (about 0.6 M parameters, 5 convolutions) gets fixed weights from a seeded initialisation, so
nothing is downloaded and every side computes the same labels. `run(mini_batch)` takes a list of PNG
paths and returns one row per file: its name, the label and its score. Ray Data decodes the images in its
read tasks and calls `classify` on the arrays.
"""

import os
import time

import busy
import numpy as np
import pandas as pd

_model = None


def init():
    global _model
    import torch
    from torch import nn

    torch.manual_seed(0)

    def block(cin, cout):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(2))

    _model = nn.Sequential(
        block(3, 32),
        block(32, 64),
        block(64, 128),
        block(128, 128),
        block(128, 256),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(256, 10),
    ).eval()


def run(mini_batch: list[str]) -> pd.DataFrame:
    from PIL import Image

    start = time.perf_counter()
    images = np.stack([np.asarray(Image.open(path).convert("RGB")) for path in mini_batch])
    return classify(images, [os.path.basename(path) for path in mini_batch], start)


def classify(images: np.ndarray, names: list[str], start: float | None = None) -> pd.DataFrame:
    """Labels of a (N, H, W, 3) uint8 batch."""
    import torch

    start = start if start is not None else time.perf_counter()
    batch = torch.from_numpy(images).permute(0, 3, 1, 2).float().div(255)
    with torch.inference_mode():
        probabilities = _model(batch).softmax(dim=1)
    score, label = probabilities.max(dim=1)
    busy.account(time.perf_counter() - start)
    return pd.DataFrame({"file": names, "label": label.numpy(), "score": score.numpy()})
