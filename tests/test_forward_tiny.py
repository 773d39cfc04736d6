"""The core's llama forward pass against the numpy reference, on tiny random-weight GGUF files."""
from __future__ import annotations

import numpy as np
import pytest

from edgeinfer.model import Model
from support.numpy_reference import LlamaReference, rel_err
from support.tiny_llama import TinyConfig

PROMPT = [5, 77, 230, 12, 150, 9, 200, 41, 33, 260, 17]
# Relative error bound (max |Δlogit| / max |logit|). F32/F16 weights: only the F16 KV cache and
# the F16 attention accumulator differ from the float64 reference. Quantized weights also round
# every activation vector to 8 bits (Q8_0 / Q8_1) inside the dot products.
REL_TOL = {"F32": 5e-3, "F16": 5e-3, "Q8_0": 3e-2, "Q4_0": 3e-2, "Q4_1": 3e-2, "Q5_0": 3e-2, "Q5_1": 3e-2}


@pytest.fixture(scope="module", params=list(REL_TOL))
def tiny(request, tiny_llama_file):
    cfg = TinyConfig(weight_type=request.param)
    path, weights = tiny_llama_file(cfg)
    return request.param, cfg, weights, path


def test_batch_prefill_matches_reference(tiny):
    wtype, cfg, weights, path = tiny
    model = Model.load(path, n_ctx=64, n_threads=2)
    got = model.eval_logits(PROMPT)
    want = LlamaReference(cfg, weights).forward(PROMPT)
    assert got.shape == want.shape
    assert rel_err(got, want) < REL_TOL[wtype]
    assert np.mean(np.argmax(got, -1) == np.argmax(want, -1)) >= 0.9


def test_token_by_token_decode_matches_reference(tiny):
    wtype, cfg, weights, path = tiny
    model = Model.load(path, n_ctx=64, n_threads=2)
    ref = LlamaReference(cfg, weights)
    ctx = model.context
    for i, tok in enumerate(PROMPT):
        ctx.decode(np.array([tok], dtype=np.int32))
        want = ref.forward([tok])[0]
        got = np.array(ctx.logits[-1])
        assert rel_err(got, want) < REL_TOL[wtype], f"position {i}"


def test_prefill_and_decode_agree(tiny):
    """The same tokens give the same logits whether sent as one batch or one by one."""
    _, _, _, path = tiny
    model = Model.load(path, n_ctx=64, n_threads=2)
    batch = model.eval_logits(PROMPT)
    model.context.truncate(0)
    for i, tok in enumerate(PROMPT):
        model.context.decode(np.array([tok], dtype=np.int32))
        np.testing.assert_allclose(model.context.logits[-1], batch[i], rtol=0, atol=1e-4 * np.abs(batch).max())


def test_chunked_prefill_matches_single_batch(tiny_llama_path):
    path = tiny_llama_path
    whole = Model.load(path, n_ctx=64, n_threads=1).eval_logits(PROMPT)
    chunked = Model.load(path, n_ctx=64, n_threads=2, n_batch=3).eval_logits(PROMPT)
    np.testing.assert_allclose(chunked, whole, rtol=0, atol=1e-4 * np.abs(whole).max())


def test_tied_output_uses_token_embedding(tiny_llama_file):
    cfg = TinyConfig(tied_output=True)
    path, weights = tiny_llama_file(cfg)
    got = Model.load(path, n_ctx=64).eval_logits(PROMPT)
    want = LlamaReference(cfg, weights).forward(PROMPT)
    assert rel_err(got, want) < REL_TOL["F32"]


@pytest.mark.parametrize("cfg", [TinyConfig(rope_freq_factors=True), TinyConfig(rope_linear_factor=4.0)],
                         ids=["rope_freqs", "linear_scaling"])
def test_rope_scaling_variants_match_reference(cfg, tiny_llama_file):
    path, weights = tiny_llama_file(cfg)
    got = Model.load(path, n_ctx=64).eval_logits(PROMPT)
    want = LlamaReference(cfg, weights).forward(PROMPT)
    assert rel_err(got, want) < REL_TOL["F32"]
    # The variant matters: the unscaled reference is clearly different.
    unscaled = {k: v for k, v in weights.items() if k != "rope_freqs.weight"}
    plain = LlamaReference(TinyConfig(), unscaled).forward(PROMPT)
    assert rel_err(plain, want) > 10 * REL_TOL["F32"]
