"""Speculative decoding with a draft model: a smaller model with the same vocabulary guesses the
next tokens, one decode call each, and the target checks them all in one call.

The draft model has its own context and prompt cache. Before each draft it catches up with the
accepted history (the prompt cache keeps the longest common prefix: usually one or two tokens are
new, the token the target sampled after the last check and the draft's last guess if all were
kept), then decodes one guess at a time. The guesses are:

- greedy target, or a seeded one: the draft's most likely token after the sampler's logit bias
  and penalties. The target keeps a guess while its sampler draws the same token, so the output
  is exactly plain decoding's, for a seed too (edgeinfer.speculative).
- sampling without a seed: a draw from the draft's distribution under the same sampling options,
  checked by the rejection rule (edgeinfer.rejection): the target's distribution exactly, and
  more guesses kept than with the most likely token when the two models agree. Its draws are not
  plain decoding's, and how many tokens are drafted follows measured timings, so a seed could
  not reproduce its text: seeded sampling uses the guesses above.

Each guess costs a decode call of the draft model, so `draft_size` counts that cost (measured per
guess) beside the check's, and drafts nothing where guessing does not pay.

A `DraftModel` drafts for one generation at a time (its prompt cache follows that generation's
history): generations running at once (edgeinfer.parallel) need one each, over a draft model
loaded once per stream or once with n_parallel sequences, one of its prompt_caches each.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from edgeinfer.errors import EdgeInferError
from edgeinfer.prompt_cache import PromptCache, common_prefix
from edgeinfer.sampling import TokenPicker
from edgeinfer.speculative import EXPLORE_EVERY, MAX_DRAFT, NO_DRAFT, SMOOTHING, Draft, Drafter, DraftStats

if TYPE_CHECKING:
    from edgeinfer.model import Model

# A longer catch-up than this is a prefill (the prompt, or tokens emitted while nothing was
# drafted), not part of what one more draft costs, so its time is not counted per guess.
CATCH_UP_AS_A_STEP = 2
# While drafting does not pay, a probe now and then checks whether it has started to (edgeinfer.
# speculative); one that would first have to catch up with more tokens than this (the prompt, or
# all that was emitted since the last probe and more) is skipped: a prefill is no cheap check.
PROBE_CATCH_UP_LIMIT = 2 * EXPLORE_EVERY


def _file_name(model: Any) -> str:
    """The file name of an edgeinfer.Model or a native core model."""
    return Path(model.path if hasattr(model, "path") else model.gguf.path).name


def check_same_vocabulary(target: Any, draft: Any) -> None:
    """EdgeInferError naming both files and the first difference unless `draft` (an
    edgeinfer.Model or a native core model) has the vocabulary of `target`: the same number of
    tokens and logits, the same special tokens and the same text for every token id."""
    difference = _first_difference(target, draft)
    if difference is not None:
        what, in_target, in_draft = difference
        t, d = _file_name(target), _file_name(draft)
        raise EdgeInferError(
            f"{d} cannot draft for {t}: their vocabularies differ ({what}: {in_target} in {t}, {in_draft} in {d}); "
            f"a draft model needs the target's vocabulary, e.g. another quantization of the same model or a "
            f"smaller model of its family")


def _first_difference(target: Any, draft: Any) -> tuple[str, str, str] | None:
    """(what differs, its value in the target, in the draft), or None."""
    tv, dv = target.vocab, draft.vocab
    sizes = [f"{v.n_tokens} tokens" + (f" ({m.n_vocab} logits)" if m.n_vocab != v.n_tokens else "")
             for m, v in ((target, tv), (draft, dv))]
    if sizes[0] != sizes[1]:
        return "size", sizes[0], sizes[1]
    for name in ("bos", "eos", "eog_ids"):
        if getattr(tv, name) != getattr(dv, name):
            return f"special token {name}", str(getattr(tv, name)), str(getattr(dv, name))
    for i in range(tv.n_tokens):
        if tv.token_text(i) != dv.token_text(i):
            return f"token {i}", repr(tv.token_text(i).decode("utf-8", "replace")), \
                repr(dv.token_text(i).decode("utf-8", "replace"))
    return None


class DraftModel(Drafter):
    """Guesses from `model`, an edgeinfer.Model with the vocabulary of the target (checked here
    when `target` is given, else when a generation begins). Pass it to Model.generate / chat as
    `draft=`; it keeps what it learns of costs and acceptance from one generation to the next.
    `seed` seeds its own draws (the guesses of sampling without a seed); `prompt_cache` is the one
    of the draft model's prompt_caches it drafts in (default: its prompt_cache).

    >>> draft = DraftModel(Model.load(small_path, n_ctx=target.n_ctx, n_threads=target.n_threads), target)
    >>> text = target.complete("...", draft=draft).text
    """

    def __init__(self, model: Model, target: Any = None, max_draft: int = MAX_DRAFT, seed: int | None = None,
                 prompt_cache: PromptCache | None = None):
        super().__init__(max_draft=max_draft, stats=DraftStats(source=f"draft model {_file_name(model)}"))
        if prompt_cache is not None and not any(prompt_cache is c for c in model.prompt_caches):
            raise ValueError("prompt_cache must be one of the draft model's prompt_caches")
        self.model = model
        self.cache = prompt_cache if prompt_cache is not None else model.prompt_cache   # where it drafts
        self._checked: set[int] = set()   # fingerprints of the targets whose vocabulary matched
        if target is not None:
            self._check(target)
        self._history: list[int] = []
        self._start = 0                   # the draft context holds history[_start:]
        self._picker: TokenPicker | None = None
        self._sample = False              # guesses drawn at random (else the most likely)
        self._rng = np.random.default_rng(seed)   # for the guesses drawn at random
        self._guess_cost = 0.0            # running seconds the draft model takes per guess

    def _check(self, target: Any) -> None:
        if target.fingerprint not in self._checked:
            check_same_vocabulary(target, self.model)
            self._checked.add(target.fingerprint)

    def begin(self, target: Any, sampler: Any) -> None:
        """Starts drafting for a new generation of `target` (checking the vocabulary if that was
        not done yet) whose tokens `sampler` draws: new stats, an empty history."""
        self._check(target)
        self.stats = DraftStats(source=self.stats.source)
        self._history = []
        self._start = 0
        self._picker = sampler if isinstance(sampler, TokenPicker) else None
        self._sample = self._picker is not None and not self._picker.greedy and self._picker.params.seed is None

    def extend(self, tokens: Sequence[int]) -> None:
        self._history.extend(int(t) for t in tokens)

    def draft(self, limit: int) -> Draft:
        k = min(limit, self.draft_size(self._guess_cost))
        window = self._window(k)
        k = min(k, self.model.n_ctx - len(window) + 1)   # the context holds the window and k - 1 guesses
        if k <= 0:
            return NO_DRAFT
        t0 = time.perf_counter()
        cache = self.cache
        reused = cache.prepare(window)
        cache.decode(window[reused:])
        vocab = self.model.vocab
        context = list(self._history)   # what the sampler's penalties look at
        tokens, proposals = [], []
        for i in range(k):
            if i:
                cache.decode(tokens[-1:])
            logits = cache.ctx.logits[-1]
            if self._sample:
                proposals.append(self._picker.distribution(logits, context))
                token = proposals[-1].draw(self._rng)
            elif self._picker is not None:
                token = self._picker.most_likely(logits, context)
            else:
                token = int(np.argmax(logits))
            tokens.append(token)
            context.append(token)
            if vocab.is_eog(token):   # nothing after the end would be used
                break
        if len(window) - reused <= CATCH_UP_AS_A_STEP:
            per_guess = (time.perf_counter() - t0) / len(tokens)
            self._guess_cost = per_guess if not self._guess_cost else \
                self._guess_cost + SMOOTHING * (per_guess - self._guess_cost)
        return Draft(tokens, proposals if self._sample else None)

    def _probe_is_cheap(self) -> bool:
        window = self._history[self._start:]
        return len(window) - common_prefix(self.cache.tokens, window) <= PROBE_CATCH_UP_LIMIT

    def _window(self, k: int) -> list[int]:
        """The part of the history the draft context reads: all of it while it fits with k - 1
        guesses; once it does not (a context shift let the target go on), the last half of the
        context, kept until that overflows too (one prefill each time, as a context shift)."""
        if len(self._history) - self._start + k - 1 > self.model.n_ctx:
            self._start = max(0, len(self._history) - self.model.n_ctx // 2)
        return self._history[self._start:]
