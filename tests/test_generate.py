"""The decoding loop on a tiny random model: streaming text, stop conditions, the context limit
and prefix reuse. A scripted sampler makes the generated tokens whatever a test needs."""
from __future__ import annotations

import numpy as np
import pytest

from edgeinfer.errors import ContextOverflowError
from edgeinfer.generate import PromptCache, stream_generate
from edgeinfer.model import Model
from support.generation import drain, scripted
from support.tiny_llama import IM_END


def run(model: Model, prompt: list[int], sampler, max_tokens=32, stop=()):
    gen = stream_generate(model._core, PromptCache(model.context), prompt, sampler, max_tokens, stop)
    return drain(gen)


def test_multibyte_characters_split_across_tokens_stream_whole(tiny_llama):
    text = "naïve café 🙂 done"
    ids = tiny_llama.tokenize(text, add_special=False)
    assert len(ids) > len(text.encode()) // 2  # byte-level tokens: characters span several
    pieces, result = run(tiny_llama, [5], scripted(ids), max_tokens=len(ids))
    assert "".join(pieces) == text == result.text
    assert all("\ufffd" not in p for p in pieces)
    assert result.finish_reason == "length" and result.tokens == ids


def test_a_character_cut_by_max_tokens_is_dropped_not_replaced(tiny_llama):
    ids = tiny_llama.tokenize("ok 🙂", add_special=False)
    cut = next(n for n in range(1, len(ids)) if tiny_llama.detokenize(ids[:n]).endswith("\ufffd"))
    pieces, result = run(tiny_llama, [5], scripted(ids), max_tokens=cut)
    assert "".join(pieces) == "ok " == result.text   # the emoji's first bytes are not a character
    assert result.tokens == ids[:cut] and result.finish_reason == "length"


def test_text_with_a_lone_surrogate_is_a_clear_error_in_the_python_api(tiny_llama):
    with pytest.raises(ValueError, match=r"the text to tokenize is not valid Unicode.*U\+D83D\) at character 6"):
        tiny_llama.tokenize("Hello \ud83d")
    with pytest.raises(ValueError, match="message 0 content is not valid Unicode"):
        tiny_llama.chat_prompt([{"role": "user", "content": "cut \udc00"}])
    with pytest.raises(ValueError, match="a stop string is not valid Unicode"):
        tiny_llama.complete([5], max_tokens=1, stop=["\ud83d"])


def test_stop_string_ends_generation_and_is_not_emitted(tiny_llama):
    ids = tiny_llama.tokenize("hello STOP world", add_special=False)
    pieces, result = run(tiny_llama, [5], scripted(ids), stop=["STOP"])
    assert "".join(pieces) == "hello " == result.text
    assert result.finish_reason == "stop"


def test_text_that_only_starts_like_a_stop_string_is_released(tiny_llama):
    ids = tiny_llama.tokenize("a STO b", add_special=False)
    pieces, result = run(tiny_llama, [5], scripted(ids), max_tokens=len(ids), stop=["STOP"])
    assert "".join(pieces) == "a STO b" and result.finish_reason == "length"


def test_end_of_generation_token_stops(tiny_llama):
    ids = tiny_llama.tokenize("hi", add_special=False) + [IM_END, 7, 7]
    pieces, result = run(tiny_llama, [5], scripted(ids))
    assert "".join(pieces) == "hi" and result.finish_reason == "stop" and result.eog_token == IM_END
    assert result.tokens == ids[:2]


def test_reaching_the_context_end_finishes_with_length(tiny_llama):
    prompt = list(range(10, 60))  # 50 of 64 positions
    result = tiny_llama.complete(prompt, max_tokens=100, temperature=0)
    assert result.finish_reason == "length"
    assert len(prompt) + len(result.tokens) == tiny_llama.n_ctx + 1  # the last token needs no decode
    assert tiny_llama.context.n_past == tiny_llama.n_ctx


def test_prompt_longer_than_the_context_is_a_clear_error(tiny_llama):
    with pytest.raises(ContextOverflowError, match="64"):
        tiny_llama.complete(list(range(10, 80)), max_tokens=4)
    # The tiny_llama is still usable afterwards.
    assert tiny_llama.complete([5, 6, 7], max_tokens=3, temperature=0).finish_reason == "length"


def test_prefix_reuse_gives_the_cold_result(tiny_llama_path):
    warm = Model.load(tiny_llama_path, n_ctx=64)
    cold = Model.load(tiny_llama_path, n_ctx=64)
    first = [5, 6, 7, 8, 9, 10]
    warm.complete(first, max_tokens=4, temperature=0)
    extended = first + [11, 12, 13]
    warm_result = warm.complete(extended, max_tokens=8, temperature=0)
    cold_result = cold.complete(extended, max_tokens=8, temperature=0)
    assert warm_result.cached_tokens == len(first)
    assert cold_result.cached_tokens == 0
    assert warm_result.tokens == cold_result.tokens


def test_seeded_sampling_is_reproducible(tiny_llama):
    a = tiny_llama.complete([5, 6, 7], max_tokens=12, temperature=1.0, seed=42, top_k=0, top_p=1.0, min_p=0.0)
    b = tiny_llama.complete([5, 6, 7], max_tokens=12, temperature=1.0, seed=42, top_k=0, top_p=1.0, min_p=0.0)
    c = tiny_llama.complete([5, 6, 7], max_tokens=12, temperature=1.0, seed=43, top_k=0, top_p=1.0, min_p=0.0)
    assert a.tokens == b.tokens and a.tokens != c.tokens


def test_logits_view_is_zero_copy_and_read_only(tiny_llama):
    tiny_llama.context.truncate(0)
    tiny_llama.context.decode(np.array([5, 6], dtype=np.int32))
    view = tiny_llama.context.logits
    assert view.shape == (1, tiny_llama.n_vocab) and not view.flags.writeable and not view.flags.owndata
    before = view.copy()
    tiny_llama.context.decode(np.array([7], dtype=np.int32))
    np.testing.assert_array_equal(view, before)  # a held view keeps its values


def test_held_logits_views_never_change_while_buffers_are_recycled(tiny_llama):
    """Steps write to a buffer nothing views: a released one is written again (the core keeps
    spares so that a generation holding its last row does not cost an allocation per step), a
    held one never is, whichever of the two latest views are kept."""
    ctx = tiny_llama.context
    ctx.truncate(0)
    held = []
    for token in range(5, 25):
        ctx.decode(np.array([token], dtype=np.int32))
        view = ctx.logits
        held = held[-(token % 3):] + [(view, view.copy())] if token % 3 else [(view, view.copy())]
        for v, values in held:
            np.testing.assert_array_equal(v, values)


def test_logits_from_keeps_only_the_asked_rows_with_the_same_values(tiny_llama_path):
    # n_batch 8 splits the 20 ids into chunks, so rows start inside, at and past chunk edges.
    m = Model.load(tiny_llama_path, n_ctx=64, n_threads=2, n_batch=8)
    ids = [(7 * i + 3) % 60 + 3 for i in range(20)]
    full = m.eval_logits(ids)
    assert full.shape == (20, m.n_vocab)
    for first in (0, 5, 8, 13, 19):
        part = m.eval_logits(ids, first=first)
        assert part.shape == (20 - first, m.n_vocab)
        np.testing.assert_array_equal(part, full[first:])
    m.context.truncate(0)
    m.context.decode(np.asarray(ids, dtype=np.int32), logits_from=len(ids))  # cache only
    assert m.context.logits.shape == (0, m.n_vocab) and m.context.n_past == len(ids)
    # the cache it filled is the one a logits-producing decode fills
    m.context.decode(np.asarray([9], dtype=np.int32))
    after_cache_only = np.array(m.context.logits)
    np.testing.assert_array_equal(after_cache_only, m.eval_logits(ids + [9], first=20))


def test_logits_from_outside_the_batch_is_a_clear_error(tiny_llama):
    tiny_llama.context.truncate(0)
    for bad in (-1, 4):
        with pytest.raises(Exception, match="first logit row"):
            tiny_llama.context.decode(np.array([5, 6, 7], dtype=np.int32), logits_from=bad)
    with pytest.raises(Exception, match="not both"):
        tiny_llama.context.decode(np.array([5, 6, 7], dtype=np.int32), all_logits=True, logits_from=1)
