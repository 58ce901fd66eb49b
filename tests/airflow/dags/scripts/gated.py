"""Entry script: each run() marks that it started, then waits until the gate file exists."""

import os
import time
from pathlib import Path


def run(mini_batch):
    Path(os.environ["STARTED"], str(os.getpid())).touch()
    while not os.path.exists(os.environ["GATE"]):
        time.sleep(0.05)
    return [os.path.basename(path) for path in mini_batch]
