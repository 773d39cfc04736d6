"""The OpenAI response objects, whole or as stream chunks, from the engine's events.

`ChatResponses` and `CompletionResponses` share one interface, so the streaming loop (sse.py)
and the non-streaming collector (app.py) are written once:

    first()                      the opening chunk, or None
    deltas(text, logprobs)       the chunks for new text (none while text is held back)
    final(finished)              the last chunks: held text, then the one carrying finish_reason
    usage_chunk(finished)        the chunk with usage and timings (empty choices)
    whole(text, logprobs, fin)   the non-streamed response

A chat answer of a reasoning model or with tools is read by an edgeinfer.chat_answer stream:
reasoning goes out as delta.reasoning_content / message.reasoning_content, text before the calls
is content, each call streams as a first delta (index, id, type, name) and then fragments of
its arguments' JSON text; the non-streamed response is the same reader fed the whole text.
"""
from __future__ import annotations

import time
import uuid
from typing import Any, Sequence

from edgeinfer.chat_answer import ChatAnswerStream, Event, read_answer
from edgeinfer.generate import GenerationResult
from edgeinfer.reasoning import Reasoning, ReasoningStyle
from edgeinfer.server import schemas as s
from edgeinfer.server.logprobs import TokenLogprob
from edgeinfer.server.worker import Finished
from edgeinfer.tools import CallStart, ContentDelta, ToolCall
from edgeinfer.tools.formats import ToolFormat


def usage(result: GenerationResult) -> s.Usage:
    n_gen = len(result.tokens)
    return s.Usage(prompt_tokens=result.prompt_tokens, completion_tokens=n_gen,
                   total_tokens=result.prompt_tokens + n_gen,
                   prompt_tokens_details=s.PromptTokensDetails(cached_tokens=result.cached_tokens))


def timings(finished: Finished) -> s.Timings:
    r, t = finished.result, finished.result.timings
    return s.Timings(prompt_n=r.prompt_tokens - r.cached_tokens, prompt_ms=round(t.prompt_ms, 3),
                     prompt_per_second=round(t.prompt_tok_s, 3), predicted_n=len(r.tokens),
                     predicted_ms=round(t.gen_ms, 3), predicted_per_second=round(t.gen_tok_s, 3),
                     cache_n=r.cached_tokens, ttft_ms=round(finished.ttft_ms, 3),
                     queue_ms=round(finished.queue_ms, 3), draft_n=r.drafts.drafted if r.drafts else 0,
                     draft_n_accepted=r.drafts.accepted if r.drafts else 0)


class _Responses:
    def __init__(self, id_prefix: str, model_id: str, fingerprint: str, vocab: Any):
        self.id = f"{id_prefix}-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self.model_id = model_id
        self.fingerprint = fingerprint
        self.vocab = vocab

    def _piece(self, token: int) -> bytes:
        return self.vocab.token_to_piece(token, True)

    def _head(self) -> dict[str, Any]:
        return dict(id=self.id, created=self.created, model=self.model_id, system_fingerprint=self.fingerprint)


def _event_delta(event: Event) -> s.ChatDelta:
    if isinstance(event, Reasoning):
        return s.ChatDelta(reasoning_content=event.text)
    if isinstance(event, ContentDelta):
        return s.ChatDelta(content=event.text)
    if isinstance(event, CallStart):
        return s.ChatDelta(tool_calls=[s.ToolCallDelta(index=event.index, id=event.id, type="function",
                                                       function=s.FunctionCallDelta(name=event.name, arguments=""))])
    return s.ChatDelta(tool_calls=[s.ToolCallDelta(index=event.index, function=s.FunctionCallDelta(arguments=event.text))])


def _finish_reason(finished: Finished, calls: Sequence[ToolCall]) -> str:
    reason = finished.result.finish_reason
    return "tool_calls" if calls and reason == "stop" else reason


class ChatResponses(_Responses):
    def __init__(self, model_id: str, fingerprint: str, vocab: Any, want_logprobs: bool,
                 tool_format: ToolFormat | None = None, reasoning: ReasoningStyle | None = None):
        super().__init__("chatcmpl", model_id, fingerprint, vocab)
        self.want_logprobs = want_logprobs
        self.tool_format = tool_format
        self.reasoning = reasoning
        self._reader = ChatAnswerStream(reasoning, tool_format)
        self._held_logprobs: list[TokenLogprob] = []   # of text the readers still hold

    def logprobs(self, entries: Sequence[TokenLogprob]) -> s.ChoiceLogprobs | None:
        if not self.want_logprobs:
            return None
        content = []
        for e in entries:
            raw = self._piece(e.token)
            top = [s.TopLogprob(token=(p := self._piece(i)).decode("utf-8", "replace"), logprob=lp, bytes=list(p))
                   for i, lp in e.top]
            content.append(s.TokenLogprob(token=raw.decode("utf-8", "replace"), logprob=e.logprob,
                                          bytes=list(raw), top_logprobs=top))
        return s.ChoiceLogprobs(content=content)

    def _chunk(self, choice: s.ChatChunkChoice | None, **extra: Any) -> dict[str, Any]:
        # A chunk leaves out what it does not carry, except the choice's logprobs and
        # finish_reason, which clients expect as null.
        chunk = s.ChatCompletionChunk(**self._head(), choices=[choice] if choice else [], **extra)
        body = chunk.model_dump(exclude_none=True)
        if choice is not None:
            body["choices"] = [choice.model_dump() | {"delta": choice.delta.model_dump(exclude_none=True)}]
        return body

    def first(self) -> dict[str, Any]:
        return self._chunk(s.ChatChunkChoice(delta=s.ChatDelta(role="assistant", content="")))

    def deltas(self, text: str, entries: Sequence[TokenLogprob]) -> list[dict[str, Any]]:
        if not self._reader.splits:
            return [self._chunk(s.ChatChunkChoice(delta=s.ChatDelta(content=text), logprobs=self.logprobs(entries)))]
        self._held_logprobs += entries
        return [self._delta_chunk(_event_delta(e)) for e in self._reader.feed(text)]

    def _delta_chunk(self, delta: s.ChatDelta) -> dict[str, Any]:
        """A chunk for `delta`; the logprobs of the text held so far ride on it."""
        logprobs = self.logprobs(self._held_logprobs) if self._held_logprobs else None
        self._held_logprobs = []
        return self._chunk(s.ChatChunkChoice(delta=delta, logprobs=logprobs))

    def final(self, finished: Finished) -> list[dict[str, Any]]:
        cut = finished.result.finish_reason == "length"
        chunks = [self._delta_chunk(_event_delta(e)) for e in self._reader.finish(cut)]
        held = self._held_logprobs + list(finished.logprobs)
        logprobs = self.logprobs(held) if held else None
        calls = self._reader.tool_calls
        chunks.append(self._chunk(s.ChatChunkChoice(delta=s.ChatDelta(), logprobs=logprobs,
                                                    finish_reason=_finish_reason(finished, calls))))
        return chunks

    def usage_chunk(self, finished: Finished) -> dict[str, Any]:
        return self._chunk(None, usage=usage(finished.result), timings=timings(finished))

    def whole(self, text: str, entries: Sequence[TokenLogprob], finished: Finished) -> dict[str, Any]:
        answer = read_answer(text, self.reasoning, self.tool_format, cut=finished.result.finish_reason == "length")
        content, reasoning, calls = answer.content, answer.reasoning, answer.tool_calls
        message = s.AssistantMessage(content=content, reasoning_content=reasoning, tool_calls=[
            s.ToolCall(id=c.id, function=s.FunctionCall(name=c.name, arguments=c.arguments)) for c in calls] or None)
        choice = s.ChatChoice(message=message, logprobs=self.logprobs(entries),
                              finish_reason=_finish_reason(finished, calls))
        body = s.ChatCompletion(**self._head(), choices=[choice], usage=usage(finished.result),
                                timings=timings(finished)).model_dump()
        if not calls:
            del body["choices"][0]["message"]["tool_calls"]   # present only when there are calls, as OpenAI's
        if reasoning is None:
            del body["choices"][0]["message"]["reasoning_content"]   # present only when there is some
        return body


class CompletionResponses(_Responses):
    def __init__(self, model_id: str, fingerprint: str, vocab: Any, want_logprobs: bool):
        super().__init__("cmpl", model_id, fingerprint, vocab)
        self.want_logprobs = want_logprobs
        self._offset = 0   # text offset of the next token, for logprobs.text_offset

    def logprobs(self, entries: Sequence[TokenLogprob]) -> s.CompletionLogprobs | None:
        if not self.want_logprobs:
            return None
        tokens, values, tops, offsets = [], [], [], []
        for e in entries:
            text = self._piece(e.token).decode("utf-8", "replace")
            tokens.append(text)
            values.append(e.logprob)
            tops.append({self._piece(i).decode("utf-8", "replace"): lp for i, lp in e.top})
            offsets.append(self._offset)
            self._offset += len(text)
        return s.CompletionLogprobs(tokens=tokens, token_logprobs=values, top_logprobs=tops, text_offset=offsets)

    def _chunk(self, choice: s.CompletionChoice | None, **extra: Any) -> dict[str, Any]:
        body = s.Completion(**self._head(), choices=[choice] if choice else [], **extra).model_dump(exclude_none=True)
        if choice is not None:
            body["choices"] = [choice.model_dump()]
        return body

    def first(self) -> None:
        return None

    def deltas(self, text: str, entries: Sequence[TokenLogprob]) -> list[dict[str, Any]]:
        return [self._chunk(s.CompletionChoice(text=text, logprobs=self.logprobs(entries)))]

    def final(self, finished: Finished) -> list[dict[str, Any]]:
        logprobs = self.logprobs(finished.logprobs) if finished.logprobs else None
        return [self._chunk(s.CompletionChoice(text="", logprobs=logprobs, finish_reason=finished.result.finish_reason))]

    def usage_chunk(self, finished: Finished) -> dict[str, Any]:
        return self._chunk(None, usage=usage(finished.result), timings=timings(finished))

    def whole(self, text: str, entries: Sequence[TokenLogprob], finished: Finished) -> dict[str, Any]:
        choice = s.CompletionChoice(text=text, logprobs=self.logprobs(entries),
                                    finish_reason=finished.result.finish_reason)
        return s.Completion(**self._head(), choices=[choice], usage=usage(finished.result),
                            timings=timings(finished)).model_dump()
