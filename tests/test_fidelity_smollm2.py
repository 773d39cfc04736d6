"""SmolLM2-135M-Instruct against the two oracles (../shared/fixtures/REFERENCE.md §6-7):

- the original Q4_1 file against llama.cpp, whose quantized dot products round activations to
  8 bits (Q8_1/Q8_0) exactly as our integer kernels do;
- the file dequantized to F32 against HF transformers in fp32.
"""
from __future__ import annotations

import pytest

from edgeinfer.model import Model
from support.fixture_runs import common_prefix, greedy_ids, top20_diff
from support.reference_build import require_reference_kernels

pytestmark = pytest.mark.realmodel


@pytest.fixture(scope="module")
def q4_1(smollm2_path):
    return Model.load(smollm2_path, n_ctx=2048, n_threads=2)


@pytest.fixture(scope="module")
def f32(smollm2_f32_path):
    return Model.load(smollm2_f32_path, n_ctx=2048, n_threads=2)


def test_q4_1_top20_logits_match_llamacpp(q4_1, load_fixture):
    require_reference_kernels()
    for case in load_fixture("greedy_llamacpp_smollm2")["results"]:
        logits = q4_1.eval_logits(case["prompt_ids"])[-1]
        assert top20_diff(logits, case) <= 0.15, case["name"]


def test_q4_1_greedy_matches_llamacpp(q4_1, load_fixture):
    require_reference_kernels()
    agreements = {}
    for case in load_fixture("greedy_llamacpp_smollm2")["results"]:
        ours = greedy_ids(q4_1, case["prompt_ids"])
        agreements[case["name"]] = (common_prefix(ours, case["gen_ids"]), len(case["gen_ids"]))
    # At least 32 tokens (or all of llama.cpp's, when it stopped earlier) on 5 of 6, 16 on all.
    long_enough = [a >= min(32, n) for a, n in agreements.values()]
    assert sum(long_enough) >= 5, agreements
    assert all(a >= min(16, n) for a, n in agreements.values()), agreements


def test_f32_matches_hf_transformers(f32, load_fixture):
    hf = {case["name"]: case for case in load_fixture("hf_smollm2")["results"]}
    for case in load_fixture("greedy_llamacpp_smollm2")["results"]:
        ref = hf[case["name"]]
        logits = f32.eval_logits(case["prompt_ids"])[-1]
        assert top20_diff(logits, ref) <= 0.05, case["name"]
        ours = greedy_ids(f32, case["prompt_ids"])
        # HF ran 64 argmax steps without stopping at EOG; we stop at (and include) it.
        assert ours == ref["gen_ids"][:len(ours)], case["name"]
