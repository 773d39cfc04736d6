"""Perplexity scored as llama-perplexity does, against its figure for the same file and text."""
from __future__ import annotations

import numpy as np
import pytest

from edgeinfer.model import Model
from edgeinfer.perplexity import perplexity, token_nll


def test_token_nll_is_negative_log_softmax():
    logits = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]], dtype=np.float32)
    nll = token_nll(logits, np.array([2, 1]))
    expected = [-np.log(np.exp(3) / np.exp([1, 2, 3]).sum()), np.log(3)]
    np.testing.assert_allclose(nll, expected, rtol=1e-12)


@pytest.mark.realmodel
def test_smollm2_q4_1_perplexity_matches_llamacpp(smollm2_path, fixtures_dir, load_fixture):
    reference = next(r for r in load_fixture("perplexity")["results"] if r["model"] == "smollm2_q4_1")
    model = Model.load(smollm2_path, n_ctx=reference["n_ctx"], n_threads=2)
    text = (fixtures_dir / "eval.txt").read_text(encoding="utf-8")
    result = perplexity(model, text, n_ctx=reference["n_ctx"])
    assert result.n_chunks == reference["n_chunks"]
    assert abs(result.ppl / reference["ppl"] - 1) <= 0.005, (result.ppl, reference["ppl"])


@pytest.mark.realmodel
def test_gemma3_q4_k_m_perplexity_matches_llamacpp(gemma3_path, fixtures_dir, load_fixture):
    reference = next(r for r in load_fixture("perplexity")["results"] if r["model"] == "gemma3_q4_k_m")
    model = Model.load(gemma3_path, n_ctx=reference["n_ctx"], n_threads=2)
    text = (fixtures_dir / "eval.txt").read_text(encoding="utf-8")
    result = perplexity(model, text, n_ctx=reference["n_ctx"])
    assert result.n_chunks == reference["n_chunks"]
    assert abs(result.ppl / reference["ppl"] - 1) <= 0.005, (result.ppl, reference["ppl"])
