"""The single-user decoding loop.

`generate_step` is the engine-facing generator: one native `decode` call for the prompt (the core
splits it into chunks) and one per generated token, sampling from a zero-copy view of the logits.
`stream_generate` turns its tokens into text pieces: incremental UTF-8 decoding (a character may
span tokens), stop strings (text that might be the start of a stop string is held back until it is
clear), end-of-generation tokens, a grammar's end (constrained decoding, edgeinfer.constrain) and
the length limit. Its return value is a `GenerationResult`.
Bytes of a character that the generation stopped inside are dropped: the text never ends in a
replacement character that the model did not produce (invalid bytes inside the text still become
U+FFFD, as everywhere in Python's "replace" decoding).
"""
from __future__ import annotations

import codecs
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Generator, Mapping, Sequence

import numpy as np

from edgeinfer import _core
from edgeinfer.draft_model import DraftModel
from edgeinfer.errors import ContextOverflowError, EdgeInferError
from edgeinfer.prompt_cache import PromptCache
from edgeinfer.sampling import SamplingParams, TokenPicker
from edgeinfer.rejection import accept_or_resample
from edgeinfer.speculative import NO_DRAFT, Draft, Drafter, PromptLookup

if TYPE_CHECKING:  # llguidance is slow to import (docs/PERFORMANCE.md): only grammars pay for it
    from edgeinfer.constrain import GrammarMatcher
    from edgeinfer.model import Model

__all__ = ["Backtrack", "GenerationResult", "PromptCache", "TakenBack", "Timings", "generate_step",
           "make_token_picker", "stream_generate", "CONTEXT_OVERFLOW_POLICIES"]

# What happens when generation reaches the end of the context: "stop" ends it (finish_reason
# "length"); "shift" keeps the first n_keep tokens, drops the oldest half of the rest and goes on.
CONTEXT_OVERFLOW_POLICIES = ("stop", "shift")

# Picks the next token from the last position's logits and the token history. It may raise
# Backtrack instead (constrained decoding that found a dead end: edgeinfer.constrain.matcher).
Sampler = Callable[[np.ndarray, Sequence[int]], int]


class Backtrack(Exception):
    """Raised by a sampler: take back the last `n` generated tokens, then draw again there."""

    def __init__(self, n: int):
        super().__init__(f"take back {n} token(s)")
        self.n = n


@dataclass(frozen=True)
class TakenBack:
    """What generate_step yields after a Backtrack: its last `n` tokens are no longer part of
    the generation."""
    n: int

# Sees each generated token and the logits it was drawn from (see stream_generate).
TokenHook = Callable[[int, np.ndarray], None]


def make_token_picker(params: SamplingParams, logit_bias: Mapping[int, float] | None = None) -> TokenPicker:
    """The logit bias and the history-dependent penalties followed by the sampler, as one function."""
    return TokenPicker(params, logit_bias)


@dataclass
class Timings:
    load_ms: float = 0.0
    prompt_ms: float = 0.0
    prompt_tok_s: float = 0.0
    gen_ms: float = 0.0
    gen_tok_s: float = 0.0


@dataclass
class GenerationResult:
    tokens: list[int] = field(default_factory=list)   # generated ids (stop/EOG token excluded)
    text: str = ""
    finish_reason: str = "length"                     # "stop" | "length" | "tool_calls" (Model.chat)
    prompt_tokens: int = 0
    cached_tokens: int = 0                            # prompt tokens reused from the KV cache
    eog_token: int | None = None                      # the end-of-generation token that stopped it
    content: str | None = None                        # Model.chat, read (tools or reasoning): the answer
    reasoning_content: str | None = None              # Model.chat of a reasoning model: its reasoning
    tool_calls: list = field(default_factory=list)    # Model.chat with tools: edgeinfer.tools.ToolCall
    context_shifts: int = 0                           # times the context was shifted (policy "shift")
    drafts: DraftStats | None = None                  # speculative decoding's drafts (when it was on)
    timings: Timings = field(default_factory=Timings)


def generate_step(
    cache: PromptCache, prompt: Sequence[int], sampler: Sampler, max_tokens: int, stats: dict,
    context_overflow: str = "stop", n_keep: int = 0, drafter: Drafter | None = None,
) -> Generator[int | TakenBack, None, None]:
    """_steps(), as one generation of the cache's context (PromptCache.generating: parallel
    generations wait for each other's decodes only while they are in progress)."""
    with cache.generating():
        yield from _steps(cache, prompt, sampler, max_tokens, stats, context_overflow, n_keep, drafter)


def _steps(
    cache: PromptCache, prompt: Sequence[int], sampler: Sampler, max_tokens: int, stats: dict,
    context_overflow: str = "stop", n_keep: int = 0, drafter: Drafter | None = None,
) -> Generator[int | TakenBack, None, None]:
    """Yields sampled token ids until max_tokens or the context is full (the caller stops on EOG).
    Before each yield, stats["logits"] is the row the token was drawn from (a view, valid until
    the next step).

    When the context is full, `context_overflow` decides: "stop", or "shift" (keep the first
    n_keep cached tokens, drop the oldest half of the rest, re-rotate the kept keys, go on).
    When the sampler raises Backtrack(n), the last n tokens leave the KV cache, TakenBack(n) is
    yielded and the sampler is asked again at the earlier place (never across a context shift).
    With a `drafter`, tokens are guessed and checked in one decode call (edgeinfer.speculative):
    the same tokens come out, or for guesses a draft model drew at random, tokens of the same
    distribution (edgeinfer.rejection: the sampler must then be a TokenPicker); the sampler must
    not raise Backtrack."""
    if context_overflow not in CONTEXT_OVERFLOW_POLICIES:
        raise ValueError(f"context_overflow must be one of {CONTEXT_OVERFLOW_POLICIES}, got {context_overflow!r}")
    n_ctx = cache.ctx.n_ctx
    if len(prompt) == 0:
        raise ValueError("the prompt is empty: nothing to condition the generation on")
    if len(prompt) >= n_ctx:
        raise ContextOverflowError(
            f"the prompt has {len(prompt)} tokens but the context holds {n_ctx} "
            f"(including at least one generated token); use a larger n_ctx or a shorter prompt"
        )
    reused = cache.prepare(prompt)
    stats["cached_tokens"] = reused
    t0 = time.perf_counter()
    cache.decode(prompt[reused:])
    stats["prompt_s"] = time.perf_counter() - t0
    stats["prompt_decoded"] = len(prompt) - reused
    history = list(prompt)
    if drafter is not None:
        drafter.extend(history)
    t_gen = time.perf_counter()
    n = 0
    since_shift = 0   # generated tokens in the cache that a context shift has not moved
    # Tokens drawn but not yielded yet: (token, the logits it was drawn from, whether it is in the
    # cache already): the accepted guesses of a checked draft, then the token after them.
    ready: list[tuple[int, np.ndarray, bool]] = []
    while n < max_tokens:
        if not ready:
            try:
                ready.append((sampler(cache.ctx.logits[-1], history), cache.ctx.logits[-1], False))
            except Backtrack as back:
                if not 0 < back.n <= since_shift:
                    raise EdgeInferError(f"cannot take back {back.n} generated token(s): "
                                         f"{since_shift} can be (a context shift moved the others)") from None
                del history[-back.n:]
                n -= back.n
                since_shift -= back.n
                cache.take_back(back.n)
                yield TakenBack(back.n)
                continue
        token, stats["logits"], in_cache = ready.pop(0)
        n += 1
        stats["gen_s"] = time.perf_counter() - t_gen
        stats["generated"] = n
        yield token
        history.append(token)
        if drafter is not None:
            drafter.extend([token])
        if n >= max_tokens:
            break
        if in_cache:
            continue
        if cache.ctx.n_past >= n_ctx:
            n_discard = (cache.ctx.n_past - n_keep) // 2
            if context_overflow != "shift" or n_discard <= 0:
                break
            cache.shift(n_keep, n_discard)
            stats["shifts"] = stats.get("shifts", 0) + 1
            since_shift = 0
        # Guesses must fit in the context and in max_tokens (the row after them gives one more).
        draft = drafter.draft(min(n_ctx - cache.ctx.n_past - 1, max_tokens - n - 1)) if drafter else NO_DRAFT
        t_call = time.perf_counter()
        if draft.tokens:
            ready, seconds = _check_draft(cache, sampler, history, token, draft)
            drafter.timed(1 + len(draft.tokens), seconds)
            drafter.verified(len(draft.tokens), len(ready) - 1)
            since_shift += len(ready)
        else:
            cache.decode([token])
            if drafter is not None:
                drafter.timed(1, time.perf_counter() - t_call)
            since_shift += 1
    stats["gen_s"] = time.perf_counter() - t_gen


def _check_draft(cache: PromptCache, sampler: Sampler, history: list[int], token: int,
                 draft: Draft) -> tuple[list[tuple[int, np.ndarray, bool]], float]:
    """Decodes `token` and the guessed tokens after it in one call, each row as plain decoding
    would compute it, then judges the rows in turn (`judge_draft`). Returns (token, the logits it
    was drawn from, in the cache) for the accepted guesses (in the cache) and the token after them
    (not), and the decode call's seconds; the cache keeps `token` and the accepted guesses."""
    t0 = time.perf_counter()
    cache.decode([token] + draft.tokens, all_logits=True, as_single_steps=True)
    seconds = time.perf_counter() - t0
    rows = cache.ctx.logits
    picked = [(tok, rows[i], kept) for i, (tok, kept) in enumerate(judge_draft(rows, draft, sampler, history))]
    cache.drop(len(draft.tokens) - (len(picked) - 1))
    return picked, seconds


def judge_draft(rows: np.ndarray, draft: Draft, sampler: Sampler, history: Sequence[int]) -> list[tuple[int, bool]]:
    """The tokens a checked draft yields, each with whether it is the guess kept: `rows[i]` is the
    target's logits after the history and the first i guesses. Guesses chosen without randomness
    are kept while the sampler, asked row by row, draws them; guesses drawn at random go through
    the rejection rule (edgeinfer.rejection) with the sampler's distribution and generator. Either
    way it stops at the first guess not kept, with the token drawn in its place, or after the last
    guess with the sampler's draw from the next row."""
    out: list[tuple[int, bool]] = []
    context = list(history)
    for i, guess in enumerate(draft.tokens):
        if draft.proposals is None:
            tok = sampler(rows[i], context)
            kept = tok == guess
        else:
            p = sampler.distribution(rows[i], context)
            tok, kept = accept_or_resample(p, draft.proposals[i], guess, sampler.rng)
        out.append((tok, kept))
        if not kept:
            return out
        context.append(tok)
    out.append((sampler(rows[len(draft.tokens)], context), False))
    return out


def _drafter(draft: DraftModel | Model | None, model_core: _core.Model, cache: PromptCache,
             sampler: Sampler) -> Drafter:
    """The drafter of one generation: prompt lookup, or the draft model, begun for it."""
    if draft is None:
        return PromptLookup(costs=cache.call_costs)
    if not isinstance(draft, DraftModel):
        draft = DraftModel(draft)
    if draft.cache is cache:
        raise ValueError("the draft model drafts in the prompt cache that generates: it needs one of "
                         "its own (load the file again for it)")
    draft.begin(model_core, sampler)
    return draft


def _call_deferred(on_token: TokenHook | None, deferred: list[tuple[int, np.ndarray]], n: int) -> None:
    """Makes the first n deferred on_token calls (their tokens are final)."""
    if on_token is None or n <= 0:
        return
    for token, logits in deferred[:n]:
        on_token(token, logits)
    del deferred[:n]


def held_tail(text: str, stops: Sequence[str]) -> int:
    """Length of the longest tail of `text` that is a proper prefix of one of `stops`: text that
    may still become one of them, so a stream holds it back."""
    hold = 0
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), hold, -1):
            if text.endswith(s[:k]):
                hold = k
                break
    return hold


def stream_generate(
    model_core: _core.Model,
    cache: PromptCache,
    prompt: Sequence[int],
    sampler: Sampler,
    max_tokens: int,
    stop: Sequence[str] = (),
    load_ms: float = 0.0,
    context_overflow: str = "stop",
    n_keep: int = 0,
    on_token: TokenHook | None = None,
    matcher: GrammarMatcher | None = None,
    speculative: bool = True,
    draft: DraftModel | Model | None = None,
) -> Generator[str, None, GenerationResult]:
    """Yields text pieces; returns a GenerationResult (the generator's StopIteration value).
    `context_overflow` / `n_keep`: see generate_step.

    `on_token(token, logits)` is called once per generated token (not for the end-of-generation
    token), before the token's own decode step, with the raw logits it was drawn from (a view of
    the core's buffer, valid only during the call). It may raise to abort the generation at once
    (e.g. a cancelled request): the exception propagates and the prompt cache stays consistent.

    `matcher` constrains the tokens to a grammar (see edgeinfer.constrain.matcher). Generation
    ends with finish_reason "stop" when the grammar is complete: at an end-of-generation token the
    grammar accepts, or right after the token that leaves the grammar nothing more to allow.

    `speculative`: guess tokens and check several in one decode call (edgeinfer.speculative),
    from earlier text (prompt lookup), or with `draft` from a draft model (a DraftModel, or an
    edgeinfer.Model wrapped in one for this generation; edgeinfer.draft_model): the same tokens,
    or with a draft model sampling without a seed, the same distribution. Not with a matcher
    (its tokens are checked one at a time)."""
    if matcher is not None:
        sampler = matcher.wrap(sampler)
    # A matcher that may take tokens back (uniqueItems) makes the loop keep, per token, where the
    # text stood, and hold text and on_token calls until the tokens they belong to are final.
    revocable = matcher is not None and matcher.may_take_back
    checkpoints: list[tuple[int, tuple]] = []   # per kept token: (len(text), decoder state) before it
    deferred: list[tuple[int, np.ndarray]] = []  # on_token calls not made yet (tokens not final)
    vocab = model_core.vocab
    stops = [s for s in stop if s]
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    result = GenerationResult(prompt_tokens=len(prompt))
    stats: dict = {}
    stopped_by_string = False
    text = ""      # all text decoded so far
    emitted = 0    # how much of `text` has been yielded
    finish = "length"
    drafter = _drafter(draft, model_core, cache, sampler) if speculative and matcher is None else None
    for token in generate_step(cache, prompt, sampler, max_tokens, stats, context_overflow, n_keep, drafter):
        if isinstance(token, TakenBack):
            del result.tokens[-token.n:]
            if on_token is not None:   # a taken-back token was never final: its call is still here
                del deferred[-token.n:]
            text_len, state = checkpoints[-token.n]
            del checkpoints[-token.n:]
            text = text[:text_len]
            decoder.setstate(state)
            continue
        if vocab.is_eog(token):
            finish = "stop"
            result.eog_token = token
            break
        if on_token is not None:
            if revocable:
                deferred.append((token, np.array(stats["logits"])))
            else:
                on_token(token, stats["logits"])
        if revocable:
            checkpoints.append((len(text), decoder.getstate()))
        result.tokens.append(token)
        # Under a grammar a special token can only be one the grammar names (a tool-call
        # marker such as [TOOL_CALLS]): its text is part of the answer, so it is shown.
        text += decoder.decode(vocab.token_to_piece(token, matcher is not None))
        if stops:
            hit = min((i for i in (text.find(s, max(0, emitted - len(s))) for s in stops) if i >= 0), default=-1)
            if hit >= 0:
                _call_deferred(on_token, deferred, len(deferred))
                if hit > emitted:
                    yield text[emitted:hit]
                text = text[:hit]
                emitted = len(text)
                finish = "stop"
                stopped_by_string = True
                break
            safe = len(text) - held_tail(text, stops)
        else:
            safe = len(text)
        if revocable:
            final = matcher.committed_tokens()
            _call_deferred(on_token, deferred, len(deferred) - (len(result.tokens) - final))
            if final < len(result.tokens):
                safe = min(safe, checkpoints[final][0])
        if safe > emitted:
            yield text[emitted:safe]
            emitted = safe
        if matcher is not None and matcher.is_stopped:
            finish = "stop"
            break
    _call_deferred(on_token, deferred, len(deferred))
    if not stopped_by_string:
        # Text held back for a stop string that never came. The decoder may still hold the first
        # bytes of a character the last token began (max_tokens ended inside it): they are
        # dropped, not flushed, since flushing would emit U+FFFD for a character never finished.
        if emitted < len(text):
            yield text[emitted:]
            emitted = len(text)
    result.text = text
    result.finish_reason = finish
    result.cached_tokens = stats.get("cached_tokens", 0)
    result.context_shifts = stats.get("shifts", 0)
    result.drafts = drafter.stats if drafter is not None else None
    prompt_s = stats.get("prompt_s", 0.0)
    gen_s = stats.get("gen_s", 0.0)
    n_gen = stats.get("generated", 0)
    decoded = stats.get("prompt_decoded", 0)
    # The first generated token is sampled from the prompt's logits, so generation speed counts
    # the tokens that needed their own decode step.
    result.timings = Timings(
        load_ms=load_ms,
        prompt_ms=prompt_s * 1e3,
        prompt_tok_s=decoded / prompt_s if prompt_s > 0 else 0.0,
        gen_ms=gen_s * 1e3,
        gen_tok_s=(n_gen - 1) / gen_s if gen_s > 0 and n_gen > 1 else 0.0,
    )
    return result
