"""Our runs set beside the reference runs in ../shared/fixtures (llama.cpp's greedy records and
HF transformers' fp32 ones): the same greedy continuation, and the distances the tests bound."""
from __future__ import annotations

import numpy as np

from edgeinfer.model import Model


def greedy_ids(model: Model, prompt_ids: list[int], n: int = 64) -> list[int]:
    """Greedy continuation; an end-of-generation token is included, as in the fixtures."""
    result = model.complete(prompt_ids, max_tokens=n, temperature=0)
    return list(result.tokens) + ([result.eog_token] if result.eog_token is not None else [])


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def top20_diff(logits: np.ndarray, ref: dict) -> float:
    """Largest |logit - the reference's| over the reference's top 20 at the prompt's last position."""
    ids = np.asarray(ref["prompt_last_top20_ids"])
    return float(np.max(np.abs(logits[ids] - np.asarray(ref["prompt_last_top20_logits"]))))
