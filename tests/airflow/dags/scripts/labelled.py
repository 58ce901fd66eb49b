"""Entry script: each file's name and content, prefixed by the side input `--labels` (a file)."""

import argparse
import os
from pathlib import Path


def init():
    global prefix
    parser = argparse.ArgumentParser()
    parser.add_argument("--labels")
    prefix = Path(parser.parse_known_args()[0].labels).read_text().strip()


def run(mini_batch):
    return [f"{prefix} {os.path.basename(path)} {Path(path).read_text().strip()}" for path in mini_batch]
