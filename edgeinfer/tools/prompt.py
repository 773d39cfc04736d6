"""Showing tools and past calls to a model through its chat template, or around it where the
template cannot.

What a template can show is found by rendering probes, not by reading its name: a probe tool,
an assistant message with a probe call, and a tool message with a probe result, each checked for
in the output (`TemplateCaps`). Then, per conversation:
  * tools the template renders go to it as `tools`; otherwise a documented preamble in the system
    message lists them and shows the call format (GENERIC_PREAMBLE);
  * past calls go to the template as `tool_calls` with their arguments as objects (the HF
    convention every family's template follows; OpenAI sends JSON text); a template that cannot
    show them gets the calls written in the family's own text as the message content;
  * tool results go as `tool` messages; a template that cannot show them gets them as a user
    message, each result in <tool_response> tags (consecutive results in one message, since
    some templates insist that user and assistant turns alternate).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from edgeinfer.chat_template import ChatTemplate, normalize_messages
from edgeinfer.errors import ChatTemplateError
from edgeinfer.tools.formats import ToolFormat, detect_format
from edgeinfer.tools.spec import Tool, ToolChoice, ToolSpecError, arguments_object

_PROBE_NAME = "edgeinfer_probe_function"
_PROBE_ARGUMENT = "edgeinfer_probe_argument"
_PROBE_RESULT = "edgeinfer_probe_result"
_PROBE_ID = "probe0001"   # 9 letters and digits: Mistral's templates refuse other ids

GENERIC_PREAMBLE = """You can call these tools (JSON Schema of each one's arguments under "parameters"):
{tools}

To call a tool, answer with the call in this form (one block per call, nothing after it):
<tool_call>
{{"name": "<tool name>", "arguments": <the arguments as a JSON object>}}
</tool_call>
Otherwise answer in plain text."""


@dataclass(frozen=True)
class TemplateCaps:
    """What a chat template shows of tool use."""

    tools: bool           # the `tools` it is given
    tool_calls: bool      # an assistant message's `tool_calls`
    tool_responses: bool  # `tool` messages


def _renders(template: ChatTemplate, probe: str, messages: list[dict], **extra: Any) -> bool:
    try:
        return probe in template.render(messages, add_generation_prompt=False, **extra)
    except (ChatTemplateError, ValueError):
        return False


def probe_template(template: ChatTemplate) -> TemplateCaps:
    tool = Tool(_PROBE_NAME, "A probe.", {"type": "object", "properties": {_PROBE_ARGUMENT: {"type": "string"}}})
    user = {"role": "user", "content": "Hello"}
    call = {"id": _PROBE_ID, "type": "function", "function": {"name": _PROBE_NAME, "arguments": {_PROBE_ARGUMENT: "x"}}}
    listed = [tool.as_openai()]
    tools = _renders(template, _PROBE_NAME, [user], tools=listed)
    # The tools go along with the other probes too: some templates cannot render without them.
    tool_calls = _renders(template, _PROBE_ARGUMENT, [user, {"role": "assistant", "content": "",
                                                             "tool_calls": [call]}], tools=listed)
    answer = {"role": "assistant", "content": "", "tool_calls": [call]} if tool_calls else \
        {"role": "assistant", "content": "Calling."}
    tool_responses = _renders(template, _PROBE_RESULT, [user, answer, {
        "role": "tool", "tool_call_id": _PROBE_ID, "name": _PROBE_NAME, "content": _PROBE_RESULT}], tools=listed)
    return TemplateCaps(tools, tool_calls, tool_responses)


@dataclass(frozen=True)
class ToolSupport:
    """How one model takes part in tool use: its template's abilities, its call format, and the
    format's markers that its vocabulary holds as special tokens (marker -> token id)."""

    caps: TemplateCaps
    format: ToolFormat
    special_ids: Mapping[str, int]


def tool_support(template: ChatTemplate, special_token_id: Any) -> ToolSupport:
    """`special_token_id(text)` is the id of `text` when it is one special token, else None."""
    caps = probe_template(template)
    fmt = detect_format(template.source, caps.tools)
    special = {m: i for m in fmt.markers if (i := special_token_id(m)) is not None}
    return ToolSupport(caps, fmt, special)


def _checked_calls(calls: Any, where: str) -> list[tuple[str, Any, str]]:
    """(name, arguments object, id) of a message's tool_calls, checked."""
    if not isinstance(calls, Sequence) or isinstance(calls, (str, bytes)):
        raise ToolSpecError(where, "'tool_calls' must be a list")
    result = []
    for j, call in enumerate(calls):
        at = f"{where}.{j}"
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            raise ToolSpecError(f"{at}.function", "a tool call needs 'function' with a 'name'")
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            raise ToolSpecError(f"{at}.id", "a tool call needs its 'id'")
        arguments = arguments_object(function.get("arguments", {}), f"{at}.function.arguments")
        result.append((function["name"], arguments, call_id))
    return result


def prepare_messages(messages: Sequence[Mapping[str, Any]], support: ToolSupport, tools: Sequence[Tool],
                     choice: ToolChoice) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """(messages, tools) to render with the template for this conversation (see the module doc).
    Tools are shown unless the choice is "none"."""
    fmt = support.format
    names: dict[str, str] = {}   # call id -> function name, for results the template cannot show
    out: list[dict[str, Any]] = []
    from_tool: list[bool] = []
    for i, message in enumerate(normalize_messages(messages)):
        message = dict(message)
        if message.get("tool_calls"):
            calls = _checked_calls(message["tool_calls"], f"messages.{i}.tool_calls")
            names.update((call_id, name) for name, _, call_id in calls)
            if support.caps.tool_calls:
                # Text, never null: several templates test or concatenate the content.
                message["content"] = message.get("content") or ""
                message["tool_calls"] = [{"id": call_id, "type": "function",
                                          "function": {"name": name, "arguments": arguments}}
                                         for name, arguments, call_id in calls]
            else:
                text = message.get("content") or ""
                message["content"] = (text + "\n" if text else "") + fmt.calls_text(calls)
                del message["tool_calls"]
        if message["role"] == "tool" and not support.caps.tool_responses:
            result = f"<tool_response>\n{message.get('content') or ''}\n</tool_response>"
            if out and from_tool[-1]:
                out[-1]["content"] += "\n" + result
                continue
            message = {"role": "user", "content": result}
            out.append(message)
            from_tool.append(True)
            continue
        if message["role"] == "tool" and "name" not in message and message.get("tool_call_id") in names:
            message["name"] = names[message["tool_call_id"]]   # some templates show the function's name
        if message["role"] == "user" and out and from_tool[-1]:
            out[-1]["content"] += "\n" + (message.get("content") or "")   # keep turns alternating
            continue
        out.append(message)
        from_tool.append(False)
    if not tools or choice.mode == "none":
        return out, None
    if support.caps.tools:
        return out, [t.as_openai() for t in tools]
    listed = "\n".join(json.dumps(t.as_openai()["function"], ensure_ascii=False) for t in tools)
    preamble = GENERIC_PREAMBLE.format(tools=listed)   # the format is then GENERIC (detect_format)
    if out and out[0]["role"] == "system":
        out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{preamble}"}
    else:
        out.insert(0, {"role": "system", "content": preamble})
    return out, None
