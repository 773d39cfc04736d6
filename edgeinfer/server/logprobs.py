"""Log-probabilities of generated tokens, from the raw logits they were drawn from.

They describe the model's distribution (log-softmax of its logits), before logit bias, penalties
and temperature: what the model thought, not how the sampler then chose.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TokenLogprob:
    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]   # (id, logprob) of the most likely tokens, best first


def token_logprob(logits: np.ndarray, token: int, n_top: int) -> TokenLogprob:
    """`token`'s log-probability under softmax(logits), and the `n_top` most likely tokens'."""
    x = np.asarray(logits, dtype=np.float32)
    peak = float(x.max())
    log_total = peak + float(np.log(np.exp(x - peak, dtype=np.float32).sum(dtype=np.float64)))
    top: tuple[tuple[int, float], ...] = ()
    if n_top > 0:
        n_top = min(n_top, len(x))
        ids = np.argpartition(-x, n_top - 1)[:n_top]
        ids = ids[np.lexsort((ids, -x[ids]))]   # most likely first; ties by id
        top = tuple((int(i), float(x[i]) - log_total) for i in ids)
    return TokenLogprob(int(token), float(x[token]) - log_total, top)
