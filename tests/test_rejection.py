"""The rejection rule of speculative sampling (edgeinfer.rejection) and the check of a draft
(edgeinfer.generate.judge_draft) emit the target's distribution: chi-square tests over many draws
with fixed seeds (support/chi_square.py: the 99.9 % quantile). The same test fails rules a slip
could write, so it can fail."""
from __future__ import annotations

import numpy as np
import pytest
from support.chi_square import fits

from edgeinfer.generate import judge_draft
from edgeinfer.rejection import accept_or_resample, residual
from edgeinfer.sampling import Distribution, SamplingParams, TokenPicker
from edgeinfer.speculative import Draft

# A target p and a draft q over 8 tokens, far enough apart that most guesses are not kept.
P = np.array([0.30, 0.20, 0.15, 0.12, 0.10, 0.07, 0.04, 0.02])
Q = np.array([0.10, 0.25, 0.05, 0.20, 0.05, 0.15, 0.10, 0.10])


def emitted_counts(rule, n: int = 20000, seed: int = 0) -> np.ndarray:
    """How often each token is emitted when a guess drawn from Q goes through `rule`."""
    p, q = Distribution(np.arange(8), P), Distribution(np.arange(8), Q)
    rng = np.random.default_rng(seed)
    return np.bincount([rule(p, q, q.draw(rng), rng)[0] for _ in range(n)], minlength=8)


def test_the_rejection_rule_emits_the_target_distribution():
    assert fits(emitted_counts(accept_or_resample), P)


def draw_from_p_after_a_rejection(p, q, token, rng):
    """The classic slip: the right acceptance, but the replacement drawn from p, not the residual."""
    if rng.random() * q.prob(token) < p.prob(token):
        return token, True
    return p.draw(rng), False


def accept_when_q_exceeds_p(p, q, token, rng):
    if q.prob(token) > p.prob(token):
        return token, True
    return residual(p, q).draw(rng), False


@pytest.mark.parametrize("wrong_rule", [draw_from_p_after_a_rejection, accept_when_q_exceeds_p])
def test_the_chi_square_check_fails_a_wrong_rule(wrong_rule):
    assert not fits(emitted_counts(wrong_rule), P)


def test_a_checked_draft_emits_the_target_distribution_at_every_row():
    """judge_draft over a draft of two sampled guesses: the first token, the second (when the
    first guess was kept) and the one after the last guess each follow the target's row, as the
    picker makes it (top-k 6 of 8, temperature 0.9)."""
    n = 20000
    rng = np.random.default_rng(0)
    target_rows = rng.normal(0, 1.5, (3, 8)).astype(np.float32)
    draft_rows = (target_rows[:2] + rng.normal(0, 0.7, (2, 8))).astype(np.float32)
    picker = TokenPicker(SamplingParams(temperature=0.9, top_k=6, top_p=1.0, min_p=0.0), rng=np.random.default_rng(1))
    proposals = [picker.distribution(row, []) for row in draft_rows]
    guess_rng = np.random.default_rng(2)
    emitted: list[list[int]] = [[], [], []]
    for _ in range(n):
        guesses = [q.draw(guess_rng) for q in proposals]
        for row, (token, _) in enumerate(judge_draft(target_rows, Draft(guesses, proposals), picker, [])):
            emitted[row].append(token)
    assert len(emitted[2]) > n // 4   # both guesses kept often enough to test the last row too
    for row, tokens in enumerate(emitted):
        p = picker.distribution(target_rows[row], [])
        counts = np.bincount(tokens, minlength=8)
        assert counts[p.ids].sum() == len(tokens)   # nothing top-k dropped
        assert fits(counts[p.ids], p.probs())
