"""Tool calling: tools shown to the model, its calls enforced by a grammar and read back.

    spec.py     the tools, the tool choice and the calls (OpenAI's shapes), checked once
    formats.py  how each model family writes calls; the grammar that enforces them
    prompt.py   what the chat template can show (probed) and what goes around it
    parse.py    the answer read back as content and calls, piece by piece as it streams

`plan_tool_use` ties them together for one conversation: the messages and tools to render and
the grammar to decode with.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from edgeinfer.tools.formats import ToolFormat, tool_grammar
from edgeinfer.tools.parse import ArgumentsDelta, CallStart, ContentDelta, ToolCallStream
from edgeinfer.tools.prompt import ToolSupport, prepare_messages, tool_support
from edgeinfer.tools.spec import (Tool, ToolCall, ToolChoice, ToolSpecError, parse_tool_choice, parse_tools)

__all__ = ["ArgumentsDelta", "CallStart", "ContentDelta", "Tool", "ToolCall", "ToolCallStream", "ToolChoice",
           "ToolPlan", "ToolSpecError", "ToolSupport", "parse_tool_choice", "parse_tools", "plan_tool_use",
           "tool_support", "uses_tools"]


@dataclass
class ToolPlan:
    messages: list[dict[str, Any]]           # to render with the chat template
    template_tools: list[dict[str, Any]] | None
    grammar: str | None                       # Lark; None when no call may be made
    format: ToolFormat | None                 # how to read the answer; None: plain text


def uses_tools(messages: Sequence[Mapping[str, Any]], tools: Sequence[Any] | None) -> bool:
    """Whether the conversation needs the tool layer: tools offered, or past calls or results."""
    return bool(tools) or any(m.get("tool_calls") or m.get("role") == "tool" for m in messages)


def plan_tool_use(support: ToolSupport, messages: Sequence[Mapping[str, Any]], tools: Sequence[Tool],
                  choice: ToolChoice, parallel: bool | None,
                  bound: Callable[[Mapping[str, Any]], dict]) -> ToolPlan:
    """What to render and how to decode; `bound` makes argument schemas finishable
    (edgeinfer.constrain.grammar).

    `parallel` None (not asked) allows several calls in one answer only to a model whose
    template shows tools: such a model was trained to end its turn after its calls, while one
    that only has the generic preamble tends to repeat a call until max_tokens."""
    rendered, template_tools = prepare_messages(messages, support, tools, choice)
    if not tools or choice.mode == "none":
        return ToolPlan(rendered, None, None, None)
    if parallel is None:
        parallel = support.caps.tools
    bounded: dict[str, dict] = {}
    for i, tool in enumerate(tools):
        try:
            bounded[tool.name] = bound(tool.parameters)
        except ValueError as exc:   # a schema the grammar cannot enforce, named by its place
            raise ToolSpecError(f"tools.{i}.function.parameters", str(exc)) from exc
    grammar = tool_grammar(support.format, tools, choice, parallel, support.special_ids, bounded.__getitem__)
    return ToolPlan(rendered, template_tools, grammar, support.format)
