"""Ollama's API requests (https://github.com/ollama/ollama/blob/main/docs/api.md), as far as
edgeinfer serves them: /api/chat, /api/generate, /api/show. Unknown fields are ignored, as Ollama
does; the options edgeinfer has no use for (its runner's knobs: num_gpu, num_thread, ...) too."""
from __future__ import annotations

from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class OllamaOptions(_Lenient):
    """The sampling options both APIs have; the others Ollama accepts are accepted and unused."""

    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    seed: int | None = None
    num_predict: int | None = Field(None, description="Tokens at most; -1 or -2 = until the context is full.")
    stop: list[str] | None = None
    repeat_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None


class OllamaFunctionCall(_Lenient):
    name: str
    arguments: Union[dict[str, Any], str] = Field(default_factory=dict)


class OllamaToolCall(_Lenient):
    function: OllamaFunctionCall


class OllamaMessage(_Lenient):
    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    images: list[str] | None = None
    tool_calls: list[OllamaToolCall] | None = None
    tool_name: str | None = None


class _Generation(_Lenient):
    model: str = Field(..., min_length=1)
    options: OllamaOptions | None = None
    format: Union[Literal["", "json"], dict[str, Any], None] = Field(
        None, description='"json", or a JSON Schema the answer follows.')
    stream: bool = True
    keep_alive: Union[float, str, None] = None
    think: Union[bool, str, None] = None


class OllamaChatRequest(_Generation):
    messages: list[OllamaMessage] = Field(default_factory=list)
    tools: list[dict[str, Any]] | None = None


class OllamaGenerateRequest(_Generation):
    prompt: str = ""
    suffix: str | None = None
    system: str | None = None
    template: str | None = None
    context: list[int] | None = None
    raw: bool = False
    images: list[str] | None = None


class OllamaEmbedRequest(_Lenient):
    model: str = Field(..., min_length=1)
    input: Union[str, list[str]]
    truncate: bool = Field(True, description="Ollama cuts over-long inputs unless told not to.")
    dimensions: int | None = Field(None, ge=1)
    options: OllamaOptions | None = None
    keep_alive: Union[float, str, None] = None


class OllamaLegacyEmbedRequest(_Lenient):
    """/api/embeddings, the endpoint /api/embed replaced: one prompt, a vector not normalized."""

    model: str = Field(..., min_length=1)
    prompt: str
    options: OllamaOptions | None = None
    keep_alive: Union[float, str, None] = None


class OllamaModelRequest(_Lenient):
    """/api/show's body: `model`, or the older `name`."""

    model: str | None = None
    name: str | None = None

    @property
    def requested(self) -> str | None:
        return self.model or self.name
