"""Tool calling through the real server with the real `openai` client, on both real models.

Neither SmolLM2's nor Gemma 3's chat template shows tools, so both take the generic preamble and
the hermes-style call text; what is checked is what a client sees: calls whose arguments parse and
validate against the tool's parameters, OpenAI's response shape (string arguments, unique ids,
content null, finish_reason "tool_calls"), streams that reassemble to the non-streamed answer,
and a whole loop (call -> tool result -> answer). The per-family formats are checked on the
families' own templates in test_tool_formats.py."""
from __future__ import annotations

import json

import httpx
import jsonschema
import pytest

from support.api_errors import api_error
from support.server_process import openai_client

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object", "required": ["city"], "properties": {
        "city": {"type": "string", "maxLength": 40}, "unit": {"enum": ["celsius", "fahrenheit"]}}}}}
ADD = {"type": "function", "function": {
    "name": "add", "description": "Adds two integers.",
    "parameters": {"type": "object", "required": ["a", "b"], "properties": {
        "a": {"type": "integer", "minimum": -1000, "maximum": 1000},
        "b": {"type": "integer", "minimum": -1000, "maximum": 1000}}}}}
SEARCH = {"type": "function", "function": {
    "name": "search_notes", "description": "Searches the user's notes.",
    "parameters": {"type": "object", "required": ["query", "limit"], "properties": {
        "query": {"type": "string", "minLength": 1, "maxLength": 60},
        "limit": {"type": "integer", "minimum": 1, "maximum": 10},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3}}}}}
TOOLS = [WEATHER, ADD, SEARCH]
PARAMETERS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
QUESTION = [{"role": "user", "content": "What is the weather like in Paris right now?"}]
MODEL = "tools-test"
SAMPLING = dict(temperature=0, max_tokens=120, seed=3)


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def client(request, tmp_path_factory):
    path = request.getfixturevalue(f"{request.param}_path")
    with openai_client(path, MODEL, tmp_path_factory.mktemp("tools"), "-c", "2048") as client:
        yield client


def check_calls(message, names=None) -> None:
    assert message.tool_calls, message
    ids = [c.id for c in message.tool_calls]
    assert len(set(ids)) == len(ids) and all(ids)
    for call in message.tool_calls:
        assert call.type == "function"
        assert isinstance(call.function.arguments, str)
        assert names is None or call.function.name in names
        jsonschema.validate(json.loads(call.function.arguments), PARAMETERS[call.function.name])


@pytest.mark.parametrize("parallel", [None, True])
def test_required_gives_calls_that_validate(client, parallel):
    extra = {} if parallel is None else {"parallel_tool_calls": parallel}
    r = client.chat.completions.create(model=MODEL, messages=QUESTION, tools=TOOLS, tool_choice="required",
                                       **SAMPLING, **extra)
    choice = r.choices[0]
    check_calls(choice.message)
    if parallel is None:   # no template tool support: one call unless asked
        assert len(choice.message.tool_calls) == 1
    assert choice.finish_reason == "tool_calls" or (parallel and choice.finish_reason == "length")
    assert choice.message.content is None


def test_a_named_function_is_the_one_called(client):
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "What is 12 plus 30?"}],
                                       tools=TOOLS, tool_choice={"type": "function", "function": {"name": "add"}},
                                       **SAMPLING)
    check_calls(r.choices[0].message, names={"add"})
    assert r.choices[0].finish_reason == "tool_calls"


def test_auto_answers_text_or_valid_calls(client):
    r = client.chat.completions.create(model=MODEL, messages=QUESTION, tools=TOOLS, **SAMPLING)
    message = r.choices[0].message
    if message.tool_calls:
        check_calls(message)
        assert r.choices[0].finish_reason in ("tool_calls", "length")
    else:
        assert message.content and "<tool_call>" not in message.content
        assert r.choices[0].finish_reason in ("stop", "length")


def test_none_never_calls(client):
    r = client.chat.completions.create(model=MODEL, messages=QUESTION, tools=TOOLS, tool_choice="none",
                                       temperature=0, max_tokens=24)
    assert r.choices[0].message.tool_calls is None and r.choices[0].message.content


def reassemble(stream) -> tuple[str | None, list[dict], str]:
    """content, calls (id, name, arguments) and finish_reason from stream chunks, as an agent
    framework would put them together; checks the delta protocol on the way."""
    content, calls, finish = None, {}, None
    for chunk in stream:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        delta = choice.delta
        if delta.content:
            content = (content or "") + delta.content
        for d in delta.tool_calls or []:
            if d.index not in calls:
                assert d.id and d.type == "function" and d.function.name and d.function.arguments == ""
                calls[d.index] = {"id": d.id, "name": d.function.name, "arguments": ""}
            else:
                assert d.id is None and d.function.name is None
                calls[d.index]["arguments"] += d.function.arguments
        finish = choice.finish_reason or finish
    return content, [calls[i] for i in sorted(calls)], finish


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "search_notes"}}])
def test_streamed_calls_reassemble_to_the_non_streamed_ones(client, tool_choice):
    messages = [{"role": "user", "content": "Find my notes about the garden, at most 3."}]
    whole = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS, tool_choice=tool_choice,
                                           **SAMPLING)
    content, calls, finish = reassemble(client.chat.completions.create(
        model=MODEL, messages=messages, tools=TOOLS, tool_choice=tool_choice, stream=True, **SAMPLING))
    expected = [(c.function.name, c.function.arguments) for c in whole.choices[0].message.tool_calls]
    assert [(c["name"], c["arguments"]) for c in calls] == expected
    assert content == whole.choices[0].message.content and finish == whole.choices[0].finish_reason


@pytest.mark.parametrize("max_tokens", [3, 20])
def test_a_call_cut_by_max_tokens_reads_the_same_streamed_or_not(client, max_tokens):
    # As OpenAI's: finish_reason "length" with the call as far as it got, and no markup as content.
    messages = [{"role": "user", "content": "Find my notes about the garden, at most 3."}]
    args = dict(model=MODEL, messages=messages, tools=TOOLS, tool_choice="required", max_tokens=max_tokens,
                temperature=0)
    whole = client.chat.completions.create(**args)
    content, calls, finish = reassemble(client.chat.completions.create(stream=True, **args))
    message = whole.choices[0].message
    assert whole.choices[0].finish_reason == finish == "length" and message.content is None and content is None
    assert [(c.function.name, c.function.arguments) for c in message.tool_calls or []] == \
        [(c["name"], c["arguments"]) for c in calls]
    assert bool(calls) == (max_tokens == 20), calls   # (3 tokens do not reach the name)


def test_a_whole_loop_call_result_answer(client):
    first = client.chat.completions.create(model=MODEL, messages=QUESTION, tools=[WEATHER], tool_choice="required",
                                           **SAMPLING)
    call = first.choices[0].message.tool_calls[0]
    messages = QUESTION + [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 18, "sky": "clear"})},
    ]
    second = client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER], tool_choice="none",
                                            temperature=0, max_tokens=40)
    assert second.choices[0].message.content and second.choices[0].message.tool_calls is None
    # The call and its result reached the prompt: they cost tokens beyond the question's.
    without = client.chat.completions.create(model=MODEL, messages=messages[:2], tools=[WEATHER],
                                             tool_choice="none", temperature=0, max_tokens=1)
    question = client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0, max_tokens=1)
    assert second.usage.prompt_tokens > without.usage.prompt_tokens + 10 > question.usage.prompt_tokens + 20


def test_tool_errors_are_400_naming_the_field(client):
    url = str(client.base_url).rstrip("/")
    cases = [
        ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools.0.function.name"),
        ({"tools": [WEATHER, WEATHER]}, "tools.1.function.name"),
        ({"tools": [{"type": "retrieval"}]}, "tools.0.type"),
        ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
         "tool_choice.function.name"),
        ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"x": {"type": "string", "format": "no-such-format"}}}}}]},
         "tools.0.function.parameters"),
        ({"tools": [WEATHER, {"type": "function", "function": {"name": "tag", "parameters": {   # not inside calls
            "type": "object", "properties": {"t": {"type": "array", "uniqueItems": True}}}}}]},
         "tools.1.function.parameters"),
        ({"tools": [WEATHER], "response_format": {"type": "json_object"}}, "response_format"),
    ]
    for extra, param in cases:
        r = httpx.post(f"{url}/chat/completions", json={"messages": QUESTION, **extra}, timeout=60)
        api_error(r, param=param)
    bad_history = QUESTION + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{not json"}}]}]
    r = httpx.post(f"{url}/chat/completions", json={"messages": bad_history, "tools": [WEATHER]}, timeout=60)
    api_error(r, param="messages.1.tool_calls.0.function.arguments")
