"""Speculative decoding with a draft model (edgeinfer.draft_model).

- Sampling without a seed, the tokens follow the target's distribution: a chi-square test of the
  first two tokens of many generations on the tiny model (support/chi_square.py; the rule alone:
  tests/test_rejection.py).
- Guesses chosen without randomness (greedy, seeded) give plain decoding's tokens: on the tiny
  model with drafts of other weights and a context shift, and on both real models, each drafted
  for by its own file with the target requantized to Q8_0 (our quantizer, a second or two).
- A model of another vocabulary is refused with one clear error; `run --draft` works end to end.
"""
from __future__ import annotations

import re
import threading
from types import SimpleNamespace

import numpy as np
import pytest
from support.chi_square import fits
from support.cli import assert_clean_error, run_cli
from support.generation import drain
from support.tiny_llama import TinyConfig

from edgeinfer.draft_model import DraftModel, check_same_vocabulary
from edgeinfer.errors import EdgeInferError
from edgeinfer.generate import stream_generate
from edgeinfer.model import Model
from edgeinfer.sampling import SamplingParams, TokenPicker
from edgeinfer.speculative import EXPLORE_EVERY, PromptLookup

# ---- the tiny model -----------------------------------------------------------------------------

PROMPT = [5, 6, 7, 8]


def test_sampling_through_a_draft_model_follows_the_target_distribution(tiny_llama_file):
    """The first two tokens of many short generations, their joint distribution against the one
    plain decoding's logits give: the second token comes out of a checked draft (a fresh
    DraftModel drafts before anything is timed). The draft is the target's weights in Q4_1, whose
    guesses are kept about three times in four."""
    target = Model.load(tiny_llama_file()[0], n_ctx=64, n_threads=1)
    draft = Model.load(tiny_llama_file(TinyConfig(weight_type="Q4_1"))[0], n_ctx=64, n_threads=1)
    params = SamplingParams(temperature=1.0, top_k=4, top_p=1.0, min_p=0.0)
    first = TokenPicker(params).distribution(target.eval_logits(PROMPT)[-1], PROMPT)
    joint = {}
    for a, p_a in zip(first.ids, first.probs()):
        second = TokenPicker(params).distribution(target.eval_logits(PROMPT + [int(a)])[-1], [])
        joint.update({(int(a), int(b)): p_a * p_b for b, p_b in zip(second.ids, second.probs())})
    seeds = np.random.default_rng(0)
    n, kept = 4000, 0
    counts = dict.fromkeys(joint, 0)
    for _ in range(n):
        picker = TokenPicker(params, rng=np.random.default_rng(seeds.integers(2**63)))
        drafter = DraftModel(draft, seed=int(seeds.integers(2**63)))
        _, result = drain(stream_generate(target._core, target.prompt_cache, PROMPT, picker, 3, draft=drafter))
        counts[tuple(result.tokens[:2])] += 1   # a pair plain decoding could not give: KeyError
        kept += result.drafts.accepted
    assert 0.5 * n < kept < 0.95 * n   # guesses kept and guesses replaced, both tested
    assert fits(np.array([counts[k] for k in joint]), np.array(list(joint.values())))


def fresh(model: Model) -> Model:
    """An empty prompt cache, so that every run decodes the prompt alike (a reused prefix leaves
    its last token to a one-token step, whose logits may round differently from the prompt's)."""
    model.prompt_cache.reset()
    model.prompt_cache.clear_snapshots()
    return model


@pytest.mark.parametrize("draft_seed", [0, 1], ids=["same-weights", "other-weights"])
@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 0.8, "seed": 7}], ids=["greedy", "seeded"])
def test_greedy_and_seeded_output_is_plain_decodings_across_a_context_shift(tiny_llama_file, draft_seed, sampling):
    """The draft's context is half the target's: its window of the history restarts too."""
    target = Model.load(tiny_llama_file()[0], n_ctx=64, n_threads=2)
    draft = DraftModel(Model.load(tiny_llama_file(seed=draft_seed)[0], n_ctx=32, n_threads=2), target)
    common = dict(max_tokens=150, context_overflow="shift", **sampling)
    plain = fresh(target).complete(PROMPT, speculative=False, **common)
    spec = fresh(target).complete(PROMPT, draft=draft, **common)
    assert spec.tokens == plain.tokens and spec.context_shifts == plain.context_shifts > 0
    assert spec.drafts.drafted > 0 and spec.drafts.source == "draft model tiny.gguf"
    if draft_seed == 0 and sampling["temperature"] == 0:
        # Greedy: the same weights guess right until the history outgrows the draft's context.
        # Seeded, a guess (the draft's most likely token) is kept only when the sampler's draw
        # lands on it, which on near-flat random-weight logits is chance and depends on the CPU's
        # float order: no count is asserted, only the tokens.
        assert spec.drafts.accepted > 0
    for model in (target, draft.model):   # what each prompt cache says it holds, the context holds
        assert len(model.prompt_cache.tokens) == model.context.n_past


def test_sampling_without_a_seed_keeps_every_guess_of_the_target_itself(tiny_llama_path):
    """p = q: min(1, p/q) = 1, every guess is kept. (The generators are seeded by hand, so the
    test is deterministic: a seed in the sampling options would make the guesses the most likely
    tokens.)"""
    target = Model.load(tiny_llama_path, n_ctx=64, n_threads=2)
    draft = DraftModel(Model.load(tiny_llama_path, n_ctx=64, n_threads=2), target, seed=0)
    picker = TokenPicker(SamplingParams(temperature=1.0), rng=np.random.default_rng(0))
    _, result = drain(stream_generate(target._core, target.prompt_cache, PROMPT, picker, 40, draft=draft))
    assert result.drafts.drafted > 0 and result.drafts.accepted == result.drafts.drafted
    assert len(target.prompt_cache.tokens) == target.context.n_past


def test_the_model_generating_cannot_be_its_own_draft(tiny_llama):
    with pytest.raises(ValueError, match="needs one of its own"):
        tiny_llama.complete(PROMPT, max_tokens=4, draft=tiny_llama)


def test_parallel_generations_each_draft_in_a_sequence_of_one_draft_context(tiny_llama_file):
    """Two threads generate at once (edgeinfer.parallel), each with a DraftModel over its own
    sequence of a draft model loaded with n_parallel=2: each gets the tokens it gets alone."""
    path = tiny_llama_file()[0]
    prompts = [PROMPT, [9, 10, 11, 12, 13, 14]]
    alone = Model.load(path, n_ctx=64, n_threads=2)
    want = [fresh(alone).complete(p, max_tokens=30, temperature=0, speculative=False).tokens for p in prompts]
    target = Model.load(path, n_ctx=64, n_threads=2, n_parallel=2)
    draft = Model.load(tiny_llama_file(TinyConfig(weight_type="Q4_1"))[0], n_ctx=64, n_threads=2, n_parallel=2)
    drafters = [DraftModel(draft, target, prompt_cache=cache) for cache in draft.prompt_caches]
    got: list = [None, None]

    def generate(i: int) -> None:
        got[i] = target.complete(prompts[i], max_tokens=30, temperature=0, prompt_cache=target.prompt_caches[i],
                                 draft=drafters[i])

    threads = [threading.Thread(target=generate, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert [r.tokens for r in got] == want
    assert all(r.drafts.accepted > 0 for r in got)
    with pytest.raises(ValueError, match="one of the draft model's prompt_caches"):
        DraftModel(alone, prompt_cache=draft.prompt_cache)


def test_a_draft_pays_only_when_its_guesses_cost_less_than_they_save():
    drafter = PromptLookup()
    drafter.timed(1, 0.010)
    for rows in range(2, 10):         # the check: each extra row a tenth of a step
        drafter.timed(rows, 0.010 + 0.001 * (rows - 1))
    for _ in range(20):               # three guesses in four kept
        drafter.verified(4, 3)
    assert drafter.draft_size(guess_cost=0.002) > 0            # a draft model a fifth of the target
    sizes = [drafter.draft_size(guess_cost=0.010) for _ in range(EXPLORE_EVERY)]   # as costly as it
    assert sizes.count(0) == EXPLORE_EVERY - 1                 # plain steps, and one probe


def fake_model(name: str, texts: list[bytes], eos: int = 2) -> SimpleNamespace:
    """What the vocabulary check reads of a model."""
    vocab = SimpleNamespace(n_tokens=len(texts), bos=1, eos=eos, eog_ids=[eos], token_text=texts.__getitem__)
    return SimpleNamespace(path=f"/models/{name}", n_vocab=len(texts), vocab=vocab)


@pytest.mark.parametrize("draft, difference", [
    (fake_model("draft.gguf", [b"<s>", b"</s>", b"<eot>", b"a", b"x"]), "token 4: 'b' in target.gguf, 'x' in draft.gguf"),
    (fake_model("draft.gguf", [b"<s>", b"</s>", b"<eot>", b"a", b"b"], eos=1), "special token eos: 2 in target.gguf, 1 in draft.gguf"),
])
def test_the_vocabulary_check_names_both_files_and_the_first_difference(draft, difference):
    target = fake_model("target.gguf", [b"<s>", b"</s>", b"<eot>", b"a", b"b"])
    check_same_vocabulary(target, fake_model("same.gguf", [b"<s>", b"</s>", b"<eot>", b"a", b"b"]))
    with pytest.raises(EdgeInferError, match=re.escape(f"draft.gguf cannot draft for target.gguf: their vocabularies "
                                                       f"differ ({difference})")):
        check_same_vocabulary(target, draft)


def test_while_drafting_does_not_pay_a_probe_that_would_read_the_prompt_is_skipped(tiny_llama_file):
    target = Model.load(tiny_llama_file()[0], n_ctx=256, n_threads=1)
    drafter = DraftModel(Model.load(tiny_llama_file(TinyConfig(weight_type="Q4_1"))[0], n_ctx=256, n_threads=1),
                         target)
    drafter.timed(1, 0.010)
    for rows in range(2, 10):         # every checked guess costs a whole step: no draft pays
        drafter.timed(rows, 0.010 * rows)

    def sizes(history: list[int]) -> list[int]:
        drafter.begin(target, TokenPicker(SamplingParams(temperature=0)))
        drafter.extend(history)
        return [len(drafter.draft(8).tokens) for _ in range(2 * EXPLORE_EVERY)]

    assert sizes(list(range(5, 105))) == [0] * (2 * EXPLORE_EVERY)   # a probe would first read 100 tokens
    assert max(sizes(list(range(5, 25)))) == 2                        # 20: a probe now and then


# ---- the real models ----------------------------------------------------------------------------

@pytest.fixture(scope="module", params=["smollm2_path", "gemma3_path"])
def target_and_draft(request, requantized):
    """The model requantized to Q8_0 as the target, its own file as the draft model."""
    path = request.getfixturevalue(request.param)
    return Model.load(requantized(path, "Q8_0"), n_ctx=1024, n_threads=2), Model.load(path, n_ctx=1024, n_threads=2)


@pytest.mark.realmodel
@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 0.8, "seed": 7}], ids=["greedy", "seeded"])
def test_real_models_give_plain_decodings_tokens_with_a_draft_model(target_and_draft, sampling):
    target, draft_model = target_and_draft
    draft = DraftModel(draft_model, target)   # new: it drafts 2 right after the prompt, before timing anything
    messages = [{"role": "user", "content": "Explain in three sentences why the sky is blue."}]
    plain = fresh(target).chat_complete(messages, max_tokens=64, speculative=False, **sampling)
    spec = fresh(target).chat_complete(messages, max_tokens=64, draft=draft, **sampling)
    assert spec.tokens == plain.tokens and spec.text == plain.text
    assert spec.drafts.drafted > 0 and spec.drafts.source == f"draft model {draft_model.path.name}"
    if sampling["temperature"] == 0:   # the same model in another quantization: its most likely tokens
        assert spec.drafts.accepted > 0


@pytest.mark.realmodel
def test_a_model_of_another_vocabulary_is_refused(smollm2_path, gemma3_path):
    target = Model.load(smollm2_path, n_ctx=256, n_threads=2)
    expected = (f"{gemma3_path.name} cannot draft for {smollm2_path.name}: their vocabularies differ "
                f"(size: 49152 tokens in {smollm2_path.name}, 262144 tokens in {gemma3_path.name})")
    gemma = Model.load(gemma3_path, n_ctx=256, n_threads=2)
    with pytest.raises(EdgeInferError, match=re.escape(expected)):
        DraftModel(gemma, target)
    with pytest.raises(EdgeInferError, match=re.escape(expected)):   # a Model given to generate
        target.complete("Hi", max_tokens=4, draft=gemma)


@pytest.mark.realmodel
def test_run_with_a_draft_model_prints_plain_decodings_text(smollm2_path, gemma3_path, requantized):
    target = requantized(smollm2_path, "Q8_0")
    common = ["run", str(target), "--chat", "Name three colours of the rainbow.", "-n", "32", "--temp", "0", "-t", "2"]
    plain = run_cli(*common, "--no-speculative")
    spec = run_cli(*common, "--draft", str(smollm2_path))
    assert plain.returncode == 0 and spec.returncode == 0, spec.stderr
    assert spec.stdout == plain.stdout
    assert re.search(rf"drafted \d+ tokens, [1-9]\d* accepted \(draft model {re.escape(smollm2_path.name)}\)",
                     spec.stderr), spec.stderr
    refused = run_cli(*common, "--draft", str(gemma3_path))
    assert_clean_error(refused, f"{gemma3_path.name} cannot draft for {target.name}", "vocabularies differ")
