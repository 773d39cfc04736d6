"""`edgeinfer imatrix`: an importance matrix collected by running a model over a calibration text,
as llama-imatrix does (the file format: edgeinfer.quantize.imatrix_file)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from edgeinfer.model import Model
from edgeinfer.perplexity import perplexity_from_nll, text_chunks, token_nll
from edgeinfer.quantize.imatrix_file import ImatrixEntry, ImportanceMatrix


@dataclass
class CollectResult:
    imatrix: ImportanceMatrix
    ppl: float           # perplexity over the chunks' second halves, as llama-imatrix reports it
    ppl_stderr: float
    n_chunks: int


def collect(model: Model, text: str, n_ctx: int = 512, n_chunks: int | None = None, include_output: bool = False,
            dataset: str = "", on_chunk: Callable[[int, int, float], None] | None = None) -> CollectResult:
    """Runs `text` through `model` in chunks of `n_ctx` tokens (llama-imatrix's chunks: each from
    an empty cache, BOS first) and sums every matmul's input (the output head's too if
    `include_output`). `on_chunk(i, n, running_ppl)` after each chunk."""
    chunks = text_chunks(model, text, n_ctx, n_chunks)
    ctx = model.context
    first = n_ctx // 2
    nll: list[np.ndarray] = []
    ctx.start_activation_stats(include_output)
    try:
        for i, chunk in enumerate(chunks):
            # Every row through the last layer (all logits), as llama-imatrix asks for them: the
            # last layer's matmuls then see the whole chunk like every other layer's.
            logits = model.eval_logits(chunk.tolist(), first=0)
            nll.append(token_nll(logits[first:-1], chunk[first + 1:]))
            if on_chunk:
                on_chunk(i, len(chunks), math.exp(float(np.concatenate(nll).mean())))
    finally:
        ctx.stop_activation_stats()
    # [n_mat][cols] sums and a count per matrix (n_mat > 1: a stack of MoE experts)
    entries = {name: ImatrixEntry(np.atleast_2d(sum2), np.atleast_1d(rows).astype(np.int64), np.atleast_2d(s))
               for name, sum2, s, rows in ctx.activation_stats()}
    im = ImportanceMatrix(entries, [dataset] if dataset else [], len(chunks), n_ctx)
    ppl, stderr = perplexity_from_nll(np.concatenate(nll))
    return CollectResult(im, ppl, stderr, len(chunks))
