"""Gemma 3 270M against the two oracles (../shared/fixtures/REFERENCE.md §6-7):

- the original Q4_K_M file against llama.cpp (greedy_llamacpp_gemma3.json), whose quantized
  matmuls round activations to 8 bits (Q8_0 for the Q5_0/Q8_0 weights, Q8_K for Q4_K/Q6_K);
- the file dequantized to F32 against HF transformers in fp32 (hf_gemma3.json).

On the AVX-512 kernels the Q4_K_M forward is bit-identical to llama.cpp's on these prompts
(each matmul mirrors the float order of the ggml kernel llama.cpp picks for that weight type and
batch size: repacked Q4_K, tiled Q6_K GEMM for batches of 8+, vec_dot below), so the bars of the
issue (top-20 within 0.15, greedy agreement for 32+ tokens) are checked and, beyond them, exact
equality. Other kernel sets mirror other ggml builds and get the first-token check only
(support/reference_build.py).
"""
from __future__ import annotations

import pytest

from edgeinfer.model import Model
from support.fixture_runs import common_prefix, greedy_ids, top20_diff
from support.reference_build import require_reference_kernels

pytestmark = pytest.mark.realmodel


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


def test_q4_k_m_top20_logits_match_llamacpp(q4_k_m, load_fixture):
    require_reference_kernels()
    diffs = {}
    for case in load_fixture("greedy_llamacpp_gemma3")["results"]:
        logits = q4_k_m.eval_logits(case["prompt_ids"])[-1]
        diffs[case["name"]] = top20_diff(logits, case)
    assert all(d <= 0.15 for d in diffs.values()), diffs
    # not just within the bar: the same floats
    assert all(d == 0.0 for d in diffs.values()), diffs


def test_q4_k_m_greedy_matches_llamacpp(q4_k_m, load_fixture):
    require_reference_kernels()
    agreements = {}
    for case in load_fixture("greedy_llamacpp_gemma3")["results"]:
        ours = greedy_ids(q4_k_m, case["prompt_ids"])
        agreements[case["name"]] = (common_prefix(ours, case["gen_ids"]), len(case["gen_ids"]))
    long_enough = [a >= min(32, n) for a, n in agreements.values()]
    assert sum(long_enough) >= 5, agreements
    assert all(a >= min(16, n) for a, n in agreements.values()), agreements
    assert all(a == n for a, n in agreements.values()), agreements


def test_f32_matches_hf_transformers(f32, load_fixture):
    hf = {case["name"]: case for case in load_fixture("hf_gemma3")["results"]}
    for case in load_fixture("greedy_llamacpp_gemma3")["results"]:
        ref = hf[case["name"]]
        logits = f32.eval_logits(case["prompt_ids"])[-1]
        assert top20_diff(logits, ref) <= 0.05, case["name"]
        ours = greedy_ids(f32, case["prompt_ids"])
        assert ours == ref["gen_ids"][:len(ours)], case["name"]
