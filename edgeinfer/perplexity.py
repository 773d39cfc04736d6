"""Perplexity of a model on a text, scored the way llama.cpp's `llama-perplexity` scores it.

The text is tokenized once (with BOS if the model adds one) and cut into chunks of `n_ctx` tokens;
each chunk is evaluated from an empty context (its first token replaced by BOS when the model adds
BOS), and only the second half of each chunk is scored, so every scored token sees at least
n_ctx/2 tokens of context. PPL = exp(mean negative log-likelihood over the scored tokens)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from edgeinfer.errors import EdgeInferError
from edgeinfer.model import Model
from edgeinfer.wording import Ref, Wording

# A chunk of n_ctx tokens scores the n_ctx - n_ctx//2 - 1 after its first half (the last token has
# no next one to predict): 3 is the least that scores any; a smaller one would average over no
# tokens and report nan.
MIN_N_CTX = 3


def check_chunk_size(n_ctx: int) -> None:
    """Refuses a chunk size that scores no token, before anything is loaded or evaluated."""
    if n_ctx < MIN_N_CTX:
        raise EdgeInferError(Wording(f"a chunk of {n_ctx} token{'s' * (n_ctx != 1)} scores none (the second half of "
                                     "each chunk is scored, after the first half as context); use at least ",
                                     Ref("n_ctx", MIN_N_CTX)))


@dataclass
class PerplexityResult:
    ppl: float
    stderr: float             # standard error of the PPL estimate, as llama-perplexity reports it
    n_chunks: int
    n_ctx: int
    n_scored: int
    chunk_ppl: list[float] = field(default_factory=list)  # running PPL after each chunk


def token_nll(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """-log softmax(logits[i])[targets[i]] for each row, in float64."""
    x = logits.astype(np.float64)
    m = x.max(axis=1, keepdims=True)
    log_z = np.log(np.exp(x - m).sum(axis=1)) + m[:, 0]
    return log_z - x[np.arange(len(targets)), targets]


def text_chunks(model: Model, text: str, n_ctx: int, n_chunks: int | None = None) -> list[np.ndarray]:
    """`text` tokenized once and cut into chunks of `n_ctx` token ids, each starting with BOS when
    the model adds one (llama-perplexity's and llama-imatrix's chunks); at most `n_chunks`."""
    if model.n_ctx < n_ctx:
        raise EdgeInferError(f"the model's context ({model.n_ctx}) is smaller than the chunk size {n_ctx}")
    tokens = np.asarray(model.tokenize(text, add_special=True), dtype=np.int64)
    available = len(tokens) // n_ctx
    if available == 0:
        raise EdgeInferError(f"the text has {len(tokens)} tokens, fewer than one chunk of {n_ctx}")
    n = available if n_chunks is None else min(n_chunks, available)
    bos = model.vocab.bos if model.vocab.add_bos else -1
    chunks = []
    for i in range(n):
        chunk = tokens[i * n_ctx:(i + 1) * n_ctx].copy()
        if bos >= 0:
            chunk[0] = bos
        chunks.append(chunk)
    return chunks


def perplexity_from_nll(nll: np.ndarray) -> tuple[float, float]:
    """(PPL, its standard error) from the scored tokens' negative log-likelihoods: llama-perplexity's
    error estimate, the delta method on exp(mean) from the NLL's variance."""
    mean = float(nll.mean())
    var = float((nll * nll).mean() - mean * mean)
    return math.exp(mean), math.exp(mean) * math.sqrt(max(var, 0.0) / max(len(nll) - 1, 1))


def perplexity(
    model: Model,
    text: str,
    n_ctx: int = 512,
    n_chunks: int | None = None,
    on_chunk: Callable[[int, int, float], None] | None = None,
    on_scored: Callable[[int, np.ndarray, np.ndarray], None] | None = None,
) -> PerplexityResult:
    """Scores `text`; `on_chunk(i, n, running_ppl)` is called after each chunk, and
    `on_scored(i, logits, targets)` with chunk i's scored rows (for KL divergence)."""
    check_chunk_size(n_ctx)
    chunks = text_chunks(model, text, n_ctx, n_chunks)
    n = len(chunks)
    first = n_ctx // 2
    nll_all: list[np.ndarray] = []
    running: list[float] = []
    for i, chunk in enumerate(chunks):
        logits = model.eval_logits(chunk.tolist(), first=first)  # rows first..n_ctx-1
        nll_all.append(token_nll(logits[:-1], chunk[first + 1:n_ctx]))
        if on_scored:
            on_scored(i, logits[:-1], chunk[first + 1:n_ctx])
        running.append(math.exp(float(np.concatenate(nll_all).mean())))
        if on_chunk:
            on_chunk(i, n, running[-1])
    nll = np.concatenate(nll_all)
    ppl, stderr = perplexity_from_nll(nll)
    return PerplexityResult(ppl=ppl, stderr=stderr, n_chunks=n, n_ctx=n_ctx, n_scored=len(nll), chunk_ppl=running)
