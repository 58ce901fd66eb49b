"""Read the predictions back from the output file and print the accuracy against the labels."""

import csv
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def accuracy(predictions_file: Path) -> float:
    with open(HERE / "data" / "labels.csv") as file:
        labels = {row["file"]: row["label"] for row in csv.DictReader(file)}
    predicted = dict(line.strip().split(": ") for line in predictions_file.read_text().splitlines() if line.strip())
    missing = set(labels) - set(predicted)
    if missing:
        raise SystemExit(f"{len(missing)} images have no prediction in {predictions_file}")
    return sum(predicted[name] == label for name, label in labels.items()) / len(labels)


if __name__ == "__main__":
    output = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "out" / "predictions.txt"
    print(f"accuracy {accuracy(output):.3f} over the predictions in {output}")
