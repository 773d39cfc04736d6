"""The rejection rule of speculative sampling: keep a drawn guess or draw its replacement, so that
every emitted token follows the target model's distribution exactly.

A draft model proposes a token x drawn from its own distribution q; the target model's
distribution at the same place is p (both as the sampler sees them: after the logit bias, the
penalties, top-k / top-p / min-p and temperature, edgeinfer.sampling.token_distribution). The
guess is kept with probability min(1, p(x) / q(x)); when it is not, the token is drawn from the
residual normalise(max(0, p - q)) instead. Why that is exactly p (Leviathan et al. 2023, Chen et
al. 2023): the chance to emit y through acceptance is q(y) min(1, p(y) / q(y)) = min(p(y), q(y)),
and the chance to reject is 1 - sum_z min(p(z), q(z)) = sum_z max(0, p(z) - q(z)), so emitting y
through the residual adds max(0, p(y) - q(y)); the two add up to p(y).

A guess chosen without randomness (prompt lookup, or a draft model's most likely token) is a
point mass: q(x) = 1, so the rule reduces to "keep x with probability p(x), else draw from p
without x", which is what asking the sampler and comparing does (generate.py's check), with the
sampler's own draws. That check is used for such guesses, so that a seed gives plain decoding's
tokens; this rule is for guesses the draft model drew at random.
"""
from __future__ import annotations

import numpy as np

from edgeinfer.sampling import Distribution


def residual(p: Distribution, q: Distribution) -> Distribution:
    """normalise(max(0, p - q)): what is drawn after a rejection. Its candidates are p's (where p
    is 0 the residual is too). When p and q agree to rounding there is no residual left, and a
    rejection has a probability of that size: p itself is then as good as exact."""
    weights = np.maximum(p.probs() - q.probs_of(p.ids), 0.0)
    if not weights.sum() > 0.0:
        return p
    return Distribution(p.ids, weights)


def accept_or_resample(p: Distribution, q: Distribution, token: int,
                       rng: np.random.Generator) -> tuple[int, bool]:
    """(`token`, True) with probability min(1, p(token) / q(token)), else (a draw from
    `residual(p, q)`, False). `token` must have been drawn from `q` (so q(token) > 0)."""
    p_x, q_x = p.prob(token), q.prob(token)
    # u < p/q without a division: always true when p_x >= q_x (u < 1), never when p_x == 0.
    if rng.random() * q_x < p_x:
        return token, True
    return residual(p, q).draw(rng), False
