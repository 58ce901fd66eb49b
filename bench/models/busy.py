"""How long a worker spent in the model: written to $BENCH_BUSY_DIR/<pid> after each mini-batch, with the
threads torch uses there, for bench/inference.py's busy share (the same measure on every side)."""

import os

_seconds = 0.0


def account(seconds: float) -> None:
    global _seconds
    _seconds += seconds
    folder = os.environ.get("BENCH_BUSY_DIR")
    if folder:
        import torch

        with open(os.path.join(folder, str(os.getpid())), "w") as file:
            file.write(f"{_seconds} {torch.get_num_threads()}\n")
