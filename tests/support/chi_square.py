"""Pearson's chi-square test of drawn counts against the probabilities they should follow, for the
tests that check a sampler's output distribution (numpy only: scipy is not a dependency)."""
from __future__ import annotations

import numpy as np

# The chi-square distribution's 99.9 % quantiles, by degrees of freedom (the cells less one): a
# right sampler exceeds them for one seed in a thousand, so a test with a fixed seed that stays
# below is deterministic and fails only for a wrong distribution (or a change of draws).
CHI2_999 = {5: 20.515, 7: 24.322, 15: 37.697}


def chi_square(counts: np.ndarray, probs: np.ndarray) -> float:
    """The statistic of `counts` (one per cell) against cell probabilities `probs`."""
    expected = np.asarray(probs, dtype=np.float64) * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


def fits(counts: np.ndarray, probs: np.ndarray) -> bool:
    """Whether `counts` pass the test against `probs` at the 99.9 % quantile."""
    return chi_square(counts, probs) < CHI2_999[len(counts) - 1]
