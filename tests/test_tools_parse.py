"""The tool layer's pieces without a model: request checks, the answer reader and the text that
shows past calls (the per-family checks on real templates are in test_tool_formats.py)."""
from __future__ import annotations

import json

import pytest

from edgeinfer.tools import ToolCallStream, ToolSpecError, parse_tool_choice, parse_tools
from edgeinfer.tools.formats import FORMATS, GENERIC, HERMES, LLAMA3, MISTRAL_ARGS
from edgeinfer.tools.parse import ArgumentsDelta, CallStart, ContentDelta, json_value_end
from edgeinfer.tools.spec import new_call_id

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


def read(fmt, pieces):
    reader = ToolCallStream(fmt)
    events = [e for p in pieces for e in reader.feed(p)] + reader.finish()
    return reader, events


@pytest.mark.parametrize("tools, field", [
    ("nope", "tools"),
    ([{"type": "function"}], "tools.0.function"),
    ([{"type": "function", "function": {"name": ""}}], "tools.0.function.name"),
    ([{"type": "function", "function": {"name": "a b"}}], "tools.0.function.name"),
    ([{"type": "function", "function": {"name": "f", "description": 3}}], "tools.0.function.description"),
    ([{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}], "tools.0.function.parameters"),
    ([WEATHER, {"type": "code_interpreter"}], "tools.1.type"),
])
def test_malformed_tools_name_the_field(tools, field):
    with pytest.raises(ToolSpecError) as info:
        parse_tools(tools)
    assert info.value.field == field


def test_tool_choice_defaults_and_errors():
    tools = parse_tools([WEATHER])
    assert parse_tool_choice(None, tools).mode == "auto"
    assert parse_tool_choice(None, []).mode == "none"
    named = parse_tool_choice({"type": "function", "function": {"name": "get_weather"}}, tools)
    assert named.forces_call and named.function == "get_weather"
    for bad, field in [("always", "tool_choice"), ({"type": "function", "function": {"name": "x"}},
                                                     "tool_choice.function.name"), (3, "tool_choice")]:
        with pytest.raises(ToolSpecError) as info:
            parse_tool_choice(bad, tools)
        assert info.value.field == field
    with pytest.raises(ToolSpecError):
        parse_tool_choice("required", [])


def test_call_ids_are_unique_and_in_the_familys_style():
    ids = {new_call_id("openai") for _ in range(200)}
    assert len(ids) == 200 and all(i.startswith("call_") for i in ids)
    mistral = new_call_id("mistral")
    assert len(mistral) == 9 and mistral.isalnum()


def test_a_trigger_split_across_pieces_never_leaks_into_the_content():
    text = 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    reader, events = read(HERMES, list(text))   # one character at a time
    content = "".join(e.text for e in events if isinstance(e, ContentDelta))
    assert content == "Let me check." == reader.content
    assert [e.name for e in events if isinstance(e, CallStart)] == ["get_weather"]
    assert "".join(e.text for e in events if isinstance(e, ArgumentsDelta)) == '{"city": "Oslo"}'


def test_text_that_only_looked_like_a_trigger_is_content_at_the_end():
    reader, events = read(HERMES, ["2 < 3 and <tool", "s are fun"])
    assert "".join(e.text for e in events if isinstance(e, ContentDelta)) == "2 < 3 and <tools are fun"
    assert reader.tool_calls == [] and reader.content == "2 < 3 and <tools are fun"


def test_a_call_cut_by_max_tokens_is_there_as_far_as_it_got():
    reader = ToolCallStream(HERMES)
    reader.feed('<tool_call>\n{"name": "get_weather", "arguments": {"ci')
    reader.finish(cut=True)
    assert [(c.name, c.arguments) for c in reader.tool_calls] == [("get_weather", '{"ci')]
    assert reader.content is None


@pytest.mark.parametrize("cut, content", [(True, "Let me see."), (False, "Let me see. <tool")])
def test_a_trigger_cut_by_max_tokens_is_not_content(cut, content):
    # Cut at max_tokens, "<tool" is a call the limit cut off; an answer that ended there itself
    # wrote it as text.
    reader = ToolCallStream(HERMES)
    events = reader.feed("Let me see. <tool") + reader.finish(cut=cut)
    assert "".join(e.text for e in events if isinstance(e, ContentDelta)) == content == reader.content


def test_an_answer_that_is_not_a_well_formed_call_loses_nothing():
    text = "<tool_call>\n{this is not json"
    reader, _ = read(HERMES, [text])
    assert reader.tool_calls == []
    assert reader.text == text


def test_llama3_calls_only_at_the_start():
    reader, _ = read(LLAMA3, ['  {"name": "f", "parameters": {"x": [1, {"y": "}"}]}}'])
    assert [(c.name, json.loads(c.arguments)) for c in reader.tool_calls] == [("f", {"x": [1, {"y": "}"}]})]
    reader, events = read(LLAMA3, ["The answer is ", '{"name": "f"}'])
    assert reader.tool_calls == [] and reader.content == 'The answer is {"name": "f"}'
    _, events = read(LLAMA3, ["<|python_tag|>", '{"name": "f", "parameters": {}}'])
    assert [e.name for e in events if isinstance(e, CallStart)] == ["f"]


def test_mistral_calls_follow_each_other_without_a_separator():
    text = '[TOOL_CALLS]a[ARGS]{"q": 1}[TOOL_CALLS]b[ARGS]{"r": "[ARGS]"}'
    reader, _ = read(MISTRAL_ARGS, [text])
    assert [(c.name, c.arguments) for c in reader.tool_calls] == [("a", '{"q": 1}'), ("b", '{"r": "[ARGS]"}')]


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_calls_text_reads_back_in_every_format(name):
    fmt = FORMATS[name]
    calls = [("get_weather", {"city": "Oslo"}, "a1b2c3d4e")] + ([] if fmt.single_call else [("add", {"a": 1}, "f5g6h7i8j")])
    reader, _ = read(fmt, [fmt.calls_text(calls)])
    assert [(c.name, json.loads(c.arguments)) for c in reader.tool_calls] == [(n, a) for n, a, _ in calls]


@pytest.mark.parametrize("text, end", [('{"a": "}"} tail', 10), ('[1, [2]]', 8), ('{"a": 1', None),
                                       ('"s\\"x"', 6), ("12", None), ("12,", 2), ("true", 4)])
def test_json_value_end(text, end):
    assert json_value_end(text, 0) == end


def test_generic_is_hermes_text():
    assert GENERIC.calls_text([("f", {}, "x")]) == HERMES.calls_text([("f", {}, "x")])
