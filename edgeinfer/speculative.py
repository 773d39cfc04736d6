"""Speculative decoding: guess the next tokens cheaply, check them all in one decode call.

A `Drafter` proposes tokens to follow the history; generate_step decodes them after the current
token in one call with `as_single_steps`, which gives every row exactly the logits plain decoding
would give it, and keeps the guesses up to the first one the sampler does not confirm. Two
drafters: `PromptLookup` (here) and a smaller model with the same vocabulary
(edgeinfer.draft_model).

Prompt lookup: grounded work (summarise this, fix this function, extract from this page) repeats
spans of its prompt. When the last few tokens also occur earlier, the tokens that followed them
there are a cheap guess of what comes next (llama.cpp's "lookup decoding").

Why the output is exactly plain decoding's for guesses chosen without randomness (prompt lookup,
a draft model's most likely tokens): the sampler is asked, row by row, for the token plain
decoding would draw, called on the logits plain decoding computes for the same prefix, once per
emitted token, in the same order, so even a seeded random sampler draws the same numbers and the
same tokens. A wrong guess only costs the rows computed after it. Guesses a draft model drew at
random are checked by the rejection rule instead (edgeinfer.rejection): the same distribution,
other draws.

Drafting pays only when guesses are often right: a verifying call of k + 1 tokens costs more than
one step, by how much depends on the model and the CPU (docs/PERFORMANCE.md), and a draft model's
guesses cost its own decode calls. So every `Drafter` times the decode calls it sees, keeps a
running rate of accepted guesses, and drafts the k that maximises expected tokens per second:
with a per-token acceptance a, a draft of k yields (1 - a^(k+1)) / (1 - a) tokens for the cost of
a (k + 1)-row call plus k guesses, against 1 token for a one-row call. When no k beats plain steps
it drafts nothing, except a small draft now and then to notice when guessing starts to pay (text
that begins to repeat its prompt).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Sequence

from edgeinfer.sampling import Distribution

# n-gram sizes looked up, longest first: a longer match is a better guess.
NGRAM_SIZES = (4, 3, 2)
MAX_DRAFT = 8          # tokens a draft holds at most (the small-batch decode takes up to 8 rows at best speed)
EXPLORE_EVERY = 32     # while drafting does not pay, one small draft this often, to notice when it would
SMOOTHING = 0.2        # weight of the newest observation in the running acceptance and cost estimates


@dataclass
class DraftStats:
    """What speculation did in one generation: drafts checked, tokens drafted and accepted, and
    what drafted them ("prompt lookup", "draft model NAME")."""
    drafts: int = 0
    drafted: int = 0
    accepted: int = 0
    source: str = "prompt lookup"

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0


@dataclass(frozen=True)
class Draft:
    """Guessed tokens to follow the history. `proposals`, when given, holds the distribution each
    token was drawn from (a draft model sampling): they are checked by the rejection rule
    (edgeinfer.rejection). None: the tokens were chosen without randomness, and are kept while
    the sampler draws them too."""
    tokens: list[int]
    proposals: list[Distribution] | None = None


NO_DRAFT = Draft([])


@dataclass
class Drafter(ABC):
    """A source of guesses for generate_step, and the cost model that sizes them.

    generate_step feeds the token history with `extend` (the prompt, then every token emitted),
    asks `draft(limit)` before each decode call, reports every decode call's size and time with
    `timed`, and every check with `verified`. A subclass says what to guess (`extend`, `draft`)
    and sizes its drafts with `draft_size`; `stats` is what one generation's drafting did, `costs`
    what decode calls cost."""

    max_draft: int = MAX_DRAFT
    stats: DraftStats = field(default_factory=DraftStats)
    _accept: float = 0.6    # running share of drafted tokens accepted
    # rows -> running seconds of a decode call of that many rows. A property of the model and the
    # machine, not of one text: pass a context's PromptCache.call_costs to keep it across generations
    # (short answers then draft from their first token instead of measuring first).
    costs: dict[int, float] = field(default_factory=dict)
    _explore_in: int = 0

    @abstractmethod
    def extend(self, tokens: Sequence[int]) -> None:
        """The history grew by `tokens`."""

    @abstractmethod
    def draft(self, limit: int) -> Draft:
        """Up to `limit` guessed tokens to follow the history, as many as pay (NO_DRAFT: none)."""

    def timed(self, rows: int, seconds: float) -> None:
        """Records how long a decode call of `rows` tokens took."""
        old = self.costs.get(rows)
        self.costs[rows] = seconds if old is None else old + SMOOTHING * (seconds - old)

    def verified(self, drafted: int, accepted: int) -> None:
        """Records a check of `drafted` guessed tokens of which the first `accepted` were kept."""
        self.stats.drafts += 1
        self.stats.drafted += drafted
        self.stats.accepted += accepted
        self._accept += SMOOTHING * (accepted / drafted - self._accept)

    def _call_cost(self, rows: int) -> float | None:
        """Seconds of a decode call of `rows` tokens: measured, or interpolated between the
        nearest measured sizes (a call costs more with every row), None before any is measured."""
        if rows in self.costs:
            return self.costs[rows]
        below = max((r for r in self.costs if r < rows), default=None)
        above = min((r for r in self.costs if r > rows), default=None)
        if below is None and above is None:
            return None
        if below is None:
            return self.costs[above]
        if above is None:   # beyond what was measured: the last measured step per row, continued
            slope = (self.costs[below] - self.costs[1]) / (below - 1) if below > 1 and 1 in self.costs else 0.0
            return self.costs[below] + max(slope, 0.1 * self.costs[below] / below) * (rows - below)
        f = (rows - below) / (above - below)
        return self.costs[below] + f * (self.costs[above] - self.costs[below])

    def draft_size(self, guess_cost: float = 0.0) -> int:
        """The draft length that maximises expected tokens per second (0: plain steps pay best),
        when each guessed token costs `guess_cost` seconds to make besides its row in the check."""
        if not self.costs:
            return 2   # nothing timed yet: a small first draft
        if 1 not in self.costs:
            return 0   # then a plain step: what every draft must beat, measured, not guessed
        a = min(self._accept, 0.99)
        best_k, best_rate = 0, 1.0 / self.costs[1]
        for k in range(1, self.max_draft + 1):
            cost = self._call_cost(k + 1)
            expected = (1.0 - a ** (k + 1)) / (1.0 - a)
            if cost and expected / (cost + k * guess_cost) > best_rate:
                best_k, best_rate = k, expected / (cost + k * guess_cost)
        if best_k == 0:
            self._explore_in -= 1
            if self._explore_in <= 0:
                self._explore_in = EXPLORE_EVERY
                return 2 if self._probe_is_cheap() else 0
        return best_k

    def _probe_is_cheap(self) -> bool:
        """Whether a probe, a small draft made while drafting does not pay, costs little more than
        its check (the drafters that must first catch up with the text say when it would not)."""
        return True


@dataclass
class PromptLookup(Drafter):
    """Drafts from earlier occurrences of the last few tokens in the prompt and the text so far.

    Feed it the whole token history with `extend` (it indexes each n-gram once), then ask `draft`."""

    _tokens: list[int] = field(default_factory=list)
    # n -> {n-gram: end of its latest occurrence that has a continuation}
    _index: dict[int, dict[tuple[int, ...], int]] = field(default_factory=lambda: {n: {} for n in NGRAM_SIZES})

    def extend(self, tokens: Sequence[int]) -> None:
        for t in tokens:
            # The n-grams ending just before t now have a continuation (t itself).
            end = len(self._tokens)
            for n in NGRAM_SIZES:
                if end >= n:
                    self._index[n][tuple(self._tokens[end - n:end])] = end
            self._tokens.append(int(t))

    def draft(self, limit: int) -> Draft:
        """Up to `limit` guessed tokens to follow the history, as many as pay; none when nothing
        earlier matches its end or guessing does not pay."""
        k = min(limit, self.draft_size())
        if k <= 0:
            return NO_DRAFT
        end = len(self._tokens)
        for n in NGRAM_SIZES:
            if end < n:
                continue
            at = self._index[n].get(tuple(self._tokens[end - n:end]))
            if at is not None:
                return Draft(self._tokens[at:at + k])
        return NO_DRAFT
