"""What a caller hands over for tool calling, checked once: the tools, the tool choice, and the
calls that come back.

The shapes are OpenAI's (`{"type": "function", "function": {"name", "description", "parameters"}}`,
`tool_choice` "none" / "auto" / "required" / `{"type": "function", "function": {"name": ...}}`),
so the server passes request fields through unchanged and the Python API takes the same values.
Every error is a `ToolSpecError` naming the field (`tools.1.function.name`), which the server
turns into a 400 with that `param`.
"""
from __future__ import annotations

import json
import re
import secrets
import string
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

# OpenAI's rule for function names; it also keeps names safe inside the grammar's string literals.
NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
CHOICES = ("none", "auto", "required")
# A function without `parameters` takes none (OpenAI: "omitting parameters defines a function
# with an empty parameter list").
NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


class ToolSpecError(ValueError):
    """A tools / tool_choice / tool-call value that is not well-formed; `field` says where."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Tool:
    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=lambda: dict(NO_PARAMETERS))

    def as_openai(self) -> dict[str, Any]:
        """The tool as chat templates expect it (HF and OpenAI use the same shape)."""
        function: dict[str, Any] = {"name": self.name}
        if self.description:
            function["description"] = self.description
        function["parameters"] = dict(self.parameters)
        return {"type": "function", "function": function}


@dataclass(frozen=True)
class ToolCall:
    """One call the model made: `arguments` is JSON text (what OpenAI sends), exactly as generated."""

    id: str
    name: str
    arguments: str

    def as_openai(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


def parse_tools(tools: Sequence[Any], field_name: str = "tools") -> list[Tool]:
    """The tools of a request; ToolSpecError for the first one that is not well-formed."""
    if not isinstance(tools, Sequence) or isinstance(tools, (str, bytes)):
        raise ToolSpecError(field_name, "'tools' must be a list of function tools")
    result: list[Tool] = []
    seen: set[str] = set()
    for i, entry in enumerate(tools):
        where = f"{field_name}.{i}"
        if not isinstance(entry, Mapping):
            raise ToolSpecError(where, f"tool {i} must be an object")
        if entry.get("type") != "function":
            raise ToolSpecError(f"{where}.type", f"tool {i}: only tools of type 'function' are supported, "
                                                 f"got {entry.get('type')!r}")
        function = entry.get("function")
        if not isinstance(function, Mapping):
            raise ToolSpecError(f"{where}.function", f"tool {i} needs a 'function' object")
        name = function.get("name")
        if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
            raise ToolSpecError(f"{where}.function.name", f"tool {i}: the function name must be 1-64 letters, "
                                                          f"digits, '_' or '-', got {name!r}")
        if name in seen:
            raise ToolSpecError(f"{where}.function.name", f"tool {i}: the function name {name!r} is used twice")
        seen.add(name)
        description = function.get("description", "")
        if not isinstance(description, str):
            raise ToolSpecError(f"{where}.function.description", f"tool {i}: 'description' must be a string")
        parameters = function.get("parameters")
        if parameters is None:
            parameters = dict(NO_PARAMETERS)
        if not isinstance(parameters, Mapping) or parameters.get("type", "object") != "object":
            raise ToolSpecError(f"{where}.function.parameters", f"tool {i}: 'parameters' must be a JSON Schema "
                                                                f"of type 'object'")
        result.append(Tool(name, description, dict(parameters)))
    return result


@dataclass(frozen=True)
class ToolChoice:
    """"none", "auto", "required", or "function" with the one function that must be called."""

    mode: str
    function: str | None = None

    @property
    def forces_call(self) -> bool:
        return self.mode in ("required", "function")


def parse_tool_choice(choice: Any, tools: Sequence[Tool], field_name: str = "tool_choice") -> ToolChoice:
    """The tool choice (None = OpenAI's default: "auto" with tools, "none" without)."""
    if choice is None:
        return ToolChoice("auto" if tools else "none")
    if isinstance(choice, str):
        if choice not in CHOICES:
            raise ToolSpecError(field_name, f"'tool_choice' must be one of {', '.join(CHOICES)} or a named "
                                            f"function, got {choice!r}")
        if choice == "required" and not tools:
            raise ToolSpecError(field_name, "'tool_choice' is 'required' but there are no tools")
        return ToolChoice(choice)
    if isinstance(choice, Mapping) and choice.get("type") == "function":
        function = choice.get("function")
        name = function.get("name") if isinstance(function, Mapping) else None
        if not isinstance(name, str):
            raise ToolSpecError(f"{field_name}.function.name", "a named tool choice needs 'function.name'")
        if name not in {t.name for t in tools}:
            raise ToolSpecError(f"{field_name}.function.name", f"'tool_choice' names {name!r}, which is not "
                                                               f"one of the tools")
        return ToolChoice("function", name)
    raise ToolSpecError(field_name, "'tool_choice' must be 'none', 'auto', 'required' or "
                                    "{'type': 'function', 'function': {'name': ...}}")


def arguments_object(arguments: Any, field_name: str) -> Any:
    """A call's arguments as a JSON value for a chat template: OpenAI sends JSON text, templates
    (HF's convention) expect the object, so text is parsed; what is not JSON stays text."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except json.JSONDecodeError:
            raise ToolSpecError(field_name, "the tool call's 'arguments' is not valid JSON") from None
    return arguments


_ALNUM = string.ascii_letters + string.digits


def new_call_id(style: str) -> str:
    """A fresh tool-call id: OpenAI's "call_" + 24 hex digits, or the 9 letters and digits that
    Mistral's templates insist on (they refuse any other id when the call is sent back)."""
    if style == "mistral":
        return "".join(secrets.choice(_ALNUM) for _ in range(9))
    return "call_" + secrets.token_hex(12)
