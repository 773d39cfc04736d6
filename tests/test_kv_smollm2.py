"""KV cache features on SmolLM2: context shift keeps generation fluent and perplexity close to an
unshifted context; q8_0 K/V stays within the quality bar (the full perplexity figures for every
type are in docs/PERFORMANCE.md, measured with scripts/bench_kv.py and edgeinfer.perplexity)."""
from __future__ import annotations

import numpy as np
import pytest

from edgeinfer.model import Model
from edgeinfer.perplexity import token_nll

pytestmark = pytest.mark.realmodel


@pytest.fixture(scope="module")
def eval_ids(smollm2_path, fixtures_dir):
    m = Model.load(smollm2_path, n_ctx=256, n_threads=2)
    return m.tokenize((fixtures_dir / "eval.txt").read_text(encoding="utf-8"))


def test_long_greedy_generation_with_context_shift_stays_fluent(smollm2_path):
    m = Model.load(smollm2_path, n_ctx=256, n_threads=2)
    prompt = m.chat_prompt("Write a long story about a lighthouse keeper and the sea.").ids
    r = m.complete(prompt, max_tokens=420, temperature=0, repeat_penalty=1.1, context_overflow="shift")
    assert r.context_shifts >= 2, r.finish_reason
    tail = r.tokens[-200:]
    # No degenerate loop on one token, and a varied vocabulary after the shifts.
    longest_run = max(len(list(g)) for _, g in __import__("itertools").groupby(tail))
    assert longest_run <= 4
    assert len(set(tail)) >= 60
    assert "\ufffd" not in r.text


def nll_after(m: Model, ids: list[int], n_ctx: int, shift: bool) -> float:
    """Mean NLL of ids[n_ctx : n_ctx + n_ctx // 2] given what the cache holds of the earlier ones:
    shifted (fill the context, drop the oldest half after BOS, decode on) or a fresh window."""
    ctx = m.context
    half = n_ctx // 2
    m.prompt_cache.reset()
    if shift:
        ctx.decode(np.asarray(ids[:n_ctx - 1], dtype=np.int32))
        ctx.shift(1, half - 1)                        # keep BOS, drop the oldest half
        ctx.decode(np.asarray(ids[n_ctx - 1:n_ctx + half - 1], dtype=np.int32), all_logits=True)
    else:
        window = ids[:1] + ids[half:n_ctx + half - 1]  # BOS + the same tokens, decoded fresh
        ctx.decode(np.asarray(window, dtype=np.int32), all_logits=True)
    logits = np.array(ctx.logits[-half:])
    return float(token_nll(logits, np.asarray(ids[n_ctx:n_ctx + half])).mean())


def test_perplexity_after_a_shift_stays_near_a_fresh_window(smollm2_path, eval_ids):
    m = Model.load(smollm2_path, n_ctx=256, n_threads=2)
    shifted, fresh = [], []
    for start in range(0, 2 * 400, 400):
        ids = eval_ids[:1] + eval_ids[start + 1:start + 400]
        shifted.append(nll_after(m, ids, 256, True))
        fresh.append(nll_after(m, ids, 256, False))
    ppl_shift, ppl_fresh = np.exp(np.mean(shifted)), np.exp(np.mean(fresh))
    print(f"ppl after shift {ppl_shift:.3f}, fresh window {ppl_fresh:.3f}")
    assert ppl_shift < 1.05 * ppl_fresh


@pytest.fixture(scope="module")
def eval_text(fixtures_dir):
    return (fixtures_dir / "eval.txt").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def f16_ppl(smollm2_path, eval_text):
    from edgeinfer.perplexity import perplexity
    return perplexity(Model.load(smollm2_path, n_ctx=512, n_threads=2), eval_text, n_ctx=512, n_chunks=6).ppl


def test_q8_0_cache_perplexity_within_half_a_percent(smollm2_path, eval_text, f16_ppl):
    from edgeinfer.perplexity import perplexity
    q8 = Model.load(smollm2_path, n_ctx=512, n_threads=2, cache_type_k="q8_0", cache_type_v="q8_0")
    assert perplexity(q8, eval_text, n_ctx=512, n_chunks=6).ppl < 1.005 * f16_ppl


def test_rotated_q4_0_cache_perplexity_stays_near_f16(smollm2_path, eval_text, f16_ppl):
    """Without the Hadamard rotation of K, q4_0 costs ~+21 % here; with it ~+7 % (30 chunks in
    docs/PERFORMANCE.md)."""
    from edgeinfer.perplexity import perplexity
    q4 = Model.load(smollm2_path, n_ctx=512, n_threads=2, cache_type_k="q4_0", cache_type_v="q4_0")
    assert q4.cache_rotate_k
    assert perplexity(q4, eval_text, n_ctx=512, n_chunks=6).ppl < 1.10 * f16_ppl


def test_q4_0_cache_reused_prefix_and_chunked_prompt_give_the_cold_tokens(smollm2_path):
    """With a q4_0 K (rotated and centered: mu from the first 64 positions) a generation after a
    reused prefix, and a prompt decoded in chunks of 8, give exactly the greedy tokens of a cold
    run that decodes the prompt in one batch."""
    def q4(n_batch=512):
        return Model.load(smollm2_path, n_ctx=512, n_threads=2, n_batch=n_batch, cache_type_k="q4_0",
                          cache_type_v="q4_0")
    first = q4().chat_prompt("Name three rivers in Europe and say where each one starts. For each river, also give "
                             "its length in kilometres, the countries it flows through, the sea it ends in and one "
                             "city on its banks.").ids
    assert len(first) > 64
    cold_model = q4()
    cold = cold_model.complete(first, max_tokens=24, temperature=0)
    follow = first + cold.tokens + cold_model.tokenize(" Which one is the longest?", add_special=False)
    assert cold_model.cache_center_k
    assert q4(n_batch=8).complete(first, max_tokens=24, temperature=0).tokens == cold.tokens
    # The same model goes on with the conversation (reusing everything cached) vs a cold run.
    warm = cold_model.complete(follow, max_tokens=24, temperature=0)
    assert warm.cached_tokens >= len(first)
    assert warm.tokens == q4().complete(follow, max_tokens=24, temperature=0).tokens
    # And a prefix shorter than the sink rows, reused from a snapshot-free truncation.
    short = q4()
    short.complete(first[:20] + [11, 12], max_tokens=2, temperature=0)
    assert short.complete(first, max_tokens=24, temperature=0).tokens == cold.tokens
