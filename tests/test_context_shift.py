"""Context overflow: prompts that do not fit are refused with the numbers; generation that reaches
the end of the context stops (finish_reason "length") or shifts: the first n_keep positions stay,
the oldest half of the rest is dropped and the kept keys are re-rotated to their new positions.

The oracle for a shift is the numpy reference with the same surgery on its cache: drop the rows,
rotate the kept (already rotated, F16-rounded) keys by -n_discard positions, round to F16 again;
later tokens then sit at the shorter cache's positions in both."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from edgeinfer.errors import ContextOverflowError, EdgeInferError
from edgeinfer.model import Model
from support.cli import run_cli
from support.generation import drain
from support.numpy_reference import LlamaReference, rel_err, rope
from support.tiny_llama import HD32, TinyConfig

PROMPT = [5, 77, 230, 12, 150, 9, 200, 41, 33, 260, 17, 88, 101, 64, 3, 250, 19, 42]


@pytest.fixture(scope="module")
def tiny(tiny_llama_file):
    path, weights = tiny_llama_file()
    return TinyConfig(), weights, path


def reference_shift(ref: LlamaReference, n_keep: int, n_discard: int) -> None:
    c = ref.cfg
    for il in range(c.n_layer):
        K, V = ref.k_cache[il], ref.v_cache[il]
        moved = rope(K[n_keep + n_discard:], np.full(len(K) - n_keep - n_discard, -float(n_discard)), c.rope_base)
        moved = moved.astype(np.float16).astype(np.float64)
        ref.k_cache[il] = np.concatenate([K[:n_keep], moved])
        ref.v_cache[il] = np.concatenate([V[:n_keep], V[n_keep + n_discard:]])


@pytest.mark.parametrize("n_keep,n_discard", [(0, 6), (1, 8), (4, 7)])
def test_shift_matches_reference_with_rerotated_keys(tiny, n_keep, n_discard):
    cfg, weights, path = tiny
    m = Model.load(path, n_ctx=64, n_threads=2)
    ref = LlamaReference(cfg, weights)
    ctx = m.context
    ctx.decode(np.array(PROMPT, dtype=np.int32))
    ref.forward(PROMPT)
    ctx.shift(n_keep, n_discard)
    reference_shift(ref, n_keep, n_discard)
    assert ctx.n_past == len(PROMPT) - n_discard
    for tok in [7, 99, 150, 31]:
        ctx.decode(np.array([tok], dtype=np.int32))
        assert rel_err(np.array(ctx.logits[-1]), ref.forward([tok])[0]) < 5e-3


def test_shift_moves_values_and_keeps_the_head_bit_identical(tiny):
    _, _, path = tiny
    m = Model.load(path, n_ctx=64, n_threads=2)
    ctx = m.context
    ctx.decode(np.array(PROMPT, dtype=np.int32))
    before = ctx.kv_snapshot(len(PROMPT)).reshape(2, 2, len(PROMPT), -1)  # [layer][K, V][pos][bytes]
    ctx.shift(3, 5)
    after = ctx.kv_snapshot(len(PROMPT) - 5).reshape(2, 2, len(PROMPT) - 5, -1)
    assert np.array_equal(after[:, :, :3], before[:, :, :3])
    assert np.array_equal(after[:, 1, 3:], before[:, 1, 8:])        # V rows move as they are
    assert not np.array_equal(after[:, 0, 3:], before[:, 0, 8:])    # K rows are re-rotated


def test_shift_moves_unroped_keys_as_they_are(tiny_llama_file):
    """SmolLM3's every fourth layer is not roped: its keys hold no position, so a shift moves them
    unchanged, while the roped layers' are re-rotated as llama's (the same weights as a llama file:
    layers 0-2 compute alike, only the last, unroped one differs)."""
    def shifted(arch: str) -> tuple[np.ndarray, np.ndarray]:
        path, _ = tiny_llama_file(TinyConfig(arch=arch, n_layer=4))
        ctx = Model.load(path, n_ctx=64, n_threads=2).context
        ctx.decode(np.array(PROMPT, dtype=np.int32))
        before = ctx.kv_snapshot(len(PROMPT)).reshape(4, 2, len(PROMPT), -1)  # [layer][K, V][pos][bytes]
        ctx.shift(3, 5)
        return before, ctx.kv_snapshot(len(PROMPT) - 5).reshape(4, 2, len(PROMPT) - 5, -1)

    before, after = shifted("smollm3")
    assert np.array_equal(after[3, 0, 3:], before[3, 0, 8:])
    assert not np.array_equal(after[:3, 0, 3:], before[:3, 0, 8:])
    llama_before, llama_after = shifted("llama")
    assert np.array_equal(before[:3], llama_before[:3]) and not np.array_equal(before[3], llama_before[3])
    assert np.array_equal(after[:3], llama_after[:3])


def test_bad_shift_arguments_change_nothing(tiny):
    _, _, path = tiny
    m = Model.load(path, n_ctx=64, n_threads=2)
    m.context.decode(np.array(PROMPT, dtype=np.int32))
    for n_keep, n_discard in [(-1, 2), (2, 0), (10, len(PROMPT))]:
        with pytest.raises(EdgeInferError, match="cannot shift"):
            m.context.shift(n_keep, n_discard)
    assert m.context.n_past == len(PROMPT)


def test_generation_stops_at_the_context_end_by_default(tiny):
    _, _, path = tiny
    m = Model.load(path, n_ctx=32, n_threads=2)
    r = m.complete(PROMPT, max_tokens=100, temperature=0, stop=())
    if r.finish_reason == "length":
        assert len(r.tokens) == 32 - len(PROMPT) + 1 and r.context_shifts == 0


def test_shift_policy_generates_past_the_context_end(tiny):
    _, _, path = tiny
    m = Model.load(path, n_ctx=32, n_threads=2)
    gen = m.generate(PROMPT, max_tokens=80, context_overflow="shift", n_keep=4,
                     temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=3)
    _, r = drain(gen)
    assert r.context_shifts >= 1 or r.finish_reason == "stop"
    if r.finish_reason == "length":
        assert len(r.tokens) == 80
    assert m.context.n_past <= 32
    # After a shift only the kept head can be reused by the next prompt.
    assert m.prompt_cache.reusable_tokens <= 4 or r.context_shifts == 0
    with pytest.raises(ValueError, match="context_overflow"):
        m.complete(PROMPT, context_overflow="wrap")


def test_prompt_longer_than_the_context_is_an_error_with_the_numbers(tiny):
    _, _, path = tiny
    m = Model.load(path, n_ctx=16, n_threads=2)
    with pytest.raises(ContextOverflowError, match=r"18 tokens.*16"):
        m.complete(PROMPT, max_tokens=4, context_overflow="shift")


def test_n_ctx_is_clamped_to_the_trained_context_with_a_warning(tiny):
    cfg, _, path = tiny
    with pytest.warns(UserWarning, match=f"trained context of {cfg.n_ctx_train}"):
        m = Model.load(path, n_ctx=4 * cfg.n_ctx_train, n_threads=2)
    assert m.n_ctx == cfg.n_ctx_train
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Model.load(path, n_ctx=0, n_threads=2).n_ctx == cfg.n_ctx_train
        assert Model.load(path, n_ctx=None, n_threads=2).n_ctx == cfg.n_ctx_train


def test_cli_run_with_quantized_cache_and_context_shift(tiny_llama_file):
    path, _ = tiny_llama_file(HD32)
    proc = run_cli("run", str(path), "-p", "the thin tin", "-n", "40", "-c", "16", "--ctk", "q8_0", "--ctv", "q4_0",
                   "--context-shift", "--temp", "0", "-v", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "KV cache q8_0/q4_0" in proc.stderr


@pytest.mark.parametrize("n_keep,n_discard", [(0, 10), (4, 20), (60, 5), (70, 20)])
def test_shift_of_a_centered_k_equals_the_shift_of_an_uncentered_one(tiny_llama_file, n_keep, n_discard):
    """A centered K (kv/centered_k.h) keeps its first 64 positions in F16 and the rest centered on
    their mean: a shift must un-center, re-rope and center again with the same mean, and rows that
    move into the first 64 positions become F16 rows. With a q8_0 K both caches hold the keys up to
    8-bit rounding, so the logits after the shift agree."""
    path, _ = tiny_llama_file(HD32)
    prompt = [int(t) for t in np.random.default_rng(4).integers(3, 250, 110)]
    logits = {}
    for center in (False, True):
        m = Model.load(path, n_ctx=128, n_threads=1, cache_type_k="q8_0", cache_type_v="q8_0", cache_rotate_k=True,
                       cache_center_k=center)
        ctx = m.context
        ctx.decode(np.asarray(prompt, dtype=np.int32))
        ctx.shift(n_keep, n_discard)
        ctx.decode(np.asarray([7, 99, 140, 3], dtype=np.int32), all_logits=True)
        logits[center] = np.array(ctx.logits)
    assert rel_err(logits[True], logits[False]) < 1e-2   # (0.003-0.005 here; a fresh, unshifted cache: 0.02-0.15)
