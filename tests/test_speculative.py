"""Speculative decoding with prompt lookup (edgeinfer.speculative) gives exactly the tokens plain
decoding gives, greedy or sampled with a seed, on both real models, while drafts are checked and
accepted; and the draft index finds what it should."""
from __future__ import annotations

import re

import pytest
from support.cli import run_cli

from edgeinfer.model import Model
from edgeinfer.speculative import EXPLORE_EVERY, PromptLookup

# Grounded prompts: the answer repeats spans of the prompt, so guesses are often right.
CODE = """def total_price(items, tax_rate):
    subtotal = 0
    for item in items:
        subtotal += item.price * item.quantity
    tax = subtotal * tax_rate
    return subtotal + tax
"""
PROMPTS = [
    f"Rewrite this function with the loop variable renamed from item to entry. Reply with the code only.\n\n{CODE}",
    "Repeat the following list exactly: apples, pears, plums, cherries, apricots, peaches, grapes, melons, lemons.",
]


@pytest.fixture(scope="module", params=["smollm2_path", "gemma3_path"])
def model(request):
    return Model.load(request.getfixturevalue(request.param), n_ctx=1024, n_threads=2)


def fresh(model):
    """An empty prompt cache, so both runs decode the prompt alike (a reused prefix leaves its last
    token to a one-token step, whose logits may round differently from the prompt batch's)."""
    model.prompt_cache.reset()
    model.prompt_cache.clear_snapshots()


def run(model, prompt, speculative, **kwargs):
    """The chat answer to `prompt` from an empty prompt cache, run to its end."""
    fresh(model)
    gen = model.chat([{"role": "user", "content": prompt}], speculative=speculative, **{"max_tokens": 96, **kwargs})
    try:
        while True:
            next(gen)
    except StopIteration as stop:
        return stop.value


@pytest.mark.realmodel
@pytest.mark.parametrize("prompt", PROMPTS, ids=["code", "list"])
@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 0.8, "seed": 7}], ids=["greedy", "seeded"])
def test_the_same_tokens_as_plain_decoding(model, prompt, sampling):
    plain = run(model, prompt, False, **sampling)
    spec = run(model, prompt, True, **sampling)
    assert spec.tokens == plain.tokens and spec.text == plain.text and spec.finish_reason == plain.finish_reason
    assert plain.drafts is None and spec.drafts.drafts > 0
    if sampling["temperature"] == 0:   # copying a list or code: most guesses are right
        assert spec.drafts.accepted >= 0.5 * spec.drafts.drafted


@pytest.mark.realmodel
def test_max_tokens_and_stop_strings_cut_where_plain_decoding_does(model):
    prompt = PROMPTS[1]
    for kwargs in ({"max_tokens": 5}, {"max_tokens": 64, "stop": ["cherries"]}):
        outs = []
        for speculative in (False, True):
            outs.append(run(model, prompt, speculative, temperature=0, **kwargs))
            # What the prompt cache says it holds is what the context holds (wrong guesses dropped).
            assert len(model.prompt_cache.tokens) == model.prompt_cache.ctx.n_past
        assert outs[0].tokens == outs[1].tokens and outs[0].text == outs[1].text


def test_lookup_drafts_the_continuation_of_the_latest_match():
    lookup = PromptLookup()
    lookup.extend([1, 2, 3, 4, 5, 9, 2, 3, 4])
    assert lookup.draft(8).tokens == [5, 9]       # "2 3 4" was followed by 5 9 ...; nothing timed yet: 2
    lookup.timed(1, 0.010)                        # calls cost 10 ms + 1 ms a row; guesses usually right
    for rows in range(2, 10):
        lookup.timed(rows, 0.010 + 0.001 * (rows - 1))
    for _ in range(10):
        lookup.verified(4, 4)
    lookup.extend([5, 9, 2, 3, 4])
    assert lookup.draft(8).tokens == [5, 9, 2, 3, 4]   # the latest "2 3 4", as far as the text goes
    assert lookup.draft(2).tokens == [5, 9]       # never past the limit
    lookup.extend([7])
    assert lookup.draft(8).tokens == []           # "4 7" never occurred before


def test_after_the_first_draft_a_plain_step_is_timed_before_any_other():
    lookup = PromptLookup()
    lookup.extend([1, 2, 3, 1, 2, 3])
    assert lookup.draft(8).tokens == [1, 2]       # nothing timed yet: a small draft
    lookup.timed(3, 0.012)
    lookup.verified(2, 2)
    assert lookup.draft(8).tokens == []           # a plain step next: the time every draft must beat
    lookup.timed(1, 0.010)
    assert len(lookup.draft(8).tokens) > 0        # a 3-row call at 1.2 steps for 2 guesses mostly right


def test_lookup_drafts_only_what_pays():
    lookup = PromptLookup()
    lookup.extend(list(range(10, 30)) * 2)         # its end matches 20 tokens back
    lookup.timed(1, 0.010)
    for rows in range(2, 10):                     # every extra row costs as much as a step
        lookup.timed(rows, 0.010 * rows)
    for _ in range(20):
        lookup.verified(2, 0)
    drafts = [len(lookup.draft(8).tokens) for _ in range(2 * EXPLORE_EVERY)]
    assert drafts.count(0) == 2 * EXPLORE_EVERY - 2 and max(drafts) == 2   # a small probe now and then
    for _ in range(30):                           # now an extra row is nearly free, and guesses hit
        for rows in range(2, 10):
            lookup.timed(rows, 0.010 + 0.0005 * (rows - 1))
        lookup.verified(8, 8)
    assert len(lookup.draft(8).tokens) == 8


@pytest.mark.realmodel
def test_run_prints_the_same_text_with_and_without_speculation(smollm2_path):
    question = "Repeat exactly: one two three four five six seven eight nine ten one two three four five six"
    common = ["run", str(smollm2_path), "--chat", question, "-n", "40", "--temp", "0", "-t", "2"]
    plain = run_cli(*common, "--no-speculative")
    spec = run_cli(*common)
    assert plain.returncode == 0 and spec.returncode == 0, spec.stderr
    assert spec.stdout == plain.stdout
    assert re.search(r"drafted \d+ tokens, \d+ accepted", spec.stderr)
    assert "drafted" not in plain.stderr
