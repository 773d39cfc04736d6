"""Request and response bodies of every endpoint, defined once (pydantic). FastAPI validates
requests against them and publishes them in the OpenAPI schema.

Requests follow OpenAI's field names and ranges; fields this server does not know are ignored.
Fields it knows but cannot honour yet (n > 1, functions, echo, ...) are
accepted by the schema and refused with a clear 400 by `prompts.check_supported`, so the refusal
names the feature instead of looking like a type error.

Validation is strict, as OpenAI's is: a boolean is not an integer, a string is not a boolean,
numbers must be finite, and text anywhere in a body must be encodable as UTF-8 (no lone UTF-16
surrogates; see edgeinfer.text_check). Sampling fields take their ranges and descriptions from
`SamplingParams`, which every other entry point reads too, narrowed where OpenAI's API is
narrower; their defaults are the server's (`ServerConfig.sampling`), so a field left out is None.
"""
from __future__ import annotations

import re
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from edgeinfer.sampling import HELP, LIMITS
from edgeinfer.server.errors import INVALID_UNICODE
from edgeinfer.text_check import describe_surrogate, lone_surrogate

MAX_STOP_STRINGS = 16
MAX_TOP_LOGPROBS = 20
# OpenAI's ranges where they are narrower than what the engine takes (sampling.LIMITS).
OPENAI_MAX_TEMPERATURE = 2.0
OPENAI_PENALTY_RANGE = {"ge": -2.0, "le": 2.0}
TOKEN_ID = re.compile(r"\s*-?[0-9]{1,12}\s*")


def field_error(field: str, message: str, kind: str = "invalid_field") -> PydanticCustomError:
    """A validation error about `field` raised by a model-level check (pydantic would name the
    model, not the field); errors.validation_error reads the field from its context."""
    return PydanticCustomError(kind, message, {"field": field})


def _first_lone_surrogate(body: Any) -> tuple[str, str] | None:
    """(field path, description) of the first string in a decoded JSON body (keys included)
    that has no UTF-8 encoding. Iterative, so deep nesting cannot exhaust the stack."""
    stack: list[tuple[str, Any]] = [("", body)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            index = lone_surrogate(value)
            if index is not None:
                return path or "body", describe_surrogate(value, index)
        elif isinstance(value, dict):
            for key, item in reversed(list(value.items())):
                if isinstance(key, str) and lone_surrogate(key) is not None:
                    return path or "body", f"the key {key!r} holds " + describe_surrogate(key, lone_surrogate(key))
                stack.append((f"{path}.{key}" if path else str(key), item))
        elif isinstance(value, list):
            stack.extend((f"{path}.{i}", item) for i, item in reversed(list(enumerate(value))))
    return None


class StrictModel(BaseModel):
    """A part of a request, OpenAI's or Ollama's (ollama_schemas.py): strict, no lax conversions
    (true -> 1, "yes" -> True, "5" -> 5); finite numbers only; null is the field left out."""

    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _null_means_default(cls, data: Any) -> Any:
        """null for an optional field is the field left out, as in OpenAI's API ("n": null is
        n = 1) and Ollama's ("stream": null streams): clients serialize their unset options as null."""
        if not isinstance(data, dict):
            return data
        dropped = {name for name, field in cls.model_fields.items()
                   if not field.is_required() and field.default is not None}
        dropped |= {cls.model_fields[name].alias for name in dropped if cls.model_fields[name].alias}
        return {key: value for key, value in data.items() if not (value is None and key in dropped)}


class RequestBody(StrictModel):
    """A whole request body: refuses text that cannot become UTF-8, naming where it is."""

    @model_validator(mode="before")
    @classmethod
    def _utf8_text(cls, data: Any) -> Any:
        found = _first_lone_surrogate(data)
        if found is not None:
            field, problem = found
            raise field_error(field, f"the text is not valid Unicode: {problem}", INVALID_UNICODE)
        return data


# --- shared generation options ---------------------------------------------------------------

class StreamOptions(StrictModel):
    include_usage: bool = False


def sampling_field(name: str, **narrower: Any) -> Any:
    """The request field of the sampling option `name`: bounded and described as its SamplingParams
    field says, within `narrower` bounds where OpenAI's are."""
    return Field(None, description=HELP[name] + ".", **{**LIMITS[name].bounds(), **narrower})


class SamplingFields(RequestBody):
    """The generation options chat and text completions share."""

    model: str | None = Field(None, description="The model id; omitted = the served model.")
    max_tokens: int | None = Field(None, ge=1, description="Tokens to generate at most; "
                                   "clamped to the room left in the context.")
    temperature: float | None = sampling_field("temperature", le=OPENAI_MAX_TEMPERATURE)
    top_p: float | None = sampling_field("top_p")
    top_k: int | None = sampling_field("top_k")
    min_p: float | None = sampling_field("min_p")
    repeat_penalty: float | None = sampling_field("repeat_penalty")
    presence_penalty: float | None = sampling_field("presence_penalty", **OPENAI_PENALTY_RANGE)
    frequency_penalty: float | None = sampling_field("frequency_penalty", **OPENAI_PENALTY_RANGE)
    logit_bias: dict[str, float] | None = Field(
        None, description="Token id (as a string) -> bias in [-100, 100] added to its logit.")
    seed: int | None = Field(None, description=HELP["seed"] + "; any integer, taken modulo 2**64.")
    stop: str | list[str] | None = Field(None, description="Up to 16 stop strings.")
    n: int = Field(1, ge=1, description="Only 1 is supported.")
    response_format: ResponseFormat | None = Field(
        None, description="json_object: any JSON object; json_schema: JSON following json_schema.schema.")
    json_schema: dict[str, Any] | bool | None = Field(
        None, description="llama.cpp's field: a JSON Schema the text follows.")
    grammar: str | None = Field(None, description="llama.cpp's field: a GBNF (or Lark) grammar the text follows.")
    stream: bool = False
    stream_options: StreamOptions | None = None

    @model_validator(mode="after")
    def _stream_options_need_stream(self) -> "SamplingFields":
        if self.stream_options is not None and not self.stream:
            raise field_error("stream_options", "'stream_options' is only allowed when 'stream' is true")
        return self

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


# The SamplingParams fields a request may set (the rest keep the server's values).
REQUEST_SAMPLING_OPTIONS = tuple(name for name in LIMITS if name in SamplingFields.model_fields)


# --- chat completions ------------------------------------------------------------------------

class ContentPart(StrictModel):
    type: str
    text: str | None = None


Role = Literal["system", "developer", "user", "assistant", "tool"]


class ChatMessage(StrictModel):
    role: Role
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None   # an assistant turn's reasoning, as this server returned it


class JsonSchemaFormat(StrictModel):
    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False, populate_by_name=True)

    name: str | None = None
    description: str | None = None
    schema_: dict[str, Any] | bool | None = Field(
        None, alias="schema", description="The JSON Schema the content follows (true: any JSON value).")
    strict: bool | None = Field(None, description="Always enforced, whatever it says.")


class ResponseFormat(StrictModel):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(..., min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1, description="Preferred over max_tokens.")
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    tools: list[dict[str, Any]] | None = Field(None, description="Function tools the model may call.")
    tool_choice: str | dict[str, Any] | None = Field(
        None, description="none, auto (default with tools), required, or {type: function, function: {name}}.")
    parallel_tool_calls: bool | None = Field(
        None, description="Several calls in one answer; default: true if the model's chat template shows tools.")
    functions: list[dict[str, Any]] | None = None
    modalities: list[str] | None = Field(None, description='Output types: ["text"], the only one this server produces.')
    audio: dict[str, Any] | None = Field(None, description="Audio output options: refused (text only).")
    reasoning_format: Literal["none", "auto", "deepseek"] | None = Field(
        None, description="deepseek or auto (default): a reasoning model's thinking goes to reasoning_content; "
                          "none: it stays in content as generated.")
    chat_template_kwargs: dict[str, Any] | None = Field(
        None, description="Extra variables for the chat template (llama.cpp's), e.g. enable_thinking (Qwen3) "
                          "or reasoning_effort (gpt-oss).")
    continue_final_message: bool | Literal["content", "reasoning_content"] | None = Field(
        None, description="Continue the final assistant message instead of answering it: true (its last part), "
                          "content or reasoning_content. Default: a final assistant message is continued "
                          "(assistant prefill), as llama-server does; false answers it with a new turn.")
    add_generation_prompt: bool | None = Field(
        None, description="Open the assistant's turn after the messages (default true; false with "
                          "continue_final_message, which opens it itself).")

    @model_validator(mode="after")
    def _messages_have_content(self) -> "ChatCompletionRequest":
        """Every message needs content, as in OpenAI's API, but an assistant's with tool calls and
        a final assistant message (the start of the answer, to continue; it may be empty)."""
        last = len(self.messages) - 1
        for i, m in enumerate(self.messages):
            if m.content is None and not m.tool_calls and not (m.role == "assistant" and i == last):
                raise field_error(f"messages.{i}.content", "the message has no content", kind="missing")
        return self


# --- text completions ------------------------------------------------------------------------

class CompletionRequest(SamplingFields):
    prompt: Union[str, list[str], list[int], list[list[int]]] = Field(
        ..., description="Text, token ids, or a list holding one of either.")
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
    draft_n: int = Field(0, description="Tokens guessed by speculative decoding (prompt lookup or --draft).")
    draft_n_accepted: int = Field(0, description="Of those, the ones the model confirmed.")


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int]


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(BaseModel):
    content: list[TokenLogprob]


FinishReason = Literal["stop", "length", "tool_calls"]


class FunctionCall(BaseModel):
    name: str
    arguments: str = Field(description="The arguments as JSON text.")


class ToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    reasoning_content: str | None = None   # a reasoning model's thinking (edgeinfer.reasoning)
    tool_calls: list[ToolCall] | None = None


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


class FunctionCallDelta(BaseModel):
    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(BaseModel):
    """A call's first delta has index, id, type and the name (arguments ""); the next ones the
    index and a fragment of the arguments' text."""

    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: FunctionCallDelta


class ChatDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


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
    status: Literal["loaded", "loading", "available", "not_downloaded"] = Field(
        ..., description="Loaded; being loaded; a file ready to load on first use; a known model pulled on first use.")
    size: int = Field(..., description="The model file's bytes.")
    n_ctx: int | None = Field(None, description="The context of each request: every slot has n_ctx positions of its "
                                                "own (once loaded).")
    n_params: int | None = None
    arch: str | None = None
    parallel: int | None = Field(None, description="Requests run at once (slots); more wait in a queue (once loaded).")


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class Health(BaseModel):
    status: Literal["ok", "loading", "error"]
    model: str | None = Field(None, description="The single model's id (`edgeinfer serve MODEL`).")
    loaded: list[str] | None = Field(None, description="A server of many models: the ones loaded.")
    detail: str | None = None
    slots_total: int | None = Field(None, description="Requests run at once (once loaded).")
    slots_idle: int | None = Field(None, description="Slots free for a new request.")
    n_ctx_per_slot: int | None = Field(None, description="Context positions each request has.")


# --- tokenizer -------------------------------------------------------------------------------

class TokenizeRequest(RequestBody):
    content: str = Field(..., description="Text to tokenize.")
    add_special: bool = Field(False, description="Add the model's BOS token if it wants one.")
    parse_special: bool = Field(False, description="Read special-token text as special tokens.")
    with_pieces: bool = Field(False, description="Each token as {id, piece} (llama-server's): its text, "
                                                 "or its bytes where they are not whole UTF-8.")
    model: str | None = None


class TokenPiece(BaseModel):
    id: int
    piece: str | list[int]


class TokenizeResponse(BaseModel):
    tokens: list[int] | list[TokenPiece]


class DetokenizeRequest(RequestBody):
    tokens: list[int]
    model: str | None = None


class DetokenizeResponse(BaseModel):
    content: str


# --- embeddings and reranking ----------------------------------------------------------------

class EmbeddingRequest(RequestBody):
    """OpenAI's embeddings request, plus `truncate` (Hugging Face TEI's and llama.cpp's)."""

    input: Union[str, list[str], list[int], list[list[int]]] = Field(
        ..., description="A text, texts, token ids, or lists of token ids; each one embedding.")
    model: str | None = None
    encoding_format: Literal["float", "base64"] = Field("float", description="base64: little-endian float32.")
    dimensions: int | None = Field(None, ge=1, description="Fewer dimensions, for models trained to allow it "
                                                           "(Matryoshka); the vector is re-normalized.")
    truncate: bool = Field(False, description="Cut inputs longer than the context instead of refusing them.")
    user: str | None = None


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: Union[list[float], str]


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(BaseModel):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage


class RerankRequest(RequestBody):
    """The Jina / Cohere rerank request llama.cpp's server takes."""

    query: str
    documents: list[Union[str, dict[str, Any]]] = Field(..., min_length=1,
                                                        description='Texts, or objects with a "text".')
    model: str | None = None
    top_n: int | None = Field(None, ge=1, description="Return the best N only.")
    return_documents: bool = Field(False, description="Echo each document's text in its result.")
    truncate: bool = Field(False, description="Cut pairs longer than the context instead of refusing them.")


class RerankDocument(BaseModel):
    text: str


class RerankResult(BaseModel):
    index: int
    relevance_score: float
    document: RerankDocument | None = None


class RerankResponse(BaseModel):
    object: Literal["list"] = "list"
    model: str
    results: list[RerankResult]
    usage: EmbeddingUsage


# --- errors ----------------------------------------------------------------------------------

class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorDetail
