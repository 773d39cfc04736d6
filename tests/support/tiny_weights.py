"""Random weights of the tiny models, drawn in order from one seeded generator (so a seed gives
the same model every time), in numpy order: a matrix is [rows = out][cols = in]."""
from __future__ import annotations

import numpy as np


class RandomWeights:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def matrix(self, out_dim: int, in_dim: int) -> np.ndarray:
        """Scaled by 1/sqrt(in_dim), so each output keeps the input's magnitude."""
        return (self.rng.standard_normal((out_dim, in_dim)) / np.sqrt(in_dim)).astype(np.float32)

    def norm(self, n: int, spread: float) -> np.ndarray:
        """A norm's weight: 1 plus noise, so the tests see it multiply."""
        return (1.0 + spread * self.rng.standard_normal(n)).astype(np.float32)
