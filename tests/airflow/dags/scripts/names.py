"""Entry script: the name of each input file."""

import os


def run(mini_batch):
    return [os.path.basename(path) for path in mini_batch]
