"""One generation's grammar state, and the sampler wrapper that enforces it.

Cost: computing a full mask (a walk of llguidance's token trie) is the expensive part, so the
sampler first draws from the unconstrained logits and asks the matcher whether that one token is
allowed (a lexer step). Only when it is not does it compute the mask, set the disallowed logits
to -inf (on a copy: the logits are a read-only view of the core's buffer) and draw again. This is
llama.cpp's order too. For greedy decoding it is exact (the argmax, if allowed, is the masked
argmax). For plain temperature sampling it is exact as well: accept-or-redraw-from-the-masked-
distribution gives each allowed token p(t) + (1 - p(A)) p(t) / p(A) = p(t) / p(A), which is the
masked distribution. With top-k/top-p/min-p the filters see the unmasked logits on the first
draw, so the result can differ from masking first; the output still always fits the grammar.
"""
from __future__ import annotations

import time
from typing import Callable, Sequence

import llguidance
import llguidance.numpy as llnp
import numpy as np

from edgeinfer.errors import EdgeInferError

Sampler = Callable[[np.ndarray, Sequence[int]], int]


class GrammarMatcher:
    """The grammar's state over the tokens of one generation.

    `mask_times` / `check_times` collect seconds per full mask and per single-token check
    (for benchmarks)."""

    def __init__(self, tokenizer: llguidance.LLTokenizer, grammar: str):
        self._matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
        if self._matcher.is_error():
            raise ValueError(f"the grammar does not compile: {self._matcher.get_error()}")
        self.n_vocab = tokenizer.vocab_size
        self._bitmask = llnp.allocate_token_bitmask(1, self.n_vocab)  # [1][ceil(n_vocab / 32)] int32
        self.mask_times: list[float] = []
        self.check_times: list[float] = []

    @property
    def is_stopped(self) -> bool:
        """True when the grammar is complete and allows no further token: generation is over."""
        return self._matcher.is_stopped()

    @property
    def is_accepting(self) -> bool:
        return self._matcher.is_accepting()

    def allowed(self) -> np.ndarray:
        """[n_vocab] bool: the tokens the grammar allows next."""
        t0 = time.perf_counter()
        llnp.fill_next_token_bitmask(self._matcher, self._bitmask)
        self.mask_times.append(time.perf_counter() - t0)
        self._raise_on_error()
        bits = np.unpackbits(self._bitmask.view(np.uint8), bitorder="little")
        return bits[: self.n_vocab].astype(bool)

    def try_consume(self, token: int) -> bool:
        """Advances over `token` if the grammar allows it; False (state unchanged) if not."""
        t0 = time.perf_counter()
        ok = self._matcher.try_consume_tokens([token]) == 1
        self.check_times.append(time.perf_counter() - t0)
        self._raise_on_error()
        return ok

    def _raise_on_error(self) -> None:
        if self._matcher.is_error():
            raise EdgeInferError(f"constrained decoding failed: {self._matcher.get_error()}")

    def wrap(self, sample: Sampler) -> Sampler:
        """`sample` restricted to the tokens the grammar allows; the drawn token is consumed."""

        def pick(logits: np.ndarray, history: Sequence[int]) -> int:
            token = sample(logits, history)
            if self.try_consume(token):
                return token
            allowed = self.allowed()
            if not allowed.any():
                raise EdgeInferError("constrained decoding failed: the grammar allows no next token")
            token = sample(np.where(allowed, logits, np.float32(-np.inf)), history)
            if not self.try_consume(token):
                raise EdgeInferError(f"constrained decoding failed: the sampler drew token {token}, "
                                     "which the grammar's mask excludes")
            return token

        return pick
