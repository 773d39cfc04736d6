"""A chat conversation over one loaded model, independent of any terminal.

`ChatSession` holds the system prompt, the messages and the sampling settings, and runs one turn
at a time: render the conversation with the model's chat template, let the prompt cache reuse
the KV rows of every earlier turn (only the new message is prefilled), stream the answer, and
record it. A turn can be stopped between tokens (`should_stop`); the partial answer stays in the
conversation, like a finished one.

Context overflow: before a turn, if the prompt plus room for the answer would not fit, the oldest
turns after the system prompt are dropped (a user message and the answers that follow it), and
`notify` is told how many. Once trimming is needed, it goes on until the conversation takes at
most half the context: dropping only what the next answer needs would change the start of the
conversation on every later turn, and each change costs a prefill of everything that remains.

A reasoning model's answer (edgeinfer.reasoning) streams as `Reasoning` pieces, then the answer's
text as plain strings; only the answer is recorded, since chat templates drop the reasoning of
past turns anyway (gpt-oss's refuses its markup in a message's content).
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Generator

from edgeinfer.chat_answer import ChatAnswerStream, read_answer
from edgeinfer.errors import ContextOverflowError
from edgeinfer.reasoning import Reasoning, ReasoningStyle, reasoning_style
from edgeinfer.sampling import DEFAULTS, SamplingParams

Message = dict[str, str]


@dataclass
class Settings:
    """What `/set` changes: the sampling options and the answer length limit."""

    sampling: SamplingParams = DEFAULTS
    max_tokens: int = 1024

    def get(self, name: str) -> Any:
        """One setting: "max_tokens" or a SamplingParams field."""
        return self.max_tokens if name == "max_tokens" else getattr(self.sampling, name)

    def set(self, name: str, value: Any) -> None:
        """Changes one setting; a sampling option outside its limits is a ValueError."""
        if name == "max_tokens":
            self.max_tokens = value
        else:
            self.sampling = dataclasses.replace(self.sampling, **{name: value})

    def generate_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for `Model.generate` / `Model.chat`."""
        return dict(max_tokens=self.max_tokens, **self.sampling.to_dict())

    def to_dict(self) -> dict[str, Any]:
        """One flat mapping: the sampling options by their field names, and max_tokens."""
        return {**self.sampling.to_dict(), "max_tokens": self.max_tokens}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Settings":
        """Settings from `to_dict` output; unknown keys are ignored, missing ones take defaults, a
        sampling option outside its limits is a ValueError."""
        names = {f.name for f in dataclasses.fields(SamplingParams)}
        sampling = SamplingParams(**{k: v for k, v in data.items() if k in names})
        return cls(sampling, **{k: v for k, v in data.items() if k == "max_tokens"})


@dataclass
class TurnStats:
    """Figures of one answer, for the stats line."""

    finish: str                 # "stop" (end of turn), "length" (limit or context full), "cancelled"
    tokens: int                 # generated tokens (the end-of-turn token excluded)
    prompt_tokens: int          # tokens of the rendered conversation
    cached_tokens: int          # prompt tokens reused from the KV cache
    ttft_s: float               # from the start of the turn to the first token
    gen_tok_s: float            # generation speed after the first token
    total_s: float
    context_used: int           # KV positions in use after the turn
    n_ctx: int
    dropped_messages: int = 0   # messages trimmed away before this turn

    @property
    def context_left(self) -> int:
        return self.n_ctx - self.context_used


@dataclass
class ChatSession:
    """One conversation with `model` (an `edgeinfer.Model`).

    `messages` holds the user and assistant messages; the system prompt is kept apart so that
    `clear` and trimming never touch it. `notify` receives one-line notices (trimmed turns);
    `progress(done, total)` is called after each chunk of a prefill longer than one chunk."""

    model: Any
    system: str | None = None
    settings: Settings = field(default_factory=Settings)
    messages: list[Message] = field(default_factory=list)
    notify: Callable[[str], None] = lambda text: None
    progress: Callable[[int, int], None] = lambda done, total: None
    last_stats: TurnStats | None = None
    speculative: bool = True    # Model.generate's speculative (prompt lookup; same answers)
    draft: Any = None           # Model.generate's draft (an edgeinfer.draft_model.DraftModel)

    # --- the conversation ------------------------------------------------------------------------
    def conversation(self) -> list[Message]:
        """The messages as the chat template sees them: the system prompt first, if any."""
        return self._head() + [dict(m) for m in self.messages]

    def _head(self) -> list[Message]:
        return [{"role": "system", "content": self.system}] if self.system else []

    def clear(self) -> None:
        """A new conversation; the system prompt stays."""
        self.messages.clear()
        self.last_stats = None

    def prompt_ids(self, add_generation_prompt: bool = True) -> list[int]:
        return self.model.chat_prompt(self.conversation(), add_generation_prompt).ids

    def answer_reserve(self) -> int:
        """Positions kept free for the answer when deciding whether to trim."""
        return max(1, min(self.settings.max_tokens, self.model.n_ctx // 4))

    def fit_context(self) -> tuple[list[int], int]:
        """The prompt ids of the conversation and the number of messages dropped to get them: the
        oldest turns go if the prompt would not leave `answer_reserve()` positions free. The last
        user message is never dropped: if it does not fit even alone (after the system prompt),
        ContextOverflowError is raised and nothing is dropped."""
        n_ctx = self.model.n_ctx
        reserve = self.answer_reserve()
        ids = self.prompt_ids()
        dropped = 0
        if len(ids) + reserve > n_ctx:
            alone = self.model.chat_prompt(self._head() + self.messages[-1:]).ids
            if len(alone) >= n_ctx:
                raise ContextOverflowError(
                    f"the message does not fit: with the system prompt it is {len(alone)} tokens and "
                    f"the context holds {n_ctx}; shorten it or start with a larger -c")
            while self._droppable() and (len(ids) + reserve > n_ctx or len(ids) > n_ctx // 2):
                dropped += self._drop_oldest_turn()
                ids = self.prompt_ids()
        if dropped:
            self.notify(f"context full: dropped the {dropped} oldest message{'s' if dropped > 1 else ''} "
                        f"(the conversation is now {len(ids)} of {n_ctx} tokens)")
        return ids, dropped

    def _droppable(self) -> bool:
        """Whether there is a whole turn before the last user message."""
        return len(self.messages) > 1

    def _drop_oldest_turn(self) -> int:
        """Drops the first message and any non-user messages after it; returns how many."""
        n = 1
        while n < len(self.messages) - 1 and self.messages[n]["role"] != "user":
            n += 1
        del self.messages[:n]
        return n

    # --- turns -----------------------------------------------------------------------------------
    def ask(self, text: str, should_stop: Callable[[], bool] = lambda: False
            ) -> Generator[str, None, TurnStats]:
        """Adds a user message and streams the answer (see `reply`). If the turn fails or is
        stopped before the first piece (e.g. the message does not fit), the message is taken
        back out."""
        if self.messages and self.messages[-1]["role"] == "user":
            # A message left without an answer (a /regen stopped before the answer began, or a
            # transcript that ends with one): chat templates want the roles to alternate.
            self.messages.pop()
        message = {"role": "user", "content": text}
        self.messages.append(message)
        try:
            stats = yield from self.reply(should_stop)
        except BaseException:
            if self.messages and self.messages[-1] is message:
                self.messages.pop()
            raise
        if self.messages[-1] is message:   # stopped before the answer began
            self.messages.pop()
        return stats

    def regenerate(self, should_stop: Callable[[], bool] = lambda: False
                   ) -> Generator[str, None, TurnStats]:
        """Forgets the last answer and streams a new one to the last user message. ValueError if
        there is no user message to answer."""
        while self.messages and self.messages[-1]["role"] != "user":
            self.messages.pop()
        if not self.messages:
            raise ValueError("there is no message to answer yet")
        return self.reply(should_stop)

    def reasoning_style(self) -> ReasoningStyle | None:
        """How the next answer writes its reasoning, None for a model that writes none."""
        return reasoning_style(self.model.chat_template.source, self.model.chat_prompt(self.conversation()).text)

    def reply(self, should_stop: Callable[[], bool] = lambda: False
              ) -> Generator[str | Reasoning, None, TurnStats]:
        """Streams the model's answer to the conversation (which ends with a user message) and
        records it (a reasoning model's reasoning comes first, as `Reasoning` pieces). `should_stop` is checked between prefill chunks and after every piece; when
        it returns True generation stops there and the partial answer is kept (stopped during the
        prefill, there is no answer to keep). Returns the turn's TurnStats."""
        t0 = time.perf_counter()
        ids, dropped = self.fit_context()
        cached, stopped = self._prefill(ids, should_stop)
        if stopped:
            stats = TurnStats("cancelled", 0, len(ids), cached, 0.0, 0.0, time.perf_counter() - t0,
                              self.model.context.n_past, self.model.n_ctx, dropped)
            self.last_stats = stats
            return stats
        drawn = [0]   # tokens the answer has so far (speculation may have decoded a few more)

        def count(token: int, logits: Any) -> None:
            drawn[0] += 1

        gen = self.model.generate(ids, on_token=count, speculative=self.speculative, draft=self.draft,
                                  **self.settings.generate_kwargs())
        style = self.reasoning_style()
        reader = ChatAnswerStream(style) if style is not None else None
        pieces: list[str] = []
        t_first: float | None = None
        result = None
        try:
            while True:
                try:
                    piece = next(gen)
                except StopIteration as done:
                    result = done.value
                    break
                if t_first is None:
                    t_first = time.perf_counter()
                pieces.append(piece)
                yield from _read(reader, reader.feed(piece)) if reader is not None else [piece]
                if should_stop():
                    break
            if reader is not None:
                yield from _read(reader, reader.finish())
        finally:
            gen.close()
            # Finished, stopped, or the consumer went away: the answer so far is part of the
            # conversation. (An error before the first piece leaves no answer.)
            if pieces or result is not None:
                answer = "".join(pieces)
                if style is not None:   # what a reader fed it all reads, held text included
                    answer = read_answer(answer, style, None).content or ""
                self.messages.append({"role": "assistant", "content": answer})
        total = time.perf_counter() - t0
        n_past = self.model.context.n_past
        if result is not None:
            t = result.timings
            ttft = (t_first - t0) if t_first is not None else total
            stats = TurnStats(result.finish_reason, len(result.tokens), result.prompt_tokens,
                              cached, ttft, t.gen_tok_s, total, n_past, self.model.n_ctx, dropped)
        else:
            # Stopped after a piece: the tokens drawn so far (the KV cache may hold more: guesses
            # already checked, or fewer: the last token is decoded only when the next is wanted).
            n = max(1, drawn[0])
            gen_s = total - (t_first - t0)
            stats = TurnStats("cancelled", n, len(ids), cached, t_first - t0,
                              (n - 1) / gen_s if gen_s > 0 and n > 1 else 0.0, total, n_past,
                              self.model.n_ctx, dropped)
        self.last_stats = stats
        return stats

    def _prefill(self, ids: list[int], should_stop: Callable[[], bool]) -> tuple[int, bool]:
        """Decodes the uncached part of a long prompt one chunk (n_batch tokens) at a time,
        checking `should_stop` between chunks, so that Ctrl-C need not wait for a long prefill.
        The last chunk (1..n_batch tokens) is left to `generate`, which samples from its logits:
        the chunks are the ones the core would make itself. Returns (tokens that were already
        cached, whether it stopped)."""
        cached = self.model.prompt_cache.prepare(ids)
        step = self.model.context.n_batch
        end = cached + (len(ids) - cached - 1) // step * step
        return cached, self._decode_chunks(ids, cached, end, should_stop)

    def _decode_chunks(self, ids: list[int], start: int, end: int,
                       should_stop: Callable[[], bool] = lambda: False) -> bool:
        """Decodes ids[start:end] in chunks of n_batch, reporting progress; True if stopped."""
        step = self.model.context.n_batch
        while start < end:
            if should_stop():
                return True
            n = min(step, end - start)
            self.model.prompt_cache.decode(ids[start:start + n])
            start += n
            self.progress(start, len(ids))
        return False

    # --- resuming --------------------------------------------------------------------------------
    def prefill(self) -> int:
        """Decodes the conversation so far into the KV cache (no answer), so that the next turn
        only prefills its new message; returns the number of tokens decoded."""
        if not self.conversation():
            return 0
        ids = self.prompt_ids(add_generation_prompt=False)
        if len(ids) >= self.model.n_ctx:
            return 0   # the next turn trims it
        reused = self.model.prompt_cache.prepare(ids)
        self._decode_chunks(ids, reused, len(ids))
        return len(ids) - reused


def _read(reader: ChatAnswerStream, events: list) -> list[str | Reasoning]:
    """The reader's events as pieces: Reasoning, or the answer's text."""
    return [e if isinstance(e, Reasoning) else e.text for e in events]

