"""edgeinfer's logits for a converted tiny checkpoint against transformers' F32 logits, for a whole
prompt (prefill) and token by token (decode): tests/test_convert_hf.py's check, also applied to
files other converters write (tests/test_convert_by_llamacpp.py)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from edgeinfer import Model
from support.hf_tiny import hf_decode_logits, hf_logits

PROMPTS = ["The quick brown fox jumps over the lazy dog. 12345",
           "Hello, world!\n  def f(x): return x ** 2  # word17 token3 piece1 " * 3]

# The F32 weights are used as stored, but the KV cache holds F16 keys and values and attention
# accumulates V in F16 (ggml's CPU flash attention, which the core mirrors): with these weights
# (init std 0.2, logits up to ~7) that is up to ~0.5% of the logits' range after 130 tokens, the
# same with and without RoPE scaling. A wrong tensor layout or RoPE gives errors of the order of
# the logits themselves; tests/test_convert_hf.py also checks the RoPE factors exactly.
REL_TOL = 1e-2


def assert_logits_close(ours: np.ndarray, ref: np.ndarray) -> None:
    scale = float(np.abs(ref).max())
    diff = float(np.abs(ours - ref).max())
    bound = REL_TOL * scale
    assert diff <= bound, f"max abs diff {diff:.4g} for logits up to {scale:.3g}"
    # The same top token wherever the reference's top two differ by more than twice the largest
    # error seen (a nearer tie may flip either way); random tiny models have many near ties.
    top2 = np.sort(ref, axis=1)[:, -2:]
    decisive = top2[:, 1] - top2[:, 0] > 2 * diff
    print(f"max abs diff {diff:.4g} of {scale:.3g}, decisive rows {decisive.mean():.0%}")
    assert decisive.mean() > 0.6   # not a vacuous check
    assert (ours.argmax(axis=1) == ref.argmax(axis=1))[decisive].all()


def check_against_hf(model, gguf_path: Path, n_ctx: int = 256, prompts: list[str] = PROMPTS,
                     decode: bool = True) -> None:
    em = Model.load(gguf_path, n_ctx=n_ctx, n_threads=2)
    for prompt in prompts:
        ids = em.tokenize(prompt)
        assert len(ids) > 8
        assert_logits_close(em.eval_logits(ids), hf_logits(model, ids))
        if prompt is not prompts[0] or not decode:
            continue   # decode the first prompt only: one transformers call a token is the slow part
        # token by token through the KV cache, against transformers' cache
        em.prompt_cache.reset()
        ours = []
        for t in ids:
            em.prompt_cache.decode([t])
            ours.append(np.array(em.context.logits)[-1])
        assert_logits_close(np.stack(ours), hf_decode_logits(model, ids))
