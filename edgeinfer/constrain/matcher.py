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

With a JSON schema that asks for uniqueItems, a token must also pass the UniqueItemsGuard
(unique.py). When the grammar and the guard together leave no token, the sampler takes back the
last token (it is banned at its place until an earlier choice changes) and raises Backtrack: the
loop rewinds the KV cache by one position and calls the sampler again there.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Sequence

import llguidance
import llguidance.numpy as llnp
import numpy as np

from edgeinfer.constrain.unique import TokenTexts, UniqueItemsGuard
from edgeinfer.errors import EdgeInferError, UnsatisfiableConstraintError, headline
from edgeinfer.generate import Backtrack

Sampler = Callable[[np.ndarray, Sequence[int]], int]

# Backtracking steps one generation may take before it gives up (a schema whose unique items
# cannot all be found, such as minItems above the number of allowed values, would search on).
MAX_BACKTRACKS = 1000


class GrammarMatcher:
    """The grammar's state over the tokens of one generation.

    `mask_times` / `check_times` collect seconds per full mask and per single-token check
    (for benchmarks)."""

    def __init__(self, tokenizer: llguidance.LLTokenizer, grammar: str,
                 unique_items_schema: Mapping[str, Any] | None = None, texts: TokenTexts | None = None):
        self._matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
        if self._matcher.is_error():
            raise ValueError(f"the grammar does not compile: {self._error()}")
        self.n_vocab = tokenizer.vocab_size
        self._bitmask = llnp.allocate_token_bitmask(1, self.n_vocab)  # [1][ceil(n_vocab / 32)] int32
        # Some grammars compile but cannot be matched (a rule that only refers to itself:
        # llguidance's NoExtensionBias); the first mask finds them, so that they are refused here,
        # before anything is generated, not at the first token the sampler draws.
        llnp.fill_next_token_bitmask(self._matcher, self._bitmask)
        if self._matcher.is_error():
            raise ValueError(f"the grammar cannot be matched: {self._error()}")
        if not self._bitmask.any() and not self._matcher.is_stopped():
            raise ValueError("the grammar allows no text")
        self.mask_times: list[float] = []
        self.check_times: list[float] = []
        self._guard = None if unique_items_schema is None else UniqueItemsGuard(unique_items_schema)
        self._texts = texts if texts is not None or self._guard is None else TokenTexts(tokenizer)
        self._tokens: list[int] = []            # consumed so far
        self._bans: dict[int, set[int]] = {}    # position -> tokens taken back there
        self.backtracks = 0

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

    @property
    def may_take_back(self) -> bool:
        """Whether the sampler may raise Backtrack (a uniqueItems schema)."""
        return self._guard is not None

    def try_allows(self, token: int) -> bool:
        """Whether the grammar allows `token` next (the state is left as it was)."""
        if not self.try_consume(token):
            return False
        self._matcher.rollback(1)
        return True

    def committed_tokens(self) -> int:
        """How many leading tokens can no longer be taken back (all, without a guard)."""
        return len(self._tokens) if self._guard is None else self._guard.committed_tokens()

    def _banned(self, token: int) -> bool:
        return token in self._bans.get(len(self._tokens), ())

    def _accept(self, token: int) -> None:
        if self._guard is not None:
            self._guard.push(self._texts.text(token))
            for pos in [p for p in self._bans if p > len(self._tokens)]:
                del self._bans[pos]   # bans under a prefix that has just changed
        self._tokens.append(token)

    def _take_back(self, n: int) -> None:
        """Takes back the last n tokens, bans the first of them at its place, raises Backtrack(n)."""
        if self._guard is None or len(self._tokens) - n < self._guard.committed_tokens():
            raise UnsatisfiableConstraintError("constrained decoding failed: no text fits the schema "
                                               "with the array's items unique")
        self.backtracks += 1
        if self.backtracks > MAX_BACKTRACKS:
            raise UnsatisfiableConstraintError(
                f"constrained decoding failed: no unique array items found in {MAX_BACKTRACKS} attempts "
                "(does the schema allow enough distinct items?)")
        first = self._tokens[-n]
        del self._tokens[-n:]
        self._matcher.rollback(n)
        for _ in range(n):
            self._guard.pop()
        self._bans.setdefault(len(self._tokens), set()).add(first)
        raise Backtrack(n)

    def _error(self) -> str:
        """llguidance's error, its first line: the parser state it dumps after it means nothing
        to a client."""
        return headline(self._matcher.get_error(), "unknown error")

    def _raise_on_error(self) -> None:
        # An error here is the grammar's (a limit of the matcher reached on the way, such as an
        # item count past llguidance's 50000): the same request would fail again.
        if self._matcher.is_error():
            raise UnsatisfiableConstraintError(f"constrained decoding failed: {self._error()}")

    def wrap(self, sample: Sampler) -> Sampler:
        """`sample` restricted to the tokens the grammar allows; the drawn token is consumed."""

        def pick(logits: np.ndarray, history: Sequence[int]) -> int:
            token = sample(logits, history)
            if not self._banned(token):
                if self._guard is not None:
                    # The model's choice would repeat an item: it gets to choose that item again
                    # (its first token banned) rather than to stretch the repeat into a new one.
                    redo = self._guard.duplicate_from(self._texts.text(token))
                    if redo is not None and self.try_allows(token):
                        self._take_back(self._guard.tokens_from(redo))
                if self.try_consume(token):
                    self._accept(token)
                    return token
            allowed = self.allowed()
            if self._guard is not None:
                allowed[list(self._bans.get(len(self._tokens), ()))] = False
                for t in np.flatnonzero(allowed & self._guard.candidates(self._texts)):
                    allowed[t] = self._guard.duplicate_from(self._texts.text(int(t))) is None
                if not allowed.any():
                    self._take_back(1)
            elif not allowed.any():
                raise UnsatisfiableConstraintError("constrained decoding failed: the grammar allows no next token")
            token = sample(np.where(allowed, logits, np.float32(-np.inf)), history)
            if not self.try_consume(token):
                raise EdgeInferError(f"constrained decoding failed: the sampler drew token {token}, "
                                     "which the grammar's mask excludes")
            self._accept(token)
            return token

        return pick
