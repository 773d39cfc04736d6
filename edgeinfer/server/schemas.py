"""Request and response bodies of every endpoint, defined once (pydantic). FastAPI validates
requests against them and publishes them in the OpenAPI schema.

Requests follow OpenAI's field names and ranges; fields this server does not know are ignored.
Fields it knows but cannot honour yet (n > 1, tools, JSON response formats, echo, ...) are
accepted by the schema and refused with a clear 400 by `prompts.check_supported`, so the refusal
names the feature instead of looking like a type error.
"""
from __future__ import annotations

import re
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_STOP_STRINGS = 16
MAX_TOP_LOGPROBS = 20
TOKEN_ID = re.compile(r"\s*-?[0-9]{1,12}\s*")


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore")


# --- shared generation options ---------------------------------------------------------------

class StreamOptions(_Request):
    include_usage: bool = False


class SamplingFields(_Request):
    """The generation options chat and text completions share."""

    model: str | None = Field(None, description="The model id; omitted = the served model.")
    max_tokens: int | None = Field(None, ge=1, description="Tokens to generate at most; "
                                   "clamped to the room left in the context.")
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0, description="0 = off.")
    min_p: float | None = Field(None, ge=0.0, le=1.0)
    repeat_penalty: float | None = Field(None, gt=0.0, description="1 = off.")
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    logit_bias: dict[str, float] | None = Field(
        None, description="Token id (as a string) -> bias in [-100, 100] added to its logit.")
    seed: int | None = None
    stop: str | list[str] | None = Field(None, description="Up to 16 stop strings.")
    n: int = Field(1, ge=1, description="Only 1 is supported.")
    stream: bool = False
    stream_options: StreamOptions | None = None

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and len(value) > MAX_STOP_STRINGS:
            raise ValueError(f"at most {MAX_STOP_STRINGS} stop strings are allowed")
        return value

    @field_validator("logit_bias")
    @classmethod
    def _logit_bias(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        for key, bias in (value or {}).items():
            if not TOKEN_ID.fullmatch(key):
                raise ValueError(f"keys must be token ids, got {key!r}")
            if not -100.0 <= bias <= 100.0:
                raise ValueError(f"bias for token {key} must be in [-100, 100], got {bias}")
        return value


# --- chat completions ------------------------------------------------------------------------

class ContentPart(_Request):
    type: str
    text: str | None = None


Role = Literal["system", "developer", "user", "assistant", "tool"]


class ChatMessage(_Request):
    role: Role
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class ResponseFormat(_Request):
    type: Literal["text", "json_object", "json_schema"]


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(..., min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1, description="Preferred over max_tokens.")
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    response_format: ResponseFormat | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    functions: list[dict[str, Any]] | None = None


# --- text completions ------------------------------------------------------------------------

class CompletionRequest(SamplingFields):
    prompt: Union[str, list[str], list[int]] = Field(
        ..., description="Text, a list holding one text, or token ids.")
    logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS,
                                 description="Include the log-probabilities of this many top tokens.")
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = Field(None, ge=1)


# --- responses -------------------------------------------------------------------------------

class PromptTokensDetails(BaseModel):
    cached_tokens: int


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails


class Timings(BaseModel):
    """llama.cpp's names, plus time to first token and time spent waiting in the queue."""

    prompt_n: int = Field(description="Prompt tokens decoded (not taken from the cache).")
    prompt_ms: float
    prompt_per_second: float
    predicted_n: int
    predicted_ms: float
    predicted_per_second: float
    cache_n: int = Field(description="Prompt tokens reused from the prompt cache.")
    ttft_ms: float = Field(description="From the request's arrival to its first token.")
    queue_ms: float = Field(description="From the request's arrival to the engine starting it "
                                        "(chat template, tokenization, waiting in the queue).")


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int]


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(BaseModel):
    content: list[TokenLogprob]


FinishReason = Literal["stop", "length"]


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int = 0
    message: AssistantMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: FinishReason


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    system_fingerprint: str
    choices: list[ChatChoice]
    usage: Usage
    timings: Timings


class ChatDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChatChunkChoice(BaseModel):
    index: int = 0
    delta: ChatDelta
    logprobs: ChoiceLogprobs | None = None
    finish_reason: FinishReason | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    system_fingerprint: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None
    timings: Timings | None = None


class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int]


class CompletionChoice(BaseModel):
    index: int = 0
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: FinishReason | None = None


class Completion(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    system_fingerprint: str
    choices: list[CompletionChoice]
    usage: Usage | None = None
    timings: Timings | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "edgeinfer"
    n_ctx: int
    n_params: int
    arch: str


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class Health(BaseModel):
    status: Literal["ok", "loading", "error"]
    model: str
    detail: str | None = None


# --- tokenizer -------------------------------------------------------------------------------

class TokenizeRequest(_Request):
    content: str = Field(..., description="Text to tokenize.")
    add_special: bool = Field(False, description="Add the model's BOS token if it wants one.")
    parse_special: bool = Field(False, description="Read special-token text as special tokens.")
    model: str | None = None


class TokenizeResponse(BaseModel):
    tokens: list[int]


class DetokenizeRequest(_Request):
    tokens: list[int]
    model: str | None = None


class DetokenizeResponse(BaseModel):
    content: str


# --- errors ----------------------------------------------------------------------------------

class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorDetail
