"""Ollama's API requests (https://github.com/ollama/ollama/blob/main/docs/api.md), as far as
edgeinfer serves them: /api/chat, /api/generate, /api/embed, /api/embeddings, /api/show.

Validated as strictly as the OpenAI requests, on the same bases (schemas.StrictModel and
RequestBody): a boolean is a boolean and an integer an integer (Ollama's Go decoder refuses
"stream": "false" and its options "must be of type integer" too), null is the field left out
("stream": null streams, as Ollama's *bool does), and text that has no UTF-8 encoding is refused
naming its field. Unknown fields and options are ignored, as Ollama does."""
from __future__ import annotations

from typing import Any, Literal, Union

from pydantic import Field

from edgeinfer.server.schemas import RequestBody, StrictModel, sampling_field

# Ollama's num_predict: -1 = no limit, -2 = until the context is full; here both (and 0, as
# Ollama's runner reads it) generate up to the context's end.
NUM_PREDICT_MIN = -2


class OllamaOptions(StrictModel):
    """The sampling options both APIs have, within the engine's limits (sampling.LIMITS; the
    OpenAI request they become narrows a few to OpenAI's ranges), and Ollama's other options,
    typed as Ollama types them (it refuses a wrong type) but unused."""

    temperature: float | None = sampling_field("temperature")
    top_k: int | None = sampling_field("top_k")
    top_p: float | None = sampling_field("top_p")
    min_p: float | None = sampling_field("min_p")
    seed: int | None = None
    num_predict: int | None = Field(None, ge=NUM_PREDICT_MIN,
                                    description="Tokens at most; -1, -2 or 0 = until the context is full.")
    stop: list[str] | None = None
    repeat_penalty: float | None = sampling_field("repeat_penalty")
    presence_penalty: float | None = sampling_field("presence_penalty")
    frequency_penalty: float | None = sampling_field("frequency_penalty")
    # Ollama's other options (its api.Options), accepted and unused. num_ctx too: Ollama reloads a
    # model to give it another context; here a model's context is set when it loads (--ctx-size,
    # shared by every slot and request), and /api/ps reports it.
    num_ctx: int | None = Field(None, ge=1)
    num_batch: int | None = Field(None, ge=1)
    num_gpu: int | None = None
    main_gpu: int | None = None
    use_mmap: bool | None = None
    num_thread: int | None = None
    num_keep: int | None = None
    typical_p: float | None = None
    repeat_last_n: int | None = None


class OllamaFunctionCall(StrictModel):
    name: str
    arguments: Union[dict[str, Any], str] = Field(default_factory=dict)


class OllamaToolCall(StrictModel):
    function: OllamaFunctionCall


class OllamaMessage(StrictModel):
    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    images: list[str] | None = None
    tool_calls: list[OllamaToolCall] | None = None
    tool_name: str | None = None


KeepAlive = Union[float, str, None]   # seconds, or a duration ("5m"); config.parse_keep_alive reads it


class OllamaGeneration(RequestBody):
    """What /api/chat and /api/generate share."""

    model: str = Field(..., min_length=1)
    options: OllamaOptions | None = None
    format: Union[Literal["", "json"], dict[str, Any], None] = Field(
        None, description='"json", or a JSON Schema the answer follows.')
    stream: bool = True
    keep_alive: KeepAlive = None
    think: Union[bool, str, None] = None


class OllamaChatRequest(OllamaGeneration):
    messages: list[OllamaMessage] = Field(default_factory=list)
    tools: list[dict[str, Any]] | None = None


class OllamaGenerateRequest(OllamaGeneration):
    prompt: str = ""
    suffix: str | None = None
    system: str | None = None
    template: str | None = None
    context: list[int] | None = None
    raw: bool = False
    images: list[str] | None = None


class OllamaEmbedRequest(RequestBody):
    """/api/embed. No input ("" or []) loads the model and answers no embeddings, as Ollama's does."""

    model: str = Field(..., min_length=1)
    input: Union[str, list[str]] = ""
    truncate: bool = Field(True, description="Ollama cuts over-long inputs unless told not to.")
    dimensions: int | None = Field(None, ge=1)
    options: OllamaOptions | None = None
    keep_alive: KeepAlive = None


class OllamaLegacyEmbedRequest(RequestBody):
    """/api/embeddings, the endpoint /api/embed replaced: one prompt, a vector not normalized; no
    prompt loads the model and answers an empty vector, as Ollama's does."""

    model: str = Field(..., min_length=1)
    prompt: str = ""
    options: OllamaOptions | None = None
    keep_alive: KeepAlive = None


class OllamaModelRequest(RequestBody):
    """/api/show's body: `model`, or the older `name`."""

    model: str | None = None
    name: str | None = None

    @property
    def requested(self) -> str | None:
        return self.model or self.name
