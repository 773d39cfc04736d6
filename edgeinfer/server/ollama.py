"""Ollama's API over the same engine: its requests become the OpenAI requests the server already
validates and runs (so sampling, constrained output and tool calls are defined once), and the
engine's events become Ollama's answers: one JSON object, or NDJSON lines while streaming.

What does not map is refused with the reason rather than ignored when it would change the answer
(images, a custom `template`, the old `context`), and ignored when it only tunes Ollama's own
runner (num_ctx, num_gpu, num_thread, ...: ollama_schemas.OllamaOptions). An error about a field
of the OpenAI request names the Ollama field it came from (`format`, not `response_format`).

`think`, as Ollama has it for a model that reasons (edgeinfer.reasoning; others ignore it):
    true, or absent   the reasoning goes apart, to message.thinking (chat) / thinking (generate),
                      streamed as it comes; the answer is the content / response alone
    "low" | "medium" | "high"   the same, with the level given to the template as
                      reasoning_effort (gpt-oss's)
    false             the template is asked not to reason (enable_thinking false: Qwen3 then
                      opens and closes an empty <think>), and whatever reasoning comes anyway is
                      dropped, never put in the answer; gpt-oss cannot stop reasoning (Ollama
                      ignores false for it too), so its analysis is dropped.
A model that does not reason refuses true and the levels with a 400, as Ollama's does."""
from __future__ import annotations

import hashlib
import json
import time
from datetime import datetime, timezone
from typing import Any, AsyncIterator

from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from edgeinfer.catalog import entry_for_file
from edgeinfer.chat_answer import ChatAnswerStream
from edgeinfer.generate import GenerationResult
from edgeinfer.reasoning import Reasoning, ReasoningStyle
from edgeinfer.server import schemas as s
from edgeinfer.server.errors import APIError, from_exception, validation_error
from edgeinfer.server.ollama_schemas import OllamaChatRequest, OllamaGenerateRequest, OllamaGeneration, OllamaMessage
from edgeinfer.server.served_models import ServedModel
from edgeinfer.server.worker import Failed, Finished, GenerationJob, Piece
from edgeinfer.tools import ContentDelta
from edgeinfer.tools.formats import ToolFormat

NDJSON = "application/x-ndjson"
# The Ollama version whose API this follows (clients check it for features such as tools).
OLLAMA_API_VERSION = "0.12.0"
NS_PER_MS = 1_000_000


def now_iso(t: float | None = None) -> str:
    when = datetime.fromtimestamp(time.time() if t is None else t, timezone.utc)
    return when.isoformat(timespec="microseconds").replace("+00:00", "Z")


def ollama_name(served: ServedModel) -> str:
    """Ollama's "name:tag": a name without a tag is :latest (find() accepts it back)."""
    return served.model_id if ":" in served.model_id else f"{served.model_id}:latest"


def digest(served: ServedModel) -> str:
    """The catalog's sha256 of a known model's file, however the server was given it (by name, by
    path or in the models folder); else an identity of the file's path, size and time (hashing
    every file on each listing would take seconds a gigabyte)."""
    entry = served.entry or entry_for_file(served.path)
    if entry is not None:
        return entry.sha256
    try:
        st = served.path.stat()
        key = f"{served.path.resolve()}:{st.st_size}:{st.st_mtime_ns}"
    except OSError:
        key = str(served.path)
    return hashlib.sha256(key.encode()).hexdigest()


# --- requests -----------------------------------------------------------------------------------

def _refuse(field: str, why: str) -> APIError:
    return APIError(400, f"'{field}' is not supported: {why}.", param=field, code="unsupported")


# Ollama's options that are the OpenAI request's fields of the same name.
SHARED_OPTIONS = ("temperature", "top_k", "top_p", "min_p", "seed", "repeat_penalty", "presence_penalty",
                  "frequency_penalty", "stop")
# The OpenAI request's fields (or the start of their path) that _sampling fills from elsewhere in
# Ollama's request -> that Ollama field.
SAMPLING_SOURCES = {"response_format.json_schema.schema": "format", "response_format": "format",
                    "max_tokens": "options.num_predict", "chat_template_kwargs": "think",
                    **{name: f"options.{name}" for name in SHARED_OPTIONS}}


def _sampling(req: OllamaGeneration) -> dict[str, Any]:
    """The OpenAI request's sampling fields from Ollama's options and format."""
    out: dict[str, Any] = {}
    if req.options is not None:
        o = req.options
        for key in SHARED_OPTIONS:
            if getattr(o, key) is not None:
                out[key] = getattr(o, key)
        if o.num_predict is not None and o.num_predict > 0:   # -1 / -2: up to the context
            out["max_tokens"] = o.num_predict
    if req.format == "json":
        out["response_format"] = {"type": "json_object"}
    elif isinstance(req.format, dict):
        out["response_format"] = {"type": "json_schema", "json_schema": {"name": "format", "schema": req.format}}
    out.update(_think(req.think))
    return out


THINK_LEVELS = ("low", "medium", "high")


def _think(think: bool | str | None) -> dict[str, Any]:
    """The OpenAI request's fields for Ollama's `think` (see the module doc)."""
    if think is None or think is True:
        return {}
    if think is False:
        return {"chat_template_kwargs": {"enable_thinking": False}}
    if think in THINK_LEVELS:
        return {"chat_template_kwargs": {"reasoning_effort": think}}
    raise APIError(400, f"Invalid 'think': {think!r}; use true, false or one of {', '.join(THINK_LEVELS)}.",
                   param="think", code="invalid_value")


def field_sources(req: OllamaGeneration) -> dict[str, str]:
    """Where the fields of the OpenAI request that `req` becomes come from: an OpenAI field (or
    the start of its path) -> the Ollama field. Chat messages keep their index; generate's
    templated messages are its system (if any) and its prompt."""
    sources = dict(SAMPLING_SOURCES)
    if isinstance(req, OllamaGenerateRequest) and not (req.raw or req.suffix):
        texts = (["system"] if req.system else []) + ["prompt"]
        sources |= {f"messages.{i}.content": name for i, name in enumerate(texts)} | {"messages": "prompt"}
    return sources


def renamed(error: APIError, sources: dict[str, str]) -> APIError:
    """`error`, about a field of the OpenAI request an Ollama request became, naming instead the
    Ollama field it came from (`sources`, from field_sources)."""
    param = error.param or ""
    key = next((k for k in sorted(sources, key=len, reverse=True) if param == k or param.startswith(k + ".")), None)
    if key is None:
        return error
    ollama_param = sources[key] + param[len(key):]
    return APIError(error.status, error.message.replace(f"'{param}'", f"'{ollama_param}'"), error.type,
                    ollama_param, error.code, error.headers)


def _validated(cls: type, body: dict[str, Any], req: OllamaGeneration) -> Any:
    """The OpenAI request `cls` of `body`; its validation errors read as the OpenAI routes' do,
    about the fields of the Ollama request `req`."""
    try:
        return cls.model_validate(body)
    except ValidationError as exc:
        raise renamed(validation_error(RequestValidationError(exc.errors())), field_sources(req)) from None


def _message(m: OllamaMessage, index: int) -> dict[str, Any]:
    if m.images:
        raise _refuse(f"messages.{index}.images", "edgeinfer runs text models only")
    message: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        message["tool_calls"] = [
            {"id": f"call_{index}_{i}", "type": "function",
             "function": {"name": c.function.name, "arguments": c.function.arguments
                          if isinstance(c.function.arguments, str) else json.dumps(c.function.arguments)}}
            for i, c in enumerate(m.tool_calls)]
    if m.tool_name:
        message["name"] = m.tool_name
    return message


def _answer_tool_call_ids(messages: list[dict[str, Any]]) -> None:
    """Ollama's tool results name their tool; OpenAI's answer a call's id: each result gets the
    id of the latest call of its name not answered yet."""
    open_calls: list[tuple[str, str]] = []
    for message in messages:
        for call in message.get("tool_calls", ()):
            open_calls.append((call["function"]["name"], call["id"]))
        if message["role"] == "tool":
            match = next((c for c in reversed(open_calls) if c[0] == message.get("name")), None) or \
                (open_calls[-1] if open_calls else None)
            if match is not None:
                message["tool_call_id"] = match[1]
                open_calls.remove(match)


def chat_request(req: OllamaChatRequest) -> s.ChatCompletionRequest:
    messages = [_message(m, i) for i, m in enumerate(req.messages)]
    _answer_tool_call_ids(messages)
    body = {"model": req.model, "messages": messages, **_sampling(req)}
    if req.tools:
        body["tools"] = req.tools
    return _validated(s.ChatCompletionRequest, body, req)


def generate_request(req: OllamaGenerateRequest) -> s.ChatCompletionRequest | s.CompletionRequest:
    """`raw` (or a suffix to fill in before) is the prompt as is; else the model's chat template
    around the prompt and the system message, as Ollama applies its template."""
    if req.images:
        raise _refuse("images", "edgeinfer runs text models only")
    if req.template:
        raise _refuse("template", "edgeinfer renders the model's own chat template; send raw=true with the "
                                  "prompt already formatted")
    if req.context:
        raise _refuse("context", "send the conversation to /api/chat instead")
    sampling = _sampling(req)
    if req.raw or req.suffix:
        body = {"model": req.model, "prompt": req.prompt, **sampling}
        if req.suffix:
            body["suffix"] = req.suffix
        return _validated(s.CompletionRequest, body, req)
    messages = ([{"role": "system", "content": req.system}] if req.system else []) + \
        [{"role": "user", "content": req.prompt}]
    return _validated(s.ChatCompletionRequest, {"model": req.model, "messages": messages, **sampling}, req)


def check_think(think: bool | str | None, reasoning: ReasoningStyle | None, model_name: str) -> None:
    """Thinking asked of a model that does not reason is a 400 (Ollama's message)."""
    if think not in (None, False) and reasoning is None:
        raise APIError(400, f'"{model_name}" does not support thinking', param="think", code="unsupported")


# --- answers ------------------------------------------------------------------------------------

class OllamaAnswer:
    """The engine's events as Ollama's answer to /api/chat (`message`) or /api/generate
    (`response`); a reasoning model's thinking goes apart (or is dropped: `think` false); tool
    calls (chat only) are read from the text and sent whole, as Ollama does."""

    def __init__(self, kind: str, model_name: str, tool_format: ToolFormat | None, arrived: float, load_s: float,
                 reasoning: ReasoningStyle | None = None, think: bool | str | None = None):
        self.kind = kind
        self.model_name = model_name
        self.arrived = arrived
        self.load_ns = int(load_s * 1e9)
        self.reader = ChatAnswerStream(reasoning, tool_format)
        self.show_thinking = think is not False

    def _line(self, text: str, done: bool = False, thinking: str = "", **extra: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model_name, "created_at": now_iso()}
        if self.kind == "chat":
            body["message"] = {"role": "assistant", "content": text, **({"thinking": thinking} if thinking else {}),
                               **extra.pop("message", {})}
        else:
            body["response"] = text
            if thinking:
                body["thinking"] = thinking
        return body | {"done": done} | extra

    def _lines(self, events: list) -> list[dict[str, Any]]:
        """A line per run of thinking and per run of answer text, in order."""
        lines, runs = [], []   # runs: [is_thinking, text]
        for e in events:
            if isinstance(e, Reasoning) and not self.show_thinking:
                continue
            if isinstance(e, (Reasoning, ContentDelta)):
                kind = isinstance(e, Reasoning)
                if runs and runs[-1][0] == kind:
                    runs[-1][1] += e.text
                else:
                    runs.append([kind, e.text])
        for thinking, text in runs:
            lines.append(self._line("", thinking=text) if thinking else self._line(text))
        return lines

    def piece(self, text: str) -> list[dict[str, Any]]:
        if not self.reader.splits:
            return [self._line(text)] if text else []
        return self._lines(self.reader.feed(text))

    def final(self, finished: Finished) -> list[dict[str, Any]]:
        lines = self._lines(self.reader.finish(finished.result.finish_reason == "length"))
        calls = self._calls()
        if calls:
            lines.append(self._line("", message={"tool_calls": calls}))
        lines.append(self._line("", done=True, **self.stats(finished.result)))
        return lines

    def _calls(self) -> list[dict[str, Any]]:
        calls = []
        for call in self.reader.tool_calls:
            try:
                arguments = json.loads(call.arguments) if call.arguments else {}
            except json.JSONDecodeError:
                arguments = call.arguments   # as the model wrote it
            calls.append({"function": {"name": call.name, "arguments": arguments}})
        return calls

    def whole(self, text: str, finished: Finished) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        thinking = ""
        if self.reader.splits:
            self.reader.feed(text)
            self.reader.finish(finished.result.finish_reason == "length")
            text = self.reader.content or ""
            thinking = (self.reader.reasoning or "") if self.show_thinking else ""
            calls = self._calls()
            if calls:
                extra["message"] = {"tool_calls": calls}
        return self._line(text, done=True, thinking=thinking, **extra, **self.stats(finished.result))

    def stats(self, result: GenerationResult) -> dict[str, Any]:
        t = result.timings
        return {"done_reason": result.finish_reason,
                "total_duration": int((time.perf_counter() - self.arrived) * 1e9),
                "load_duration": self.load_ns,
                "prompt_eval_count": result.prompt_tokens,
                "prompt_eval_duration": int(t.prompt_ms * NS_PER_MS),
                "eval_count": len(result.tokens),
                "eval_duration": int(t.gen_ms * NS_PER_MS)}


def error_line(error: BaseException) -> dict[str, Any]:
    return {"error": from_exception(error).message}


async def ndjson_lines(job: GenerationJob, answer: OllamaAnswer) -> AsyncIterator[bytes]:
    """The streamed answer; an error after the first line is a last line {"error": ...}."""
    try:
        while True:
            event = await job.next_event()
            if isinstance(event, Piece):
                lines = answer.piece(event.text)
            elif isinstance(event, Finished):
                lines = answer.final(event)
            else:
                lines = [error_line(event.error)]
            for line in lines:
                yield json.dumps(line, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
            if not isinstance(event, Piece):
                return
    finally:
        job.cancel()


async def whole_answer(job: GenerationJob, answer: OllamaAnswer) -> dict[str, Any]:
    pieces: list[str] = []
    try:
        while True:
            event = await job.next_event()
            if isinstance(event, Piece):
                pieces.append(event.text)
            elif isinstance(event, Finished):
                return answer.whole("".join(pieces), event)
            elif isinstance(event, Failed):
                raise from_exception(event.error)
    finally:
        job.cancel()
