"""Chat formatting: a conversation -> prompt text -> token ids, through one sandboxed Jinja2 module.

A chat template comes from the model file (`tokenizer.chat_template`), which makes it untrusted
input: it is compiled and rendered only by `ImmutableSandboxedEnvironment` (a plain Jinja
environment lets a template reach `__globals__` and run code). The environment is set up the way
HF transformers sets it up (trim_blocks, lstrip_blocks, loop controls, `raise_exception`,
`strftime_now`, a `tojson` that keeps non-ASCII text), so the templates published with models
render as they do there. Two hardenings on top of the sandbox: touching an unsafe attribute fails
the render at once (the stock sandbox renders it as an empty string), and `*` / `**` cannot build
huge strings or numbers.

When the file has no template, a built-in one is chosen by family: the architecture (Gemma) or
the special tokens the vocabulary has (ChatML, Llama 3). Nothing fitting is an error that asks for
a template; a template that fails is a `ChatTemplateError` naming why. There is no silent fallback.

Tokenizing follows llama.cpp: special-token text is parsed (`parse_special`), and a model that
wants a BOS token gets exactly one, whether or not the template wrote it.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from edgeinfer.errors import ChatTemplateError
from edgeinfer.text_check import require_valid_text

if TYPE_CHECKING:
    import jinja2

Messages = Sequence[Mapping[str, Any]]

FILE_ORIGIN = "from the model file"

# --- built-in templates ----------------------------------------------------------------------------

# Gemma's official turn format: the system message is folded into the first user turn,
# "assistant" is called "model", and the template writes BOS itself.
GEMMA_TEMPLATE = r"""
{{- bos_token -}}
{%- if messages and messages[0]['role'] == 'system' -%}
    {%- set first_user_prefix = messages[0]['content'] ~ '\n\n' -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = '' -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') -}}
    {%- endif -%}
    {%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}
    {{- '<start_of_turn>' ~ role ~ '\n' ~ (first_user_prefix if loop.first else '') -}}
    {{- message['content'] | trim ~ '<end_of_turn>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<start_of_turn>model\n' -}}
{%- endif -%}
"""

CHATML_TEMPLATE = r"""
{%- for message in messages -%}
    {{- '<|im_start|>' ~ message['role'] ~ '\n' ~ message['content'] ~ '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|im_start|>assistant\n' -}}
{%- endif -%}
"""

LLAMA3_TEMPLATE = r"""
{{- bos_token -}}
{%- for message in messages -%}
    {{- '<|start_header_id|>' ~ message['role'] ~ '<|end_header_id|>\n\n' -}}
    {{- message['content'] | trim ~ '<|eot_id|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
{%- endif -%}
"""

BUILTIN_TEMPLATES: dict[str, str] = {
    "gemma": GEMMA_TEMPLATE,
    "chatml": CHATML_TEMPLATE,
    "llama3": LLAMA3_TEMPLATE,
}

# Architectures whose chat format is Gemma's turn format.
GEMMA_ARCHS = frozenset({"gemma", "gemma2", "gemma3", "gemma3n"})

# A special token in the vocabulary -> the built-in template it implies, tried in this order.
TOKEN_TEMPLATES: tuple[tuple[str, str], ...] = (
    ("<|im_start|>", "chatml"),
    ("<|start_header_id|>", "llama3"),
)


# --- messages --------------------------------------------------------------------------------------

def _content_text(content: Any, index: int, has_tool_calls: bool) -> str | None:
    """A message's content as text: parts of type "text" are joined with newlines (as llama.cpp
    does for templates that take plain strings); other part types are refused."""
    if isinstance(content, str):
        require_valid_text(content, f"message {index} content")
        return content
    if content is None:
        if has_tool_calls:
            return None
        raise ValueError(f"message {index} has no 'content'")
    if isinstance(content, Sequence):
        texts = []
        for part in content:
            if not isinstance(part, Mapping) or part.get("type") != "text":
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise ValueError(f"message {index}: unsupported content part {kind!r} "
                                 f"(only text parts are supported)")
            text = str(part.get("text", ""))
            require_valid_text(text, f"message {index} content part {len(texts)}")
            texts.append(text)
        return "\n".join(texts)
    raise ValueError(f"message {index}: 'content' must be a string or a list of text parts, "
                     f"got {type(content).__name__}")


def normalize_messages(messages: Messages | str) -> list[dict[str, Any]]:
    """Copies of the messages with text content; a bare string is one user message."""
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    result = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise ValueError(f"message {i} must be a mapping with a string 'role'")
        copy = dict(message)
        copy["content"] = _content_text(message.get("content"), i, bool(message.get("tool_calls")))
        result.append(copy)
    return result


def _make_environment() -> jinja2.Environment:
    from edgeinfer.template_sandbox import make_environment  # Jinja2 loads with the first template
    return make_environment()


# --- templates -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ChatTemplate:
    """A chat template and the token texts it may write.

    `name` is "model file" for a template read from the GGUF, or the built-in's name."""

    source: str
    name: str
    bos_token: str = ""
    eos_token: str = ""
    env: jinja2.Environment = field(default_factory=_make_environment, repr=False, compare=False)

    @property
    def origin(self) -> str:
        """Where the template came from, for people: "from the model file", "built-in gemma"."""
        return FILE_ORIGIN if self.name == "model file" else f"built-in {self.name}"

    @cached_property
    def _compiled(self) -> jinja2.Template:
        from edgeinfer.template_sandbox import TemplateSyntaxError
        try:
            return self.env.from_string(self.source)
        except TemplateSyntaxError as exc:
            raise ChatTemplateError(f"the chat template ({self.origin}) has a syntax error "
                                    f"on line {exc.lineno}: {exc.message}") from exc

    def render(self, messages: Messages | str, add_generation_prompt: bool = True,
               tools: Sequence[Mapping[str, Any]] | None = None, **extra: Any) -> str:
        """The prompt text for `messages`. `extra` variables (e.g. enable_thinking) are passed
        to the template. Raises ChatTemplateError if the template fails, ValueError for messages
        that are not well-formed."""
        normalized = normalize_messages(messages)
        if "tool_calls" not in self.source:
            # A template that never reads tool_calls would drop the calls (or fail on the null
            # content that comes with them): refuse by name instead of losing them.
            for i, message in enumerate(normalized):
                if message.get("tool_calls"):
                    raise ChatTemplateError(f"message {i} carries tool_calls, which the chat template "
                                            f"({self.origin}) has no way to show")
        context = {
            **extra,
            "messages": normalized,
            "add_generation_prompt": add_generation_prompt,
            "tools": tools,
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
        }
        template = self._compiled
        from edgeinfer.template_sandbox import SecurityError, TemplateRaised
        try:
            return template.render(context)
        except TemplateRaised as exc:
            raise ChatTemplateError(f"the chat template ({self.origin}) refused the "
                                    f"conversation: {exc}") from exc
        except SecurityError as exc:
            raise ChatTemplateError(f"the chat template ({self.origin}) tried something the "
                                    f"sandbox forbids: {exc}") from exc
        except Exception as exc:  # anything else a template can trip on (TypeError, ...)
            raise ChatTemplateError(f"the chat template ({self.origin}) failed to render the "
                                    f"conversation ({exc})") from exc


def choose_template(arch: str, file_template: str | None,
                    has_token: Callable[[str], bool]) -> tuple[str, str]:
    """(source, name) of the template to use: the file's, else a built-in for the family."""
    if file_template:
        return file_template, "model file"
    if arch in GEMMA_ARCHS:
        return BUILTIN_TEMPLATES["gemma"], "gemma"
    for token, name in TOKEN_TEMPLATES:
        if has_token(token):
            return BUILTIN_TEMPLATES[name], name
    raise ChatTemplateError(
        f"the model file has no chat template (tokenizer.chat_template) and its family "
        f"(architecture {arch!r}) has no built-in one; use a plain prompt, or a GGUF that "
        f"carries a chat template")


def make_chat_template(arch: str, file_template: str | None, has_token: Callable[[str], bool],
                       bos_token: str = "", eos_token: str = "") -> ChatTemplate:
    """The chat template for a model, from plain facts about it (see `template_for_vocab`)."""
    source, name = choose_template(arch, file_template, has_token)
    return ChatTemplate(source, name, bos_token, eos_token)


# --- glue to the native vocabulary -----------------------------------------------------------------

def _token_text(vocab: Any, token_id: int) -> str:
    return vocab.token_text(token_id).decode("utf-8", errors="replace") if token_id >= 0 else ""


def _has_special_token(vocab: Any, text: str) -> bool:
    """Whether `text` is one special token of the vocabulary."""
    ids = vocab.tokenize(text, False, True)
    return len(ids) == 1 and vocab.token_text(ids[0]) == text.encode("utf-8")


def template_for_vocab(arch: str, file_template: str | None, vocab: Any) -> ChatTemplate:
    """The chat template for a loaded model (`vocab` is the native `_core.Vocab`)."""
    return make_chat_template(arch, file_template, lambda t: _has_special_token(vocab, t),
                              _token_text(vocab, vocab.bos), _token_text(vocab, vocab.eos))


def tokenize_chat_prompt(vocab: Any, text: str) -> list[int]:
    """Token ids of rendered chat text: special-token text is parsed, nothing else is added,
    except that a model that wants BOS gets exactly one.

    This is llama.cpp's rule (common/chat.cpp strips a template-written BOS when the vocabulary
    adds one itself): a BOS is present if the template wrote it or the model adds it, never
    twice. Two BOS tokens can then only come from the template itself, and are warned about."""
    require_valid_text(text, "the rendered chat prompt")   # a surrogate in a field other than content
    ids = list(vocab.tokenize(text, False, True))
    bos = vocab.bos
    if vocab.add_bos and bos >= 0 and (not ids or ids[0] != bos):
        ids.insert(0, bos)
    if bos >= 0 and ids[:2] == [bos, bos]:
        warnings.warn("the chat prompt starts with two BOS tokens (the chat template writes "
                      "both); the model may answer worse", stacklevel=2)
    return ids


@dataclass
class ChatPrompt:
    """A rendered conversation: its text, its token ids, and which template made it."""

    text: str
    ids: list[int]
    template: str   # ChatTemplate.origin


def apply_chat_template(template: ChatTemplate, vocab: Any, messages: Messages | str,
                        add_generation_prompt: bool = True, **extra: Any) -> ChatPrompt:
    """Renders `messages` with `template` and tokenizes the text for the model."""
    text = template.render(messages, add_generation_prompt=add_generation_prompt, **extra)
    return ChatPrompt(text, tokenize_chat_prompt(vocab, text), template.origin)
