"""Speculative decoding with prompt lookup: guess the next tokens from earlier text, check them all
in one decode call.

Grounded work (summarise this, fix this function, extract from this page) repeats spans of its
prompt. When the last few tokens also occur earlier, the tokens that followed them there are a
cheap guess of what comes next (llama.cpp's "lookup decoding"). The guesses are decoded after the
current token in one call with `as_single_steps`, which gives every row exactly the logits plain
decoding would give it; the sampler is then asked, row by row, for the token plain decoding would
draw, and the guesses are kept up to the first one it does not draw.

Why the output is exactly plain decoding's, sampled or greedy: every token comes from the sampler
called on the logits plain decoding computes for the same prefix, once per emitted token, in the
same order, so even a seeded random sampler draws the same numbers and the same tokens. A wrong
guess only costs the rows computed after it.

Drafting pays only when guesses are often right: a verifying call of k + 1 tokens costs more than
one step (docs/PERFORMANCE.md), so `PromptLookup` drafts only on an n-gram match, sizes its drafts
by how many were accepted lately, and pauses when they keep failing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

# n-gram sizes looked up, longest first: a longer match is a better guess.
NGRAM_SIZES = (4, 3, 2)
MAX_DRAFT = 8          # tokens a draft holds at most (the small-batch decode takes up to 8 rows at best speed)
PAUSE_AFTER = 8        # verifying calls whose drafts all failed in a row before drafting pauses
PAUSE_TOKENS = 32      # tokens generated plainly during a pause


@dataclass
class DraftStats:
    """What speculation did in one generation: drafts checked, tokens drafted and accepted."""
    drafts: int = 0
    drafted: int = 0
    accepted: int = 0

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0


@dataclass
class PromptLookup:
    """Drafts from earlier occurrences of the last few tokens in the prompt and the text so far.

    Feed it the whole token history with `extend` (it indexes each n-gram once), then ask `draft`."""

    max_draft: int = MAX_DRAFT
    stats: DraftStats = field(default_factory=DraftStats)
    _tokens: list[int] = field(default_factory=list)
    # n -> {n-gram: end of its latest occurrence that has a continuation}
    _index: dict[int, dict[tuple[int, ...], int]] = field(default_factory=lambda: {n: {} for n in NGRAM_SIZES})
    _size: int = 4          # the next draft's length: grows while drafts are accepted whole
    _failed_in_a_row: int = 0
    _paused_for: int = 0

    def extend(self, tokens: Sequence[int]) -> None:
        for t in tokens:
            # The n-grams ending just before t now have a continuation (t itself).
            end = len(self._tokens)
            for n in NGRAM_SIZES:
                if end >= n:
                    self._index[n][tuple(self._tokens[end - n:end])] = end
            self._tokens.append(int(t))

    def draft(self, limit: int) -> list[int]:
        """Up to min(limit, the current draft size) guessed tokens to follow the history; [] when
        nothing earlier matches its end, or while paused."""
        if self._paused_for > 0:
            self._paused_for -= 1
            return []
        k = min(limit, self._size, self.max_draft)
        if k <= 0:
            return []
        end = len(self._tokens)
        for n in NGRAM_SIZES:
            if end < n:
                continue
            at = self._index[n].get(tuple(self._tokens[end - n:end]))
            if at is not None:
                return self._tokens[at:at + k]
        return []

    def verified(self, drafted: int, accepted: int) -> None:
        """Records a check of `drafted` guessed tokens of which the first `accepted` were right."""
        self.stats.drafts += 1
        self.stats.drafted += drafted
        self.stats.accepted += accepted
        if accepted == drafted:
            self._size = min(self.max_draft, 2 * self._size)
            self._failed_in_a_row = 0
        else:
            self._size = max(1, accepted + 1)
            self._failed_in_a_row = self._failed_in_a_row + 1 if accepted == 0 else 0
            if self._failed_in_a_row >= PAUSE_AFTER:
                self._paused_for = PAUSE_TOKENS
                self._failed_in_a_row = 0
