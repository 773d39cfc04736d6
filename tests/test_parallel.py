"""Parallel generations over one context (edgeinfer.parallel): several threads generate at once,
each in its own sequence, their decodes sharing steps. Each must get exactly the tokens it gets
alone, on both real models, with prompts long enough to be prefilled in chunks between the
others' steps; a failing request fails alone; nothing waits for a generation that has ended."""
from __future__ import annotations

import threading

import pytest

from edgeinfer import Model
from edgeinfer.errors import ContextOverflowError

pytestmark = pytest.mark.realmodel

N_BATCH = 32   # small, so that the longer prompts go in several chunks
PROMPTS = [
    "Write a short poem about the sea.",
    "List three uses of copper and explain each one in a sentence. " * 6,   # several chunks
    "What is 17 times 23? Answer with the number and a short explanation.",
    "Translate to French: the cat sleeps on the warm windowsill in the afternoon sun. " * 3,
]


@pytest.fixture(scope="module", params=["smollm2_path", "gemma3_path"])
def path(request):
    return request.getfixturevalue(request.param)


def chat_ids(model: Model, text: str) -> list[int]:
    return model.chat_prompt([{"role": "user", "content": text}]).ids


def run_threads(model: Model, jobs: list[dict]) -> list:
    """Runs each job's generate() in its own thread on its own prompt cache; results in order
    (a GenerationResult, or the exception the thread got)."""
    results: list = [None] * len(jobs)

    def work(i: int) -> None:
        try:
            results[i] = model.complete(prompt_cache=model.prompt_caches[i], **jobs[i])
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            results[i] = exc

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a generation never finished (a step waited forever)"
    return results


@pytest.mark.parametrize("speculative", [False, True])
def test_parallel_generations_get_the_tokens_each_gets_alone(path, speculative):
    alone = Model.load(path, n_ctx=512, n_threads=2, n_batch=N_BATCH)
    jobs = [dict(prompt=chat_ids(alone, text), max_tokens=24, temperature=0, speculative=speculative)
            for text in PROMPTS]
    want = []
    for job in jobs:
        alone.prompt_cache.reset()
        want.append(alone.complete(**job).tokens)
    model = Model.load(path, n_ctx=512, n_threads=2, n_batch=N_BATCH, n_parallel=len(jobs))
    got = run_threads(model, jobs)
    assert [r.tokens for r in got] == want
    stats = model.batcher.stats
    assert stats.rows > stats.steps, "the generations never shared a step"
    assert stats.prompt_chunks > len(jobs), "no prompt went in chunks"
    # Done: nothing is waited for, so a lone generation afterwards runs at once.
    assert model.batcher.engaged == 0
    assert model.complete(chat_ids(model, PROMPTS[2]), max_tokens=24, temperature=0).tokens == want[2]


def test_a_request_that_does_not_fit_fails_alone(smollm2_path):
    model = Model.load(smollm2_path, n_ctx=128, n_threads=2, n_batch=N_BATCH, n_parallel=3)
    good = chat_ids(model, PROMPTS[0])
    jobs = [dict(prompt=good, max_tokens=16, temperature=0), dict(prompt=list(range(200, 400)), max_tokens=4),
            dict(prompt=good, max_tokens=16, temperature=0)]
    got = run_threads(model, jobs)
    assert isinstance(got[1], ContextOverflowError)
    assert got[0].tokens == got[2].tokens and len(got[0].tokens) > 0


def test_a_lone_decode_joins_the_steps_of_running_generations(smollm2_path):
    """A decode outside any generation (here: the model's eval_logits on the first sequence) is
    answered by the next step and does not make later steps wait for it."""
    model = Model.load(smollm2_path, n_ctx=256, n_threads=2, n_batch=N_BATCH, n_parallel=2)
    ids = chat_ids(model, PROMPTS[2])
    want = model.eval_logits(ids)
    done = threading.Event()
    results: list = []

    def generate() -> None:
        results.append(model.complete(ids, max_tokens=48, temperature=0, prompt_cache=model.prompt_caches[1]))
        done.set()

    t = threading.Thread(target=generate)
    t.start()
    got = model.eval_logits(ids)
    t.join(timeout=60)
    assert done.is_set()
    assert (got == want).all()


def test_parallel_settings_are_checked(smollm2_path):
    with pytest.raises(ValueError, match="n_parallel must be in 1..256"):
        Model.load(smollm2_path, n_ctx=64, n_parallel=0)
    with pytest.raises(ValueError, match="n_parallel > 1 cannot run with gpu_layers"):
        Model.load(smollm2_path, n_ctx=64, n_parallel=2, gpu_layers="all")
    model = Model.load(smollm2_path, n_ctx=64, n_threads=2)
    other = Model.load(smollm2_path, n_ctx=64, n_threads=2, n_parallel=2)
    with pytest.raises(ValueError, match="prompt_cache must be one of this model's"):
        model.generate("hi", prompt_cache=other.prompt_caches[1])


def test_a_context_shift_in_one_slot_gives_what_it_gives_alone(smollm2_path):
    """A slot whose generation outgrows its context shifts its own sequence only."""
    alone = Model.load(smollm2_path, n_ctx=96, n_threads=2, n_batch=N_BATCH)
    ban = {t: -100.0 for t in alone.vocab.eog_ids}
    jobs = [dict(prompt=chat_ids(alone, PROMPTS[0]), max_tokens=140, temperature=0, context_overflow="shift",
                 logit_bias=ban),
            dict(prompt=chat_ids(alone, PROMPTS[2]), max_tokens=40, temperature=0)]
    want = []
    for job in jobs:
        alone.prompt_cache.reset()
        want.append(alone.complete(**job))
    assert want[0].context_shifts > 0
    model = Model.load(smollm2_path, n_ctx=96, n_threads=2, n_batch=N_BATCH, n_parallel=2)
    got = run_threads(model, jobs)
    assert [r.tokens for r in got] == [r.tokens for r in want]
    assert got[0].context_shifts == want[0].context_shifts
