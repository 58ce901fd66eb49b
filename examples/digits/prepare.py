"""Set up the digits example: PNG images to score, their labels, and a trained model (the side input).

Writes data/images/*.png (the held-out quarter of scikit-learn's digits),
data/labels.csv and models/digits/model.pkl next to this file.
"""

import csv
import pickle
from pathlib import Path

import numpy as np
from PIL import Image
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.svm import SVC

HERE = Path(__file__).resolve().parent


def main() -> None:
    if (HERE / "data" / "labels.csv").exists() and (HERE / "models" / "digits" / "model.pkl").exists():
        print("the digits example is already set up")  # unchanged inputs let a rerun reuse its results
        return
    digits = load_digits()
    train_x, test_x, train_y, test_y = train_test_split(digits.images, digits.target, test_size=0.25, random_state=0)
    model = SVC(gamma=0.001).fit(train_x.reshape(len(train_x), -1), train_y)
    models = HERE / "models" / "digits"
    models.mkdir(parents=True, exist_ok=True)
    (models / "model.pkl").write_bytes(pickle.dumps(model))

    images = HERE / "data" / "images"
    images.mkdir(parents=True, exist_ok=True)
    with open(HERE / "data" / "labels.csv", "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["file", "label"])
        for i, (image, label) in enumerate(zip(test_x, test_y)):
            name = f"digit_{i:04d}.png"
            Image.fromarray((image * 255 / 16).astype(np.uint8)).save(images / name)
            writer.writerow([name, int(label)])
    print(f"wrote {len(test_x)} images to {images} and the model to {models}")


if __name__ == "__main__":
    main()
