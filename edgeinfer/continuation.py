"""A final assistant message continued instead of answered: llama.cpp's assistant prefill and
`continue_final_message` (newest llama-server's rules, which vLLM's field of the same name shares).

The prompt is the conversation before that message, rendered without a generation prompt, then
the assistant's turn opened as the template opens it and the message's parts written after it:

    harmony  <|start|>assistant<|channel|>analysis<|message|>REASONING
             [<|end|><|start|>assistant<|channel|>final<|message|>CONTENT]
    think    the generation prompt cut before any <think> it writes, then
             <think>REASONING[</think>CONTENT]
    other    the generation prompt, then CONTENT

"content" continues the answer (the reasoning, if given, is closed first); "reasoning"
continues the reasoning. The generated text is the continuation only, read from inside the part
it continues (edgeinfer.reasoning.ReasoningStyle.continued).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping, Sequence

from edgeinfer.chat_template import ChatPrompt, tokenize_chat_prompt
from edgeinfer.reasoning import CHANNEL, END, MESSAGE, START, THINK_CLOSE, THINK_OPEN, ReasoningStyle, reasoning_style

HARMONY_RETURN = "<|return|>"
CONTENT, REASONING = "content", "reasoning"


class ContinuationError(ValueError):
    """A request whose final message cannot be continued; the message says why."""


def continuation_mode(messages: Sequence[Mapping[str, Any]], requested: bool | str | None) -> str:
    """"content", "reasoning" or "" (a new turn) for `messages`, given the request's
    `continue_final_message` (None: not given; then a final assistant message is continued, as
    llama-server prefills it by default)."""
    last = messages[-1] if messages else {}
    if requested is None:
        if last.get("role") != "assistant":
            return ""
        if len(messages) >= 2 and messages[-2].get("role") == "assistant":
            raise ContinuationError("Cannot have 2 or more assistant messages at the end of the list.")
        requested = True
    if requested is False:
        return ""
    if last.get("role") != "assistant":
        raise ContinuationError("continue_final_message needs an assistant message at the end of the list.")
    if last.get("tool_calls"):
        raise ContinuationError("Cannot continue an assistant message that contains tool calls.")
    if requested is True:   # the part the message stops in: its reasoning when it has nothing else
        return REASONING if _reasoning(last) and not _content(last) else CONTENT
    return REASONING if requested == "reasoning_content" else CONTENT


def continued_prompt(model: Any, messages: Sequence[Mapping[str, Any]], mode: str,
                     tools: Sequence[Mapping[str, Any]] | None = None,
                     template_kwargs: Mapping[str, Any] | None = None) -> tuple[ChatPrompt, ReasoningStyle | None]:
    """The prompt that continues `messages[-1]` in `mode`, and how to read what is generated
    after it (None: all of it is content)."""
    before, last = list(messages[:-1]), messages[-1]
    closed = model.chat_prompt(before, add_generation_prompt=False, tools=tools, template_kwargs=template_kwargs).text
    opened = model.chat_prompt(before, add_generation_prompt=True, tools=tools, template_kwargs=template_kwargs).text
    style = reasoning_style(model.chat_template.source, opened)
    reasoning, content = _reasoning(last), _content(last)
    if style is not None and style.name == "harmony":
        text = closed + f"{START}assistant{CHANNEL}analysis{MESSAGE}" + reasoning
        if mode == CONTENT:
            text += f"{END}{START}assistant{CHANNEL}final{MESSAGE}" + content
    elif style is not None:   # think
        generation = opened[len(closed):] if opened.startswith(closed) else ""
        cut = generation.find(THINK_OPEN)
        text = closed + (generation[:cut] if cut >= 0 else generation) + THINK_OPEN + reasoning
        if mode == CONTENT:
            text += THINK_CLOSE + content
    else:
        if mode == REASONING:
            raise ContinuationError("continue_final_message is reasoning_content, but this model does not reason.")
        text = opened + content
    prompt = ChatPrompt(text, tokenize_chat_prompt(model._core.vocab, text), model.chat_template.origin)
    return prompt, (replace(style, continued=mode) if style is not None else None)


def end_not_return(text: str, style: ReasoningStyle | None) -> str:
    """A harmony prompt rendered without a generation prompt, to generate after: its last
    `<|return|>` (the end of a finished conversation) becomes `<|end|>`, so the model goes on
    (llama.cpp's rule, its issue 15417)."""
    if style is None or style.name != "harmony":
        return text
    i = text.rfind(HARMONY_RETURN)
    return text if i < 0 else text[:i] + END + text[i + len(HARMONY_RETURN):]


def _reasoning(message: Mapping[str, Any]) -> str:
    return message.get("reasoning_content") or message.get("thinking") or ""


def _content(message: Mapping[str, Any]) -> str:
    content = message.get("content") or ""
    if isinstance(content, list):   # text parts, joined as llama.cpp renders them
        return "".join(part.get("text", "") for part in content if part.get("type") == "text")
    return content
