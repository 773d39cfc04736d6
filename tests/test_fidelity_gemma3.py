"""Gemma 3 270M against the two oracles (../shared/fixtures/REFERENCE.md §6-7):

- the original Q4_K_M file against llama.cpp (greedy_llamacpp_gemma3.json), whose quantized
  matmuls round activations to 8 bits (Q8_0 for the Q5_0/Q8_0 weights, Q8_K for Q4_K/Q6_K);
- the file dequantized to F32 against HF transformers in fp32 (hf_gemma3.json).

Known gap (see the xfail reasons): the Q4_K_M forward is not yet bit-identical to llama.cpp's,
and the 8-bit activation rounding amplifies the remaining last-ulp differences to 0.1-1.1 in
the top-20 logits, so greedy text diverges early on some prompts.
"""
from __future__ import annotations

import pytest

from edgeinfer.model import Model
from test_fidelity_smollm2 import common_prefix, greedy_ids, top20_diff

pytestmark = pytest.mark.realmodel

NOT_YET_EXACT = ("the Q4_K_M forward is not yet bit-exact with llama.cpp: every op up to the Q6_K "
                 "ffn_down matmul (layers 0, 1, 4, 7, ...) matches bit for bit, that one does not "
                 "(its float order is not ggml's AVX2 vec_dot_q6_K_q8_K's), and 8-bit activation "
                 "rounding moves logits by up to ~0.25")


@pytest.fixture(scope="module")
def q4_k_m(gemma3_path):
    return Model.load(gemma3_path, n_ctx=2048, n_threads=2)


@pytest.fixture(scope="module")
def f32(gemma3_f32_path):
    return Model.load(gemma3_f32_path, n_ctx=2048, n_threads=2)


def test_q4_k_m_first_token_matches_llamacpp(q4_k_m, load_fixture):
    for case in load_fixture("greedy_llamacpp_gemma3")["results"]:
        logits = q4_k_m.eval_logits(case["prompt_ids"])[-1]
        assert int(logits.argmax()) == case["gen_ids"][0], case["name"]
        assert top20_diff(logits, case) <= 1.5, case["name"]


@pytest.mark.xfail(reason=NOT_YET_EXACT, strict=False)
def test_q4_k_m_top20_logits_match_llamacpp(q4_k_m, load_fixture):
    for case in load_fixture("greedy_llamacpp_gemma3")["results"]:
        logits = q4_k_m.eval_logits(case["prompt_ids"])[-1]
        assert top20_diff(logits, case) <= 0.15, case["name"]


@pytest.mark.xfail(reason=NOT_YET_EXACT, strict=False)
def test_q4_k_m_greedy_matches_llamacpp(q4_k_m, load_fixture):
    agreements = {}
    for case in load_fixture("greedy_llamacpp_gemma3")["results"]:
        ours = greedy_ids(q4_k_m, case["prompt_ids"])
        agreements[case["name"]] = (common_prefix(ours, case["gen_ids"]), len(case["gen_ids"]))
    long_enough = [a >= min(32, n) for a, n in agreements.values()]
    assert sum(long_enough) >= 5, agreements
    assert all(a >= min(16, n) for a, n in agreements.values()), agreements


def test_f32_matches_hf_transformers(f32, load_fixture):
    hf = {case["name"]: case for case in load_fixture("hf_gemma3")["results"]}
    for case in load_fixture("greedy_llamacpp_gemma3")["results"]:
        ref = hf[case["name"]]
        logits = f32.eval_logits(case["prompt_ids"])[-1]
        assert top20_diff(logits, ref) <= 0.05, case["name"]
        ours = greedy_ids(f32, case["prompt_ids"])
        assert ours == ref["gen_ids"][:len(ours)], case["name"]
