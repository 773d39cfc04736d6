"""Model.generate's hooks for callers such as the server: on_token (per-token logits, abort by
raising), logit_bias and the presence/frequency penalties, on the tiny random model."""
from __future__ import annotations

import numpy as np
import pytest

from edgeinfer.generate import PromptCache, stream_generate
from edgeinfer.model import Model
from support.generation import drain, scripted
from support.tiny_llama import IM_END


def test_on_token_sees_each_generated_token_and_its_logits(tiny_llama):
    seen = []
    expected = tiny_llama.complete([5, 6, 7], max_tokens=6, temperature=0).tokens
    result = tiny_llama.complete([5, 6, 7], max_tokens=6, temperature=0,
                                 on_token=lambda token, logits: seen.append((token, int(np.argmax(logits)),
                                                                             logits.shape)))
    assert [t for t, _, _ in seen] == result.tokens == expected
    assert all(argmax == t and shape == (tiny_llama.n_vocab,) for t, argmax, shape in seen)  # greedy


def test_on_token_not_called_for_the_end_of_generation_token(tiny_llama):
    seen = []
    ids = tiny_llama.tokenize("hi", add_special=False) + [IM_END]
    gen = stream_generate(tiny_llama._core, PromptCache(tiny_llama.context), [5], scripted(ids), 8,
                          on_token=lambda token, logits: seen.append(token))
    _, result = drain(gen)
    assert seen == ids[:-1] == result.tokens


class Abort(Exception):
    pass


def test_on_token_raising_aborts_and_the_next_generation_reuses_the_cache(tiny_llama):
    calls = []

    def abort_on_third(token, logits):
        calls.append(token)
        if len(calls) == 3:
            raise Abort

    prompt = list(range(10, 30))
    with pytest.raises(Abort):
        tiny_llama.complete(prompt, max_tokens=20, temperature=0, on_token=abort_on_third)
    assert len(calls) == 3
    # The cache holds the prompt and the two tokens decoded before the abort; a new request that
    # extends the prompt reuses it and gives the same tokens as a cold run.
    assert tiny_llama.context.n_past == len(prompt) + 2
    result = tiny_llama.complete(prompt + [40], max_tokens=4, temperature=0)
    assert result.cached_tokens == len(prompt)
    cold = Model.load(tiny_llama.path, n_ctx=64).complete(prompt + [40], max_tokens=4, temperature=0)
    assert result.tokens == cold.tokens


def test_logit_bias_and_penalties_reach_the_sampler(tiny_llama):
    plain = tiny_llama.complete([5, 6, 7], max_tokens=1, temperature=0).tokens[0]
    forced = 3 if plain != 3 else 4
    biased = tiny_llama.complete([5, 6, 7], max_tokens=3, temperature=0, logit_bias={forced: 1000.0})
    assert biased.tokens == [forced] * 3
    # A huge presence penalty stops the forced token from repeating.
    mixed = tiny_llama.complete([5, 6, 7], max_tokens=3, temperature=0, logit_bias={forced: 50.0},
                                presence_penalty=1000.0)
    assert mixed.tokens[0] == forced and forced not in mixed.tokens[1:]
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tiny_llama.complete([5, 6, 7], max_tokens=1, logit_bias={tiny_llama.n_vocab: 1.0})
